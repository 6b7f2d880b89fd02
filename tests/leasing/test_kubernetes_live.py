"""The kubernetes backend against a real cluster: the whole lease lifecycle (sync the nodes,
request → pod running on the planned node → checkpoint signal through exec → release → the
pod gone, the exec token revoked; a pod deleted behind Cardpool's back reconciled).

Runs when ``KUBECONFIG`` names a cluster with at least one schedulable node advertising a
device resource (nvidia.com/gpu, huawei.com/Ascend910, … or ``CARDPOOL_LIVE_RESOURCE``) and
lets the test pull ``CARDPOOL_LIVE_IMAGE`` (default busybox). It makes and deletes namespace
``cardpool-live-vision`` and PriorityClasses ``cardpool-*``. Skipped, with the reason,
everywhere else — on these machines always: no API server can run here (docs/operations.md,
"Kubernetes backend", says what was tested live and what was not).

    KUBECONFIG=~/.kube/config .venv/bin/pytest -m kubernetes tests/leasing/test_kubernetes_live.py
"""

from __future__ import annotations

import os

import pytest

from leasing.backends.kubernetes_manifests import ASCEND_310P, VENDOR_RESOURCES

RESOURCE = os.environ.get("CARDPOOL_LIVE_RESOURCE", "")
IMAGE = os.environ.get("CARDPOOL_LIVE_IMAGE", "docker.io/library/busybox:1.36")
KNOWN_RESOURCES_LIVE = {*VENDOR_RESOURCES.values(), ASCEND_310P}


def _why_not() -> tuple[str, str]:
    """('', node) when a live run is possible, else (reason, '')."""
    path = os.environ.get("KUBECONFIG", "")
    if not path:
        return "KUBECONFIG is not set: no Kubernetes cluster to test against", ""
    try:
        from kubernetes import client, config
    except ImportError:
        return "the kubernetes client is not installed (pip install '.[kubernetes]')", ""
    try:
        api = client.CoreV1Api(config.new_client_from_config(config_file=path))
        nodes = api.list_node(_request_timeout=10).items
    except Exception as exc:  # any failure to reach the cluster is a reason to skip
        return f"the cluster in KUBECONFIG did not answer: {exc}"[:300], ""
    wanted = {RESOURCE} if RESOURCE else KNOWN_RESOURCES_LIVE
    for node in nodes:
        free = node.status.allocatable or {}
        if not node.spec.unschedulable and any(int(free.get(r, "0")) > 0 for r in wanted):
            return "", node.metadata.name
    return f"no schedulable node advertises any of {sorted(wanted)}", ""


WHY, NODE = _why_not()
pytestmark = [
    pytest.mark.kubernetes,
    pytest.mark.skipif(bool(WHY), reason=WHY or "-"),
]


@pytest.fixture
def live(settings, monkeypatch):
    from leasing.backends import kubernetes as kube_backend

    settings.CARDPOOL = {**settings.CARDPOOL, "BACKEND": "kubernetes"}
    settings.CARDPOOL_KUBERNETES = {
        **getattr(settings, "CARDPOOL_KUBERNETES", {}),
        "KUBECONFIG": os.environ["KUBECONFIG"],
        "NAMESPACE_PREFIX": "cardpool-live-",
        "HOLDER_IMAGE": IMAGE,
        "WAIT_SECONDS": 60,
        "SCHEDULE_SECONDS": 300,
    }
    monkeypatch.setattr(kube_backend, "unix_ids", lambda name: (65534, 65534))  # nobody


@pytest.mark.django_db(transaction=True)
def test_the_whole_lease_lifecycle_on_a_real_cluster(live, alice, vision):
    from django.core.management import call_command

    from inventory.models import Card
    from leasing.backends.kubernetes import KubernetesBackend
    from leasing.choices import LeaseStatus
    from leasing.lifecycle import changes, provisioning
    from leasing.lifecycle.kubernetes import kubernetes_mirror, kubernetes_reconcile
    from tests.factories import CardModelFactory
    from tests.leasing.conftest import ask

    model = CardModelFactory(slug="live-card", name="Live card")
    resources = [RESOURCE] if RESOURCE else sorted(KNOWN_RESOURCES_LIVE)
    call_command("sync_kubernetes", *[f"--map={r}=live-card" for r in resources])
    assert Card.objects.filter(node__hostname=NODE).exists()
    kubernetes_mirror()

    lease = ask(alice, vision, model, count=1)
    assert provisioning.provision_step(lease_id=lease.pk)
    lease.refresh_from_db()
    assert lease.status == LeaseStatus.ACTIVE
    backend = KubernetesBackend()
    holding = provisioning.holding_of(lease)
    (pod,) = backend.pods(holding)
    assert pod["status"]["phase"] == "Running"
    assert pod["spec"]["nodeName"] == holding.nodes[0].hostname
    done = backend.checkpoint(holding, signal="USR1", command="true")
    assert done["command_rc"] == [0]

    changes.lease_release(lease=lease, user=alice)
    assert provisioning.release_step(lease_id=lease.pk)
    assert backend.pods(holding) == []

    lost = ask(alice, vision, model, count=1)
    assert provisioning.provision_step(lease_id=lost.pk)
    (pod,) = backend.pods(provisioning.holding_of(lost))
    backend.delete_pod(pod["metadata"]["namespace"], pod["metadata"]["name"])
    assert lost.pk in kubernetes_reconcile()["ended"]
    assert provisioning.release_step(lease_id=lost.pk)
