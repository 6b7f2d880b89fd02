"""Keeping Cardpool and the cluster in step (leasing.lifecycle.kubernetes), against the API
stand-in: lost and failed pods end their leases, orphan pods go, team quotas and priority
classes are mirrored and follow the operators' changes."""

from leasing.choices import PRIORITY_RANK, EndReason, LeaseStatus
from leasing.lifecycle import changes, provisioning
from leasing.lifecycle import tasks as lease_tasks
from leasing.lifecycle.kubernetes import (
    kubernetes_mirror,
    kubernetes_reconcile,
    team_quota_cards,
)
from leasing.models import Lease, Notification
from leasing.teams.services import quota_set
from tests.factories import CardModelFactory, make_node
from tests.leasing.conftest import ask


def provision(lease):
    assert provisioning.provision_step(lease_id=lease.pk)
    lease.refresh_from_db()
    return lease


def test_a_pod_deleted_outside_cardpool_ends_its_lease(
    frozen, kube, alice, vision, a100, kube_node
):
    kept = provision(ask(alice, vision, a100))  # skipped: its pod is there
    lost = provision(ask(alice, vision, a100))
    (pod,) = kube.pods_of(lost.pk)
    kube.vanish("cardpool-vision", pod["metadata"]["name"])
    done = kubernetes_reconcile()
    assert done["ended"] == [lost.pk] and done["checked"] == 2
    lost.refresh_from_db()
    assert lost.status in (LeaseStatus.RELEASING, LeaseStatus.ENDED)
    assert lost.end_reason == EndReason.ADMIN
    notice = Notification.objects.get(lease=lost, kind="lease_ended")
    assert notice.data["params"]["why"] == "kube_pod_gone"
    kept.refresh_from_db()
    assert kept.status == LeaseStatus.ACTIVE
    assert kubernetes_reconcile()["ended"] == []  # again: nothing more


def test_a_failed_pod_or_a_node_not_ready_ends_its_lease_as_failed(
    frozen, kube, alice, vision, a100, kube_node
):
    failed = provision(ask(alice, vision, a100))
    (pod,) = kube.pods_of(failed.pk)
    kube.set_phase("cardpool-vision", pod["metadata"]["name"], "Failed", "Evicted")
    assert kubernetes_reconcile()["ended"] == [failed.pk]
    failed.refresh_from_db()
    assert failed.end_reason == EndReason.FAILED
    assert provisioning.release_step(lease_id=failed.pk)  # the failed pod is cleaned up
    assert kube.pods_of(failed.pk) == []

    down = provision(ask(alice, vision, a100))
    (pod,) = kube.pods_of(down.pk)
    node = kube.objects[("nodes", "", "gpu01")]
    node["status"]["conditions"] = [{"type": "Ready", "status": "Unknown"}]
    kube.vanish("cardpool-vision", pod["metadata"]["name"])
    assert kubernetes_reconcile()["ended"] == [down.pk]
    down.refresh_from_db()
    assert down.end_reason == EndReason.FAILED
    notice = Notification.objects.get(lease=down, kind="lease_ended")
    assert notice.data["params"] == {"id": down.pk, "why": "kube_node_down", "nodes": "gpu01"}


def test_a_pod_whose_lease_holds_nothing_is_deleted(frozen, kube, alice, vision, a100, kube_node):
    lease = provision(ask(alice, vision, a100))
    (pod,) = kube.pods_of(lease.pk)
    # The release was lost after the lease ended (a crash between the two).
    Lease.objects.filter(pk=lease.pk).update(
        status=LeaseStatus.ENDED, end_reason=EndReason.RELEASED
    )
    assert kubernetes_reconcile()["deleted"] == [pod["metadata"]["name"]]
    assert kube.pods_of(lease.pk) == []


def test_a_lease_between_its_old_and_new_pod_is_not_taken_for_lost(
    frozen, kube, alice, vision, a100, kube_node
):
    lease = provision(ask(alice, vision, a100))
    (pod,) = kube.pods_of(lease.pk)
    provisioning.backend_change_after_commit(lease, now=lease.start_at)
    kube.vanish("cardpool-vision", pod["metadata"]["name"])
    assert kubernetes_reconcile()["ended"] == []


def test_a_failed_read_ends_nothing(frozen, kube, alice, vision, a100, kube_node):
    provision(ask(alice, vision, a100))
    kube.fail_next("GET", "/api/v1/pods", 500)
    assert "error" in lease_tasks.reconcile_kubernetes.run()
    assert Lease.objects.filter(status=LeaseStatus.ACTIVE).count() == 1


def test_reconcile_does_nothing_without_kubernetes(db, settings):
    settings.CARDPOOL = {**settings.CARDPOOL, "BACKEND": "local"}
    assert kubernetes_reconcile() == {"checked": 0, "ended": [], "deleted": []}
    assert kubernetes_mirror() == {"quotas": [], "priority_classes": []}


def test_quotas_are_mirrored_with_room_for_one_replacement_and_follow_changes(
    frozen, kube, ops, vision, nlp, a100, kube_node
):
    quota_set(user=ops, team=vision, card_model=a100, max_concurrent_cards=3)
    done = lease_tasks.mirror_kubernetes.run()
    assert done["quotas"] == ["nlp", "vision"]
    quota = kube.get("resourcequotas", "cardpool-vision", "cardpool")
    assert quota["spec"]["hard"] == {"requests.nvidia.com/gpu": "6"}
    assert kube.get("resourcequotas", "cardpool-nlp", "cardpool")["spec"]["hard"] == {}
    assert (
        kube.get("namespaces", "", "cardpool-vision")["metadata"]["labels"]["cardpool.io/team"]
        == "vision"
    )
    assert kubernetes_mirror()["quotas"] == []  # unchanged: nothing written
    quota_set(user=ops, team=vision, card_model=a100, max_concurrent_cards=5)
    assert kubernetes_mirror()["quotas"] == ["vision"]
    quota = kube.get("resourcequotas", "cardpool-vision", "cardpool")
    assert quota["spec"]["hard"] == {"requests.nvidia.com/gpu": "10"}


def test_priority_classes_are_mirrored_and_kept_in_step(frozen, kube, kube_node):
    written = kubernetes_mirror()["priority_classes"]
    assert written == [f"cardpool-{p}" for p in sorted(PRIORITY_RANK)]
    classes = {pc["metadata"]["name"]: pc for pc in kube.all("priorityclasses")}
    assert {n: pc["value"] for n, pc in classes.items()} == {
        f"cardpool-{p}": rank for p, rank in PRIORITY_RANK.items()
    }
    assert classes["cardpool-preemptible"]["value"] == min(PRIORITY_RANK.values())
    assert all(pc["preemptionPolicy"] == "Never" for pc in classes.values())
    assert kubernetes_mirror()["priority_classes"] == []
    # Changed in the cluster (or a rank changed in the portal): made again with the value.
    pc = kube.objects[("priorityclasses", "", "cardpool-high")]
    pc["value"] = 5
    kube.handle(
        "POST",
        "/apis/scheduling.k8s.io/v1/priorityclasses",
        {},
        {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {
                "name": "cardpool-old",
                "labels": {"app.kubernetes.io/managed-by": "cardpool"},
            },
            "value": 1,
        },
    )
    assert kubernetes_mirror()["priority_classes"] == ["cardpool-high", "cardpool-old"]
    assert kube.get("priorityclasses", "", "cardpool-high")["value"] == PRIORITY_RANK["high"]
    assert kube.get("priorityclasses", "", "cardpool-old") is None


def test_team_quota_cards_sums_models_per_resource_and_caps_by_the_all_models_quota(
    ops, vision, a100, kube_node
):
    h100 = CardModelFactory(slug="h100-test", name="H100 test")
    ascend = CardModelFactory(slug="ascend-910b-test", name="910B", vendor="huawei")
    make_node(ascend, cards=8, hostname="npu01", labels={"backend": "kubernetes"})
    quota_set(user=ops, team=vision, card_model=a100, max_concurrent_cards=3)
    quota_set(user=ops, team=vision, card_model=h100, max_concurrent_cards=2)
    config = {"RESOURCES": {}}
    assert team_quota_cards(vision, config) == {"nvidia.com/gpu": 10}
    quota_set(user=ops, team=vision, card_model=None, max_concurrent_cards=4)
    assert team_quota_cards(vision, config) == {
        "nvidia.com/gpu": 8,
        "huawei.com/Ascend910": 8,
    }
    assert ascend.vendor == "huawei"


def test_a_released_lease_leaves_no_object_behind(frozen, kube, alice, vision, a100, kube_node):
    lease = provision(ask(alice, vision, a100))
    changes.lease_release(lease=lease, user=alice)
    assert provisioning.release_step(lease_id=lease.pk)
    names = {
        o["metadata"]["name"]
        for r in ("pods", "serviceaccounts", "roles", "rolebindings")
        for o in kube.all(r)
    }
    assert not any(n.startswith(f"lease-{lease.pk}") for n in names)
