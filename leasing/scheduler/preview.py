"""What a request or a change would do if made now, nothing written: when a request would
start (its place in the queue counted), and whether a change would delay anyone waiting."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.utils import timezone

from inventory.models import CardModel
from leasing.choices import Priority, queue_rank
from leasing.scheduler import planner, shares
from leasing.scheduler.headfirst import HeadFirstPlan
from leasing.scheduler.offpeak import OffPeakHold
from leasing.scheduler.queueplan import service_key
from leasing.scheduler.run import planned_whole
from leasing.scheduler.snapshot import (
    card_slots,
    card_slots_of,
    fair_factor,
    queued_requests,
    timeline_for,
    timelines_of,
    waiting_of,
)

# The id in a previewed request's queue key: a new lease's id is larger than every waiting
# one's, so it comes after those with the same class and virtual submit time.
NEWCOMER = 2**63 - 1
# Off-peak windows a preview tries before it gives up (each try: the next allowed start).
OFF_PEAK_TRIES = 30


def lease_preview(
    *,
    card_model: CardModel,
    count: int,
    duration: timedelta,
    start_at: datetime | None = None,
    same_node: bool = True,
    priority: str = Priority.NORMAL,
    purpose: str = "",
    start_policy: str = "",
    now: datetime | None = None,
    nodes: frozenset[int] | None = None,
    team_id: int | None = None,
) -> datetime | None:
    """When a request like this would start if made now: its place in the queue (everyone
    the queue order serves before it: ``queueplan.service_key``), no writes.
    *nodes*: the nodes its requirements allow (``inventory.requirements.nodes_meeting``).
    With an off-peak *start_policy* the start is the first the policy allows where the cards
    are free (the queue pass's rule, ``offpeak.OffPeakHold``). The same code as the
    advisor's previews (``lease_previews``), for one model. *team_id*: the asking team (its
    fair-share factor places it in the queue; None: a team that used nothing)."""
    ask = Ask(card_model.pk, count, same_node, nodes)
    return lease_previews(
        [ask],
        duration=duration,
        start_at=start_at,
        priority=priority,
        purpose=purpose,
        start_policy=start_policy,
        now=now,
        team_id=team_id,
    )[card_model.pk].start


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
    purpose: str = "",
    start_policy: str = "",
    now: datetime | None = None,
    cards: dict[int, list[planner.CardSlot]] | None = None,
    team_id: int | None = None,
) -> dict[int, planner.Decision]:
    """``lease_preview`` for many models at once (one ask per model): three queries in all,
    whatever the number of models (the advisor ranks the whole pool). Each decision's
    ``card_ids`` are the cards the planner would choose; ``start`` None: never fits.
    *cards*: the models' usable cards (``snapshot.card_slots_of``) when already loaded."""
    now = now or timezone.now()
    not_before = start_at if start_at and start_at > now else now
    ids = [a.card_model_id for a in asks]
    rank = queue_rank(priority, purpose)
    if cards is None:
        cards = card_slots_of(ids, now=now)
    timelines = timelines_of(ids, now=now)
    # every class: whether one team waits counts those behind too (``headfirst``)
    queues = waiting_of(ids, now=now)
    fair = fair_factor(team_id)
    offpeak = OffPeakHold()
    out: dict[int, planner.Decision] = {}
    for ask in asks:
        model_cards = cards.get(ask.card_model_id, [])
        timeline = timelines[ask.card_model_id]
        # Ahead: those the queue order serves first (a smaller key). The plan the last pass
        # stored for them is the plan; planned again only when it is stale.
        key = service_key(
            rank=rank, submitted_at=now, duration=duration, count=ask.count, lease_id=NEWCOMER,
            fair=fair,
        )  # fmt: skip
        queue = queues.get(ask.card_model_id, [])
        ahead = [w for w in queue if w.key < key]
        plan = HeadFirstPlan(model_cards, timeline, now=now)
        if not plan.restore((w.key, w.request, w.estimated_start, w.planned_cards) for w in ahead):
            plan.rebuild((w.key, w.request) for w in ahead)
            plan.advance(now)  # those whose start has come hold their cards: not the head
        decision = _earliest_allowed(
            ask, model_cards, timeline, offpeak, start_policy, not_before, duration
        )
        if (
            plan.entries
            and not start_policy
            and not_before == now
            and (decision.start is None or decision.start > now)
            and all(w.team_id == team_id for w in queue)
            and not planned_whole(
                shares.shares_covering(ask.card_model_id), any(w.start_policy for w in queue)
            )
        ):
            # its own team alone waits: the pass may start it now around the head
            # (``headfirst``); asked as the pass asks it, the newcomer planned behind those
            # ahead
            plan.teams_known(lambda _lease: team_id)
            request = planner.Request(NEWCOMER, ask.count, duration, now, ask.same_node, ask.nodes)
            plan.add(key, request)
            started = {e.request.lease_id: e.decision for e in plan.advance(now)}
            if NEWCOMER in started:
                decision = planner.Decision(0, now, started[NEWCOMER].card_ids)
        out[ask.card_model_id] = decision
    return out


def _earliest_allowed(
    ask: Ask,
    cards: list[planner.CardSlot],
    timeline: planner.Timeline,
    offpeak: OffPeakHold,
    start_policy: str,
    not_before: datetime,
    duration: timedelta,
) -> planner.Decision:
    """The planner's earliest start for *ask* that the start policy allows."""
    for _try in range(OFF_PEAK_TRIES):
        allowed = offpeak.allowed_start(start_policy, not_before, duration)
        if allowed is None:
            break
        request = planner.Request(0, ask.count, duration, allowed, ask.same_node, ask.nodes)
        decision = planner.earliest(planner.cards_for(cards, request), timeline, request)
        if decision.start is None or decision.start == allowed or not start_policy:
            return decision
        not_before = decision.start
    return planner.Decision(0, None)


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
