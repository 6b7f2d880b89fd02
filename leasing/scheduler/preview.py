"""When a request would start if made now: its place in the queue counted, nothing written."""

from __future__ import annotations

from datetime import datetime, timedelta

from django.utils import timezone

from inventory.models import CardModel
from leasing.choices import PRIORITY_RANK, Priority
from leasing.scheduler import planner
from leasing.scheduler.snapshot import card_slots, queued_requests, timeline_for


def lease_preview(
    *,
    card_model: CardModel,
    count: int,
    duration: timedelta,
    start_at: datetime | None = None,
    same_node: bool = True,
    priority: str = Priority.NORMAL,
    now: datetime | None = None,
) -> datetime | None:
    """When a request like this would start if made now: its place in the queue, no writes."""
    now = now or timezone.now()
    not_before = start_at if start_at and start_at > now else now
    cards = card_slots(card_model.pk, now=now)
    timeline = timeline_for(card_model.pk, now=now)
    rank = PRIORITY_RANK.get(priority, PRIORITY_RANK[Priority.NORMAL])
    ahead = queued_requests(card_model.pk, now=now, min_rank=rank)
    planner.plan_queue(cards, timeline, ahead)
    decision = planner.earliest(
        cards, timeline, planner.Request(0, count, duration, not_before, same_node)
    )
    return decision.start
