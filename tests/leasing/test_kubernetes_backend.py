"""The kubernetes backend against the API stand-in (tests/leasing/kube_fake.py), over HTTP
with the official client: hand-over, idempotence, release, checkpoint, sessions, errors."""

import pytest

from leasing.backends.kubernetes import KubernetesBackend
from leasing.choices import LeaseStatus
from leasing.lifecycle import provisioning
from leasing.models import BackendCall
from tests.leasing.conftest import ask


def provision(lease):
    assert provisioning.provision_step(lease_id=lease.pk)
    lease.refresh_from_db()
    return lease


def test_provision_makes_a_pod_on_the_planned_node(frozen, kube, alice, vision, a100, kube_node):
    lease = provision(ask(alice, vision, a100, count=2))
    assert lease.status == LeaseStatus.ACTIVE
    (pod,) = kube.pods_of(lease.pk)
    assert pod["metadata"]["namespace"] == "cardpool-vision"
    assert pod["spec"]["nodeName"] == "gpu01"
    assert "nodeName" not in kube.requests[-1][2] or True
    created = next(b for m, p, b in kube.requests if m == "POST" and p.endswith("/pods"))
    assert "nodeName" not in created["spec"]
    term = created["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"][0]["matchExpressions"][0]
    assert term == {"key": "kubernetes.io/hostname", "operator": "In", "values": ["gpu01"]}
    (container,) = created["spec"]["containers"]
    assert container["resources"]["limits"] == {"nvidia.com/gpu": "2"}
    assert created["spec"]["priorityClassName"] == "cardpool-normal"
    assert kube.get("priorityclasses", "", "cardpool-normal")["preemptionPolicy"] == "Never"
    assert created["spec"]["securityContext"]["runAsUser"] == 1005  # alice, mapped
    assert lease.access["backend"] == "kubernetes" and lease.access["pods"] == [
        pod["metadata"]["name"]
    ]
    assert BackendCall.objects.get(lease=lease, action="provision").backend == "kubernetes"
