"""What a request or a change would do if made now, nothing written: when a request would
start (its place in the queue counted), and whether a change would delay anyone waiting."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.utils import timezone

from inventory.models import CardModel
from leasing.choices import PRIORITY_RANK, Priority
from leasing.scheduler import planner
from leasing.scheduler.snapshot import (
    card_slots,
    card_slots_of,
    queued_requests,
    queues_of,
    timeline_for,
    timelines_of,
)


def lease_preview(
    *,
    card_model: CardModel,
    count: int,
    duration: timedelta,
    start_at: datetime | None = None,
    same_node: bool = True,
    priority: str = Priority.NORMAL,
    now: datetime | None = None,
    nodes: frozenset[int] | None = None,
) -> datetime | None:
    """When a request like this would start if made now: its place in the queue, no writes.
    *nodes*: the nodes its requirements allow (``inventory.requirements.nodes_meeting``).
    The same code as the advisor's previews (``lease_previews``), for one model."""
    ask = Ask(card_model.pk, count, same_node, nodes)
    return lease_previews([ask], duration=duration, start_at=start_at, priority=priority, now=now)[
        card_model.pk
    ].start


@dataclass(frozen=True)
class Ask:
    """One request to preview: *count* cards of a model, on *nodes* (None: any)."""

    card_model_id: int
    count: int
    same_node: bool = True
    nodes: frozenset[int] | None = None


def lease_previews(
    asks: list[Ask],
    *,
    duration: timedelta,
    start_at: datetime | None = None,
    priority: str = Priority.NORMAL,
    now: datetime | None = None,
    cards: dict[int, list[planner.CardSlot]] | None = None,
) -> dict[int, planner.Decision]:
    """``lease_preview`` for many models at once (one ask per model): three queries in all,
    whatever the number of models (the advisor ranks the whole pool). Each decision's
    ``card_ids`` are the cards the planner would choose; ``start`` None: never fits.
    *cards*: the models' usable cards (``snapshot.card_slots_of``) when already loaded."""
    now = now or timezone.now()
    not_before = start_at if start_at and start_at > now else now
    ids = [a.card_model_id for a in asks]
    rank = PRIORITY_RANK.get(priority, PRIORITY_RANK[Priority.NORMAL])
    if cards is None:
        cards = card_slots_of(ids, now=now)
    timelines = timelines_of(ids, now=now)
    queues = queues_of(ids, now=now, min_rank=rank)
    out: dict[int, planner.Decision] = {}
    for ask in asks:
        model_cards = cards.get(ask.card_model_id, [])
        timeline = timelines[ask.card_model_id]
        planner.plan_queue(model_cards, timeline, queues.get(ask.card_model_id, []))
        request = planner.Request(0, ask.count, duration, not_before, ask.same_node, ask.nodes)
        out[ask.card_model_id] = planner.earliest(
            planner.cards_for(model_cards, request), timeline, request
        )
    return out


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
