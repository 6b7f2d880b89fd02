"""What a request or a change would do if made now, nothing written: when a request would
start (its place in the queue counted), and whether a change would delay anyone waiting."""

from __future__ import annotations

from datetime import datetime, timedelta

from django.utils import timezone

from inventory.models import CardModel
from leasing.choices import Priority, queue_rank
from leasing.scheduler import planner
from leasing.scheduler.queueplan import QueuePlan, service_key
from leasing.scheduler.snapshot import card_slots, queued_requests, timeline_for, waiting_for


def lease_preview(
    *,
    card_model: CardModel,
    count: int,
    duration: timedelta,
    start_at: datetime | None = None,
    same_node: bool = True,
    priority: str = Priority.NORMAL,
    purpose: str = "",
    now: datetime | None = None,
) -> datetime | None:
    """When a request like this would start if made now: its place in the queue (everyone
    the queue order serves before it), no writes."""
    now = now or timezone.now()
    not_before = start_at if start_at and start_at > now else now
    cards = card_slots(card_model.pk, now=now)
    timeline = timeline_for(card_model.pk, now=now)
    rank = queue_rank(priority, purpose)
    key = service_key(rank=rank, submitted_at=now, duration=duration, count=count, lease_id=0)
    ahead = [w for w in waiting_for(card_model.pk, now=now, min_rank=rank) if w.key < key]
    # The plan the last pass stored for them is the plan (re-planned only if it is stale).
    plan = QueuePlan(cards, timeline, now=now)
    if not plan.restore((w.key, w.request, w.estimated_start, w.planned_cards) for w in ahead):
        plan.rebuild((w.key, w.request) for w in ahead)
    decision = planner.earliest(
        cards, timeline, planner.Request(0, count, duration, not_before, same_node)
    )
    return decision.start


def waiting_delayed(
    card_model_id: int, bookings: list[tuple[int, datetime, datetime]], *, now: datetime
) -> int:
    """How many waiting requests of the model would start later if *bookings* (card, start,
    end) were added: the one fairness rule for changes (extend, resize) that take cards
    outside the queue. Nobody waiting may be delayed by a change that did not queue."""
    queue = queued_requests(card_model_id, now=now)
    if not queue or not bookings:
        return 0
    cards = card_slots(card_model_id, now=now)
    before = planner.plan_queue(cards, timeline_for(card_model_id, now=now), queue)
    changed = timeline_for(card_model_id, now=now)
    for card_id, start, end in bookings:
        changed.add(card_id, start, end)
    after = planner.plan_queue(cards, changed, queue)
    return sum(
        1
        for a, b in zip(after, before, strict=True)
        if b.start is not None and (a.start is None or a.start > b.start)
    )
