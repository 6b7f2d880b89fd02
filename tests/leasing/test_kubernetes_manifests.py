"""Every manifest Cardpool sends or ships is valid Kubernetes: the backend's objects
(leasing/backends/kubernetes_manifests.py) and the portal's own deployment
(deploy/kubernetes/), checked against the OpenAPI schema of every supported version with
``kubernetes-validate`` (strict: an unknown field is an error). The objects the backend
really sends are checked again by the API stand-in (tests/leasing/kube_fake.py)."""

from pathlib import Path

import pytest
import yaml

from leasing.backends import kubernetes_manifests as m
from leasing.choices import PRIORITY_RANK

kubernetes_validate = pytest.importorskip("kubernetes_validate")

DEPLOY = Path(__file__).resolve().parents[2] / "deploy" / "kubernetes"


def backend_manifests() -> list[dict]:
    labels = m.lease_labels(7, "alice", "vision")
    pod = m.pod(
        name=m.pod_name(7),
        namespace_name="cardpool-vision",
        lease_id=7,
        username="alice",
        team="vision",
        node="gpu01",
        resource="huawei.com/Ascend910",
        count=8,
        image="registry.example.org/cann:8.0",
        priority="preemptible",
        grace_seconds=30,
        uid=1000,
        gid=1000,
        env={"CARDPOOL_LEASE": "7"},
        command=["/bin/sh", "-c", "sleep infinity"],
    )
    return [
        m.namespace("cardpool-vision", team="vision"),
        m.resource_quota("cardpool-vision", hard_cards={"nvidia.com/gpu": 8, "hygon.com/dcu": 4}),
        *[
            m.priority_class(p, value=rank, description=f"Cardpool {p}")
            for p, rank in PRIORITY_RANK.items()
        ],
        pod,
        m.service_account(m.access_name(7), "cardpool-vision", labels),
        m.exec_role(m.access_name(7), "cardpool-vision", labels, pod_names=["lease-7-a"]),
        m.exec_role_binding(m.access_name(7), "cardpool-vision", labels),
        m.token_request(seconds=3600, pod_name_="lease-7-a", pod_uid="0000-1111"),
    ]


def deploy_manifests() -> list[tuple[str, dict]]:
    docs = []
    for path in sorted(DEPLOY.glob("*.yaml")):
        docs.extend((path.name, doc) for doc in yaml.safe_load_all(path.read_text()) if doc)
    return docs


@pytest.mark.parametrize("version", m.SUPPORTED_VERSIONS)
def test_the_backends_manifests_are_valid(version):
    for manifest in backend_manifests():
        kubernetes_validate.validate(manifest, version, strict=True)


@pytest.mark.parametrize("version", m.SUPPORTED_VERSIONS)
def test_the_portals_deployment_is_valid(version):
    docs = deploy_manifests()
    kinds = sorted({doc["kind"] for _, doc in docs})
    assert kinds == [
        "ClusterRole",
        "ClusterRoleBinding",
        "ConfigMap",
        "Deployment",
        "Job",
        "Namespace",
        "Secret",
        "Service",
        "ServiceAccount",
    ]
    for _name, doc in docs:
        kubernetes_validate.validate(doc, version, strict=True)


def test_an_invalid_manifest_is_refused():
    """The check can fail: a misspelt field and a wrong type are errors."""
    pod = backend_manifests()[6]
    assert pod["kind"] == "Pod"
    pod["spec"]["containers"][0]["resorces"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(pod, m.SUPPORTED_VERSIONS[-1], strict=True)
    quota = m.resource_quota("x", hard_cards={})
    quota["spec"]["hard"] = ["requests.nvidia.com/gpu"]
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(quota, m.SUPPORTED_VERSIONS[0], strict=True)


def test_the_pod_is_bound_by_affinity_and_never_preempts_for_kubernetes():
    pod = backend_manifests()[6]
    assert "nodeName" not in pod["spec"]
    assert pod["spec"]["containers"][0]["resources"]["requests"] == {"huawei.com/Ascend910": "8"}
    classes = [d for d in backend_manifests() if d["kind"] == "PriorityClass"]
    assert {c["preemptionPolicy"] for c in classes} == {"Never"}
    assert min(classes, key=lambda c: c["value"])["metadata"]["name"] == "cardpool-preemptible"


def test_the_stand_in_refuses_what_the_schema_refuses(kube):
    """The fake's own check can fail too: a misspelt field in a pod is a 422 and recorded."""
    from tests.leasing.kube_fake import ApiFailure

    kube.handle("POST", "/api/v1/namespaces", {}, m.namespace("cardpool-x", team="x"))
    pod = backend_manifests()[6]
    pod["spec"]["nodeSelectr"] = {}
    with pytest.raises(ApiFailure) as refused:
        kube.handle("POST", "/api/v1/namespaces/cardpool-x/pods", {}, pod)
    assert refused.value.code == 422 and "nodeSelectr" in refused.value.message
    assert len(kube.invalid) == 1
    kube.invalid.clear()  # seen: the fixture would fail the test otherwise
