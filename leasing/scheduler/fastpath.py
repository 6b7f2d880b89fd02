"""Placing a request for free cards in SQL, when nobody waits for the card model.

The full queue pass (``run.schedule_card_model``) loads every card and every open
allocation of the model into Python and plans the whole queue: right when there is a queue,
but most requests in a pool with free cards meet no queue at all, and then the pass can only
decide one thing: put the new lease on the best-fitting node and interconnect domain now.
``place_now`` answers that one question with two queries over the free cards and chooses
exactly as ``planner.place`` does in its first step (one node, one domain; the node with the
fewest free cards, then the domain with the fewest, then the lowest ids). Anything else
(the cards must span domains or nodes, or do not fit now) returns None, and the caller runs
the full pass. The caller holds the model's lock; the exclusion constraint stays the guard.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime

from django.db.models import Count, Exists, OuterRef, Q

from inventory.models import Card, Node
from leasing.models import Allocation, Lease, LeaseStatus


def queue_is_empty(card_model_id: int) -> bool:
    return not Lease.objects.filter(card_model_id=card_model_id, status=LeaseStatus.QUEUED).exists()


def _free_cards(card_model_id: int, *, start: datetime, end: datetime):
    """Cards of the model a lease may hold over [start, end), as ``snapshot.card_slots`` and
    ``snapshot.timeline_for`` see them: healthy, on a node that is up (or draining after
    *end*), with no allocation overlapping the window; a lease marked for preemption holds
    its cards only until its ``preempt_at``."""
    busy = Allocation.objects.filter(
        card_id=OuterRef("pk"), start_at__lt=end, end_at__gt=start
    ).filter(Q(lease__preempt_at__isnull=True) | Q(lease__preempt_at__gt=start))
    return (
        Card.objects.filter(card_model_id=card_model_id, status=Card.Status.OK)
        .filter(
            Q(node__status=Node.Status.ACTIVE)
            | Q(node__status=Node.Status.DRAINING, node__drain_at__gte=end)
        )
        .filter(~Exists(busy))
    )


def place_now(
    card_model_id: int, *, count: int, start: datetime, end: datetime
) -> list[int] | None:
    """*count* cards on one node and one interconnect domain, free over [start, end) (start is
    now), chosen as ``planner.place`` would; None when that takes more than one domain."""
    free = _free_cards(card_model_id, start=start, end=end)
    groups = list(
        free.order_by().values_list("node_id", "interconnect_domain").annotate(n=Count("pk"))
    )
    node_free: dict[int, int] = defaultdict(int)
    for node_id, _domain, n in groups:
        node_free[node_id] += n
    fitting = [(node_free[node], n, node, domain) for node, domain, n in groups if n >= count]
    if not fitting:
        return None
    _node_free, _n, node_id, domain = min(fitting)
    return list(
        free.filter(node_id=node_id, interconnect_domain=domain)
        .order_by("index")
        .values_list("pk", flat=True)[:count]
    )
