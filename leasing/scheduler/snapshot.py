"""Load the planner's picture of one card model from the database."""

from __future__ import annotations

from datetime import datetime

from django.db.models import Q

from inventory.models import Card, Node
from leasing.choices import LeaseStatus
from leasing.models import Allocation, Lease
from leasing.scheduler.planner import CardSlot, Request, Timeline


def card_slots(card_model_id: int, *, now: datetime) -> list[CardSlot]:
    """Cards of the model that can take a lease: healthy, on a node that is up.

    A draining node's cards are usable only by leases that end before its drain time.
    """
    rows = (
        Card.objects.filter(card_model_id=card_model_id, status=Card.Status.OK)
        .filter(
            Q(node__status=Node.Status.ACTIVE)
            | Q(node__status=Node.Status.DRAINING, node__drain_at__gt=now)
        )
        .values_list("pk", "node_id", "interconnect_domain", "node__status", "node__drain_at")
        .order_by("node_id", "index")
    )
    return [
        CardSlot(pk, node_id, domain, drain_at if status == Node.Status.DRAINING else None)
        for pk, node_id, domain, status, drain_at in rows
    ]


def timeline_for(
    card_model_id: int,
    *,
    now: datetime,
    exclude_lease: int | None = None,
    ending_now: frozenset[int] = frozenset(),
) -> Timeline:
    """Busy periods, from now on, of every card of the model.

    A lease marked for preemption is busy only until its ``preempt_at`` (the end of its
    grace period); leases in *ending_now* are treated as if they ended now (what-if).
    """
    timeline = Timeline()
    allocations = Allocation.objects.filter(card__card_model_id=card_model_id, end_at__gt=now)
    if exclude_lease is not None:
        allocations = allocations.exclude(lease_id=exclude_lease)
    rows = allocations.values_list("card_id", "start_at", "end_at", "lease_id", "lease__preempt_at")
    for card_id, start, end, lease_id, preempt_at in rows:
        if lease_id in ending_now:
            continue
        if preempt_at is not None:
            end = min(end, max(preempt_at, now))
        if end > max(start, now):
            timeline.add(card_id, max(start, now), end)
    return timeline


def queued_requests(
    card_model_id: int, *, now: datetime, min_rank: int | None = None
) -> list[Request]:
    """Waiting leases of the model in service order: priority class, then submit time.

    With *min_rank*, only those a new request of that priority would queue behind.
    """
    leases = Lease.objects.filter(card_model_id=card_model_id, status=LeaseStatus.QUEUED)
    if min_rank is not None:
        leases = leases.filter(priority_rank__gte=min_rank)
    rows = leases.order_by("-priority_rank", "submitted_at", "pk").values_list(
        "pk", "count", "duration", "start_at", "same_node"
    )
    return [
        Request(pk, count, duration, max(start, now), same_node)
        for pk, count, duration, start, same_node in rows
    ]
