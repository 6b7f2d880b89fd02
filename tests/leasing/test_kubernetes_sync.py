"""Nodes and cards from Kubernetes node objects (leasing.backends.kubernetes_sync and
``manage.py sync_kubernetes``): capacity → cards, labels → model/region/interconnect,
cordons → maintenance, NotReady → offline, allocatable below capacity → unhealthy."""

import json

import pytest
from django.core.management import CommandError, call_command

from inventory.models import Card, Node
from leasing.backends.kubernetes_sync import availability_of, kubernetes_sync
from tests.factories import CardModelFactory
from tests.leasing.kube_fake import FakeKubernetes


def nodes(**overrides) -> list[dict]:
    fake = FakeKubernetes()
    fake.add_node(
        "gpu01",
        resources={"nvidia.com/gpu": 4},
        labels={
            "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB",
            "topology.kubernetes.io/region": "north",
            "cardpool.io/interconnect": "nvlink",
        },
        **overrides.get("gpu01", {}),
    )
    fake.add_node(
        "npu01",
        resources={"huawei.com/Ascend910": 8},
        allocatable={"huawei.com/Ascend910": 7},
        labels={"cardpool.io/card-model": "ascend-910b-test"},
        **overrides.get("npu01", {}),
    )
    fake.add_node("cpu01", resources={})
    return fake.all("nodes")


@pytest.fixture
def models(db):
    return (
        CardModelFactory(slug="a100-test", name="A100"),
        CardModelFactory(slug="ascend-910b-test", name="910B", vendor="huawei"),
    )


def test_nodes_and_cards_come_from_capacity_and_labels(models):
    type_map = {"nvidia.com/gpu@NVIDIA-A100-SXM4-80GB": "a100-test"}
    result = kubernetes_sync(nodes=nodes(), type_map=type_map, region="k8s")
    gpu = Node.objects.get(hostname="gpu01")
    assert gpu.region.slug == "north" and gpu.labels["backend"] == "kubernetes"
    assert gpu.labels["kubernetes:resource:a100-test"] == "nvidia.com/gpu"
    assert gpu.labels["kubernetes:interconnect"] == "nvlink"
    assert Card.objects.filter(node=gpu).count() == 4
    npu = Node.objects.get(hostname="npu01")
    assert npu.region.slug == "k8s" and npu.labels["kubernetes:unhealthy"] == "1"
    assert Card.objects.filter(node=npu, card_model__slug="ascend-910b-test").count() == 8
    assert any("1 of 8 huawei.com/Ascend910 are unhealthy" in w for w in result.warnings)
    assert any("cpu01: no card" in w for w in result.warnings)
    again = kubernetes_sync(nodes=nodes(), type_map=type_map, region="k8s")
    assert not again.changed  # idempotent


def test_an_unmapped_resource_is_a_warning_not_an_import(models):
    result = kubernetes_sync(nodes=nodes(), type_map={}, region="k8s")
    assert not Node.objects.filter(hostname="gpu01").exists()
    assert any(
        "map to no card model" in w and "--map nvidia.com/gpu=SLUG" in w for w in result.warnings
    )


def test_cordons_and_readiness_follow_kubernetes_but_leave_operators_alone(models):
    type_map = {"nvidia.com/gpu": "a100-test"}
    kubernetes_sync(nodes=nodes(), type_map=type_map, region="k8s")
    cordoned = nodes(gpu01={"unschedulable": True}, npu01={"ready": "False"})
    assert [availability_of(n) for n in cordoned] == ["up", "drained", "down"]
    result = kubernetes_sync(nodes=cordoned, type_map=type_map, region="k8s")
    assert sorted(result.status_changes) == ["gpu01 active→maintenance", "npu01 active→offline"]
    assert Node.objects.get(hostname="gpu01").status == Node.Status.MAINTENANCE
    kubernetes_sync(nodes=nodes(), type_map=type_map, region="k8s")
    assert Node.objects.get(hostname="gpu01").status == Node.Status.ACTIVE
    # An operator's own maintenance stays when Kubernetes has the node up.
    Node.objects.filter(hostname="npu01").update(
        status=Node.Status.MAINTENANCE, labels={"backend": "kubernetes"}
    )
    kubernetes_sync(nodes=nodes(), type_map=type_map, region="k8s")
    assert Node.objects.get(hostname="npu01").status == Node.Status.MAINTENANCE


def test_the_command_reads_the_cluster_or_a_file(models, kube, tmp_path, capsys):
    kube.add_node("gpu09", resources={"nvidia.com/gpu": 2})
    call_command("sync_kubernetes", "--map", "nvidia.com/gpu=a100-test")
    assert Card.objects.filter(node__hostname="gpu09").count() == 2
    saved = tmp_path / "nodes.json"
    saved.write_text(json.dumps({"items": nodes()}))
    call_command(
        "sync_kubernetes",
        "--from-file",
        str(saved),
        "--dry-run",
        "--map",
        "nvidia.com/gpu=a100-test",
    )
    assert "dry run" in capsys.readouterr().out
    assert not Node.objects.filter(hostname="gpu01").exists()
    with pytest.raises(CommandError, match="--map needs"):
        call_command("sync_kubernetes", "--map", "nvidia.com/gpu")
