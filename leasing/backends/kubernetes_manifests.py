"""The Kubernetes objects the ``kubernetes`` backend sends, as plain dicts (no client needed).

Every builder here is pure: the same inputs give the same manifest, so a call repeated after
a lost answer sends the same object (idempotence on the lease id rests on the names below).
tests/leasing/test_kubernetes_manifests.py validates each one against the Kubernetes
OpenAPI schema (``kubernetes-validate``) of every version in ``SUPPORTED_VERSIONS``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

# Kubernetes minor versions whose schema every manifest is validated against (CI).
SUPPORTED_VERSIONS = ("1.29.0", "1.33.0", "1.37.0")

LABEL_LEASE = "cardpool.io/lease"
LABEL_USER = "cardpool.io/user"
LABEL_TEAM = "cardpool.io/team"
LABEL_MANAGED = "app.kubernetes.io/managed-by"
MANAGED_BY = "cardpool"

# The extended resource each vendor's device plugin advertises, by Cardpool vendor. Sources:
# nvidia.com/gpu — NVIDIA k8s-device-plugin README;
# huawei.com/Ascend910 / huawei.com/Ascend310P — Ascend ascend-device-plugin (MindCluster)
#   docs, "resource name" per chip (910 series incl. 910B, 310P);
# cambricon.com/mlu — Cambricon cambricon-k8s-device-plugin README;
# hygon.com/dcu — Hygon DCU k8s-device-plugin (DTK docs, "hygon.com/dcu");
# kunlunxin.com/xpu — Kunlunxin xpu device plugin (XPU k8s docs);
# metax-tech.com/gpu — MetaX gpu-device-plugin README;
# mthreads.com/gpu — Moore Threads mthreads-device-plugin README;
# iluvatar.ai/gpu — Iluvatar CoreX ix-device-plugin README;
# amd.com/gpu — ROCm k8s-device-plugin README.
# A card model overrides it with CARDPOOL_KUBERNETES["RESOURCES"] (slug=resource) and a node
# with its label ``kubernetes:resource:<slug>`` (written by sync_kubernetes).
VENDOR_RESOURCES = {
    "nvidia": "nvidia.com/gpu",
    "huawei": "huawei.com/Ascend910",
    "cambricon": "cambricon.com/mlu",
    "hygon": "hygon.com/dcu",
    "kunlunxin": "kunlunxin.com/xpu",
    "metax": "metax-tech.com/gpu",
    "moorethreads": "mthreads.com/gpu",
    "iluvatar": "iluvatar.ai/gpu",
    "amd": "amd.com/gpu",
}
# Ascend 310P cards are a resource of their own (the plugin names it after the chip).
ASCEND_310P = "huawei.com/Ascend310P"

# The portal's priority classes, mirrored as PriorityClasses (value = the queue rank,
# preemptible lowest). Kubernetes never preempts for them: the portal decides.
PRIORITY_PREFIX = "cardpool-"


def default_resource(vendor: str, card_model_slug: str) -> str:
    """The vendor's device-plugin resource for a card model, before any setting or label."""
    if vendor == "huawei" and "310p" in card_model_slug.lower():
        return ASCEND_310P
    return VENDOR_RESOURCES.get(vendor, "")


def dns_label(text: str, *, limit: int = 63) -> str:
    """*text* as a DNS-1123 label (lower case, digits, '-'), for namespaces and names."""
    label = re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")
    return (label[:limit].rstrip("-")) or "x"


def label_value(text: str) -> str:
    """*text* as a label value (63 characters of [A-Za-z0-9._-], alphanumeric at both ends)."""
    value = re.sub(r"[^A-Za-z0-9._-]+", "-", text)[:63]
    return value.strip("-._")


def pod_name(lease_id: int, generation: int = 0) -> str:
    """The lease's pod; a replacement (a resize, a swapped card) gets the next generation."""
    return f"lease-{lease_id}" if generation == 0 else f"lease-{lease_id}-g{generation}"


def access_name(lease_id: int) -> str:
    """The lease's ServiceAccount, Role and RoleBinding (kubectl exec into its pod)."""
    return f"lease-{lease_id}-exec"


def priority_class_name(priority: str) -> str:
    return f"{PRIORITY_PREFIX}{priority}"


def _meta(name: str, namespace: str = "", labels: Mapping | None = None) -> dict:
    meta: dict = {"name": name, "labels": {LABEL_MANAGED: MANAGED_BY, **(labels or {})}}
    if namespace:
        meta["namespace"] = namespace
    return meta


def lease_labels(lease_id: int, username: str, team: str) -> dict:
    return {
        LABEL_LEASE: str(lease_id),
        LABEL_USER: label_value(username),
        LABEL_TEAM: label_value(team),
    }


def namespace(name: str, *, team: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": _meta(name, labels={LABEL_TEAM: label_value(team)}),
    }


def resource_quota(namespace_name: str, *, hard_cards: Mapping[str, int]) -> dict:
    """The team's ResourceQuota: ``requests.<resource>`` and ``limits.<resource>`` per device
    resource (extended resources are quota'd by their ``requests.`` name only; ``limits`` is
    kept equal so a tool reading either agrees)."""
    hard = {}
    for resource, cards in sorted(hard_cards.items()):
        hard[f"requests.{resource}"] = str(cards)
    return {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": _meta("cardpool", namespace_name),
        "spec": {"hard": hard},
    }


def priority_class(priority: str, *, value: int, description: str) -> dict:
    return {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": _meta(priority_class_name(priority)),
        "value": value,
        "globalDefault": False,
        "preemptionPolicy": "Never",
        "description": description,
    }


def pod(
    *,
    name: str,
    namespace_name: str,
    lease_id: int,
    username: str,
    team: str,
    node: str,
    resource: str,
    count: int,
    image: str,
    priority: str,
    grace_seconds: int,
    uid: int | None,
    gid: int | None,
    env: Mapping[str, str],
    command: list[str],
    node_label: str = "kubernetes.io/hostname",
) -> dict:
    """One lease's pod: bound to *node* by required node affinity (the scheduler still admits
    it: taints, resources, quota), asking *count* of the vendor's *resource*, running *image*
    as the holder's uid, never restarted (a lease that dies is reconciled, not retried)."""
    security: dict = {"allowPrivilegeEscalation": False}
    pod_security: dict = {"runAsNonRoot": True}
    if uid is not None:
        pod_security["runAsUser"] = uid
    if gid is not None:
        pod_security["runAsGroup"] = gid
        pod_security["fsGroup"] = gid
    quantity = str(count)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": _meta(name, namespace_name, lease_labels(lease_id, username, team)),
        "spec": {
            "restartPolicy": "Never",
            "priorityClassName": priority_class_name(priority),
            "terminationGracePeriodSeconds": grace_seconds,
            "automountServiceAccountToken": False,
            "enableServiceLinks": False,
            "securityContext": pod_security,
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {
                                "matchExpressions": [
                                    {"key": node_label, "operator": "In", "values": [node]}
                                ]
                            }
                        ]
                    }
                }
            },
            "containers": [
                {
                    "name": "lease",
                    "image": image,
                    "command": command,
                    "env": [{"name": k, "value": v} for k, v in sorted(env.items())],
                    "resources": {
                        "requests": {resource: quantity},
                        "limits": {resource: quantity},
                    },
                    "securityContext": security,
                }
            ],
        },
    }


def service_account(name: str, namespace_name: str, labels: Mapping) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": _meta(name, namespace_name, labels),
        "automountServiceAccountToken": False,
    }


def exec_role(name: str, namespace_name: str, labels: Mapping, *, pod_names: list[str]) -> dict:
    """``pods/exec`` on the lease's pod only. ``get`` on that one pod is included because
    ``kubectl exec`` reads the pod (its containers) before it opens the stream."""
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": _meta(name, namespace_name, labels),
        "rules": [
            {
                "apiGroups": [""],
                "resources": ["pods/exec"],
                "resourceNames": list(pod_names),
                "verbs": ["create", "get"],
            },
            {
                "apiGroups": [""],
                "resources": ["pods"],
                "resourceNames": list(pod_names),
                "verbs": ["get"],
            },
        ],
    }


def exec_role_binding(name: str, namespace_name: str, labels: Mapping) -> dict:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": _meta(name, namespace_name, labels),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace_name}],
    }


def token_request(*, seconds: int, pod_name_: str, pod_uid: str) -> dict:
    """A token bound to the lease's pod: it stops working when the pod is deleted, when the
    ServiceAccount is deleted (the release) or after *seconds*, whichever comes first."""
    return {
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenRequest",
        "spec": {
            "audiences": [],
            "expirationSeconds": max(seconds, 600),  # the API's minimum
            "boundObjectRef": {
                "apiVersion": "v1",
                "kind": "Pod",
                "name": pod_name_,
                "uid": pod_uid,
            },
        },
    }


__all__ = [
    "ASCEND_310P",
    "LABEL_LEASE",
    "SUPPORTED_VERSIONS",
    "VENDOR_RESOURCES",
    "access_name",
    "default_resource",
    "dns_label",
    "exec_role",
    "exec_role_binding",
    "namespace",
    "pod",
    "pod_name",
    "priority_class",
    "priority_class_name",
    "resource_quota",
    "service_account",
    "token_request",
]
