"""Keeping Cardpool and a Kubernetes cluster in step (the ``kubernetes`` backend).

Two periodic jobs, each safe to run twice or concurrently:

- ``kubernetes_mirror``: one namespace per team with a ResourceQuota mirroring the team's
  concurrent-card quotas per device resource, and one PriorityClass per portal priority
  (value = its queue rank, preemptible lowest, ``preemptionPolicy: Never``). The quota is
  twice the team's concurrent cards: a resize replaces a pod by making the new one before
  deleting the old, so the cluster must leave room for one replacement; the portal's own
  admission (``leasing.teams``) is the real limit, the ResourceQuota is the cluster's
  backstop against pods made outside Cardpool in the team's namespace. Operators change
  quotas in the portal; the next run (CARDPOOL_KUBERNETES["MIRROR_SECONDS"]) writes them.
- ``kubernetes_reconcile``: an active lease whose pod vanished (deleted outside Cardpool, an
  eviction) or failed ends — reason ``failed`` when its pod failed or its node is not Ready,
  else ``admin`` — like a lost Slurm job; a lease pod whose lease holds no cards is deleted.
  Active leases are read *before* the pods (a lease active then had its pod by then), their
  owners *after* (a pod seen had its lease provisioning by then).
"""

from __future__ import annotations

import logging
from collections import defaultdict
from datetime import datetime

from django.conf import settings
from django.utils import timezone

from inventory.models import CardModel, Node
from leasing.backends import NODE_LABEL
from leasing.backends.kubernetes import KubernetesBackend, resource_for
from leasing.backends.kubernetes_manifests import LABEL_LEASE
from leasing.choices import BACKEND_STATES, PRIORITY_RANK, EndReason, LeaseStatus
from leasing.lifecycle.endings import lease_end_now
from leasing.lifecycle.provisioning import PENDING_CHANGE
from leasing.models import Lease, Quota
from portal.models import Team

logger = logging.getLogger(__name__)

BATCH = 500
NAME = "kubernetes"
# Room for one replacement pod (a resize makes the new pod before it deletes the old one).
QUOTA_HEADROOM = 2


def kubernetes_in_use() -> bool:
    """Whether any lease can be on Kubernetes: the default backend or a node labelled for it."""
    if settings.CARDPOOL["BACKEND"] == NAME:
        return True
    return Node.objects.filter(**{f"labels__{NODE_LABEL}": NAME}).exists()


# --- quotas and priority classes ----------------------------------------------------------


def team_quota_cards(team: Team, config: dict) -> dict[str, int]:
    """{device resource: cards} the team's ResourceQuota allows: its concurrent-card quota per
    card model summed per resource (models sharing ``nvidia.com/gpu`` share the quota),
    capped by its all-models quota (for every resource of the cluster's cards), times
    QUOTA_HEADROOM. A resource with no limit is left
    out (the quota does not constrain it)."""
    limits: dict[str, int | None] = {}  # None: no limit on that resource
    overall: int | None = None
    for quota in Quota.objects.filter(team=team).select_related("card_model"):
        if quota.card_model is None:
            overall = quota.max_concurrent_cards
            continue
        resource = resource_for(quota.card_model.slug, quota.card_model.vendor, None, config)
        if not resource:
            continue
        cards = quota.max_concurrent_cards
        before = limits.get(resource, 0)
        limits[resource] = None if cards is None or before is None else before + cards
    if overall is not None:  # every resource of the cluster's cards is capped by it
        for model in _cluster_card_models():
            resource = resource_for(model.slug, model.vendor, None, config)
            if resource:
                limits.setdefault(resource, None)
        limits = {r: overall if n is None else min(n, overall) for r, n in limits.items()}
    return {r: n * QUOTA_HEADROOM for r, n in sorted(limits.items()) if n is not None}


def _cluster_card_models():
    models = CardModel.objects.filter(cards__isnull=False)
    if settings.CARDPOOL["BACKEND"] != NAME:
        models = models.filter(**{f"cards__node__labels__{NODE_LABEL}": NAME})
    return models.distinct().order_by("slug")


def kubernetes_mirror(*, backend: KubernetesBackend | None = None) -> dict:
    """Write every team's namespace and ResourceQuota and the priority classes (see above)."""
    done: dict = {"quotas": [], "priority_classes": []}
    if not kubernetes_in_use():
        return done
    backend = backend or KubernetesBackend()
    done["priority_classes"] = backend.mirror_priority_classes(
        {str(priority): rank for priority, rank in PRIORITY_RANK.items()}
    )
    for team in Team.objects.order_by("slug"):
        if backend.mirror_quota(team=team.slug, hard_cards=team_quota_cards(team, backend.config)):
            done["quotas"].append(team.slug)
    return done


# --- lost pods --------------------------------------------------------------------------


def _kubernetes_leases(now: datetime):
    leases = Lease.objects.filter(status=LeaseStatus.ACTIVE, end_at__gt=now)
    if settings.CARDPOOL["BACKEND"] != NAME:
        leases = leases.filter(
            **{f"allocations__card__node__labels__{NODE_LABEL}": NAME}
        ).distinct()
    return leases.select_related("user", "card_model").order_by("pk")


def _lease_id(pod: dict) -> int | None:
    try:
        return int(pod["metadata"]["labels"][LABEL_LEASE])
    except (KeyError, ValueError):
        return None


def kubernetes_reconcile(
    *, now: datetime | None = None, backend: KubernetesBackend | None = None
) -> dict:
    """Compare active leases with their pods and fix both kinds of mismatch (see above)."""
    now = now or timezone.now()
    done: dict = {"checked": 0, "ended": [], "deleted": []}
    if not kubernetes_in_use():
        return done
    backend = backend or KubernetesBackend()
    active = list(_kubernetes_leases(now)[:BATCH])
    pods = backend.lease_pods()  # an API error raises: nothing is ended on a failed read
    live: dict[int, list[dict]] = defaultdict(list)
    failed: dict[int, dict] = {}
    for pod in pods:
        lease_id = _lease_id(pod)
        if lease_id is None:
            continue
        phase = pod.get("status", {}).get("phase", "Pending")
        if phase in ("Failed", "Succeeded"):
            failed[lease_id] = pod
        else:
            live[lease_id].append(pod)
    done["checked"] = len(active)

    # A lease whose cards are being changed may be between its old and its new pod.
    lost = [
        lease
        for lease in active
        if lease.pk not in live and PENDING_CHANGE not in (lease.access or {})
    ]
    if lost:
        down = {
            n["metadata"]["name"]
            for n in backend.nodes()
            if not any(
                c.get("type") == "Ready" and c.get("status") == "True"
                for c in n.get("status", {}).get("conditions", [])
            )
        }
        for lease in lost:
            if _end_lost(lease, failed.get(lease.pk), down, now):
                done["ended"].append(lease.pk)

    owned = set(
        Lease.objects.filter(
            pk__in=list(set(live) | set(failed)), status__in=BACKEND_STATES
        ).values_list("pk", flat=True)
    )
    for pod in pods:
        lease_id = _lease_id(pod)
        if lease_id is None or lease_id in owned:
            continue
        meta = pod["metadata"]
        logger.warning(
            "kubernetes: deleting pod %s/%s of lease %s, which holds no cards in Cardpool",
            meta.get("namespace"),
            meta["name"],
            lease_id,
        )
        backend.delete_pod(meta.get("namespace", ""), meta["name"])
        done["deleted"].append(meta["name"])
    return done


def _end_lost(lease: Lease, failed_pod: dict | None, down: set[str], now: datetime) -> bool:
    hosts = set(
        lease.allocations.filter(end_at__gt=now).values_list("card__node__hostname", flat=True)
    )
    nodes_down = sorted(hosts & down)
    if nodes_down:
        reason, why = EndReason.FAILED, "kube_node_down"
    elif failed_pod is not None:
        reason, why = EndReason.FAILED, "kube_pod_failed"
    else:
        reason, why = EndReason.ADMIN, "kube_pod_gone"
    if not lease_end_now(lease, reason, now, why=why, nodes=", ".join(nodes_down)):
        return False
    logger.warning("kubernetes: lease %s ended (%s): %s", lease.pk, reason, why)
    return True


__all__ = [
    "QUOTA_HEADROOM",
    "kubernetes_in_use",
    "kubernetes_mirror",
    "kubernetes_reconcile",
    "team_quota_cards",
]
