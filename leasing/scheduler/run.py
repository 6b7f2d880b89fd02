"""Apply the planner's decisions to the database: the queue pass, and freeing cards.

Every path that frees cards (a release, an expiry, a failure, a cancel) re-plans the model's
queue in the same transaction through ``replan``, so the next waiting lease is placed the
moment cards free up, not on a timer.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from contextlib import nullcontext
from dataclasses import dataclass, field
from datetime import datetime

from django.db import transaction
from django.db.models import Count, DateTimeField, ExpressionWrapper, F, Value

from inventory.models import Card
from leasing.choices import RUNNING_STATES, EndReason, Kind, LeaseStatus
from leasing.enqueue import enqueue_after_commit
from leasing.models import Allocation, GuaranteedShare, Lease, LeaseEvent, QueueMark, Session
from leasing.notify.messages import notice_send
from leasing.scheduler import moves, plancache, planner, shares
from leasing.scheduler.eta import told_moves
from leasing.scheduler.headfirst import HeadFirstPlan, team_of
from leasing.scheduler.joining import (
    Joined,
    estimate_write,
    join_plan,
    mark_of,
    mark_put,
    plan_in_order,
)
from leasing.scheduler.offpeak import OffPeakHold
from leasing.scheduler.plancache import Applied
from leasing.scheduler.planner import Decision, Request
from leasing.scheduler.preemption import preemption_plan
from leasing.scheduler.snapshot import Waiting, waiting_of, work_ahead_of_leases
from leasing.transitions import cards_free, event_record, hand_over, transition

logger = logging.getLogger(__name__)


@dataclass
class PassResult:
    started: list[int] = field(default_factory=list)  # queued → provisioning now
    booked: list[int] = field(default_factory=list)  # queued → scheduled (advance reservation)
    waiting: dict[int, datetime | None] = field(default_factory=dict)  # lease → estimated start
    passer: int | None = None  # a lease started around the head, passing its team (headfirst)


def schedule_card_model(
    card_model_id: int, *, now: datetime, joined: int | None = None, seen: int | None = None
) -> PassResult:
    """Place every queued lease of the model that fits now; give the rest an estimated start.

    With *joined* (a lease that just joined the queue, and nothing else changed), the plan
    the last pass stored is taken back, the newcomer is planned after those ahead of it and
    those behind it are planned again while a budget lasts (``joining``); without it, or
    when that plan cannot be trusted, the queue is planned in order while the budget lasts.
    What the budget leaves is marked stale for the refresh. Both decide what the full
    planner decides (tests/leasing/test_queueplan.py, test_queue_stale.py).

    The picture of the model comes from the last pass in this process when nothing the
    planner reads changed since (``plancache``; *seen*: the version the caller found when it
    took the model's lock, before its own writes), else from the database.

    Must run inside a transaction holding the model's lock (leasing.locking). State
    changes go through the compare-and-set helper (leasing.transitions).
    """
    assert transaction.get_connection().in_atomic_block, "schedule_card_model needs a transaction"

    result = PassResult()
    picture = _picture_for(card_model_id, now=now, joined=joined, seen=seen)
    waiting = picture.waiting
    if not waiting:
        plancache.keep_after_commit(card_model_id, picture, plancache.Applied([], [], {}), now=now)
        return result
    # Make room for a higher class first, so the plan below already sees the victims'
    # end (their grace period) and gives the waiting lease an honest estimate.
    covering = shares.shares_covering(card_model_id)  # guaranteed shares: one statement
    marked = preemption_plan(card_model_id, now=now, covering=covering)
    if marked:
        picture = plancache.load(card_model_id, now=now)  # the victims' ends moved
        waiting = picture.waiting
    policies = picture.policies()
    if planned_whole(covering, policies):
        decisions, requests = _plan_whole(card_model_id, picture, covering)
        keep_plan, estimated = False, None
    else:
        decisions, requests, estimated = _plan_kept(
            card_model_id, picture, now=now, joined=None if marked else joined, result=result
        )
        keep_plan = True
    with passing(result.passer):
        applied = apply_decisions(card_model_id, decisions, requests, picture.index(),
                                  policies=policies, now=now, result=result)  # fmt: skip
    if keep_plan:
        if estimated is not None:
            applied.shown[estimated.lease_id] = (estimated.start, "", None)
        plancache.keep_after_commit(card_model_id, picture, applied, now=now)
    return result


def passing(passer: int | None):
    """Estimates moved by a lease started around the head are told so (``moves``)."""
    return moves.passed_by(passer) if passer else nullcontext()


def _picture_for(
    card_model_id: int, *, now: datetime, joined: int | None, seen: int | None
) -> plancache.Picture:
    """The model's picture: kept from the last pass (with the newcomer admitted) when the
    version says nothing changed, else read from the database."""
    if seen is None:
        seen = plancache.hold(card_model_id)
    picture = plancache.take(card_model_id, seen, now=now)
    if picture is not None and joined is not None:
        newcomer = waiting_of([card_model_id], now=now, lease_ids=[joined]).get(card_model_id)
        plancache.admit(picture, newcomer or [])
    if picture is None:
        picture = plancache.load(card_model_id, now=now)
    return picture


def _plan_whole(
    card_model_id: int, picture: plancache.Picture, covering
) -> tuple[list[Decision], dict[int, Request]]:
    """The whole queue planned again: a team within its guaranteed share is served first (the
    cards a reclaim frees are its), and off-peak starts are held back later: both change the
    plan after the service order, which a stored plan does not know. The cards are stored all
    the same, for the picture (``picture``: every view of time reads them); the next pass plans
    the whole queue again rather than take them back, and so does the tick (``refresh``)."""
    queue = shares.entitled_first(
        card_model_id, [w.request for w in picture.waiting], covering=covering
    )
    decisions = planner.plan_queue(picture.cards, picture.timeline(), queue)
    QueueMark.objects.filter(card_model_id=card_model_id).delete()  # planned whole
    return decisions, {r.lease_id: r for r in queue}


def planned_whole(covering: list, policies) -> bool:
    """Whether a model's queue is planned whole on every pass, out of service order: a
    guaranteed share covers the model (*covering*, ``shares.shares_covering``) or a waiting
    lease holds for off-peak hours (*policies*: those leases, ``Picture.policies``, or
    whether there is one). Then no
    plan is kept between passes (``refresh``) and nothing starts around the head
    (``headfirst``): the preview asks the same."""
    return bool(covering) or bool(policies)


def _plan_kept(
    card_model_id: int,
    picture: plancache.Picture,
    *,
    now: datetime,
    joined: int | None,
    result: PassResult,
) -> tuple[list[Decision], dict[int, Request], Decision | None]:
    """The stored plan brought up to date (``QueuePlan``): the newcomer *joined* planned after
    those ahead of it, or the queue in order, while the budget lasts; the rest marked stale
    for the refresh. Returns the decisions to write, their requests, and the newcomer's
    estimate when it waits behind a stale stretch."""
    waiting = picture.waiting
    plan = HeadFirstPlan(picture.cards, picture.timeline(), now=now, team_of=team_of(waiting))
    mark = mark_of(card_model_id)
    newcomer = next((w for w in picture.added if w.request.lease_id == joined), None)
    joining = join_plan(plan, waiting, joined, mark, newcomer) if joined is not None else None
    if joining is None:
        # The whole queue, in order, while the budget lasts: a lease is planned (and
        # started) only once everyone ahead of it is; the refresh plans the rest.
        joining = Joined(stale_after=plan_in_order(plan, waiting))
    estimated = joining.estimate
    if estimated is not None:
        # Behind a stale stretch: an estimate now; the refresh plans it exactly (and
        # starts it if it fits) right after the commit.
        estimate_write(estimated)
        result.waiting[joined] = estimated.start
    if joining.stale_after is None:
        if mark is not None:
            QueueMark.objects.filter(card_model_id=card_model_id).delete()
    else:
        mark_put(card_model_id, joining.stale_after, now=now, had=mark)
    # Those that start now leave the plan and hold their cards; anyone ahead of them is
    # planned again around that (QueuePlan.advance), so what is stored is what a pass run
    # right after this one would decide. Only decisions that differ from the stored ones
    # are written (apply_decisions). Where one team waits, those that fit now around the
    # holders and the head start too (``headfirst``), once the whole queue is planned.
    if joining.stale_after is not None:
        plan.teams_known(None)  # part of the queue is stale: the refresh settles it
    due = plan.advance(now)
    result.passer = plan.passers[0] if plan.passers else None
    # Those taken back as stored are written as they are unless a start re-planned them.
    entries = due + (plan.entries if due else plan.entries[joining.restored :])
    return (
        [e.decision for e in entries],
        {e.request.lease_id: e.request for e in entries},
        estimated,
    )


def apply_decisions(
    card_model_id: int,
    decisions: list[Decision],
    requests: dict[int, Request],
    waiting: Mapping[int, Waiting],
    *,
    policies: dict[int, str],
    now: datetime,
    result: PassResult,
) -> Applied:
    """Act on a pass's decisions: start what fits now, book advance reservations, and write
    each waiting lease's estimate, stall reason and planned cards where they changed (a
    start an off-peak policy moved has no cards yet: the next pass plans it from there, and
    the picture shows it being re-estimated until then). *waiting*: the waiting leases by
    lease id (only those decided on are looked up). Returns what was written (``plancache``)."""
    shown = {
        lease_id: (w.estimated_start, w.stall_reason, w.planned_cards)
        for lease_id in requests
        if (w := waiting.get(lease_id)) is not None
    }
    offpeak = OffPeakHold()
    in_service: dict[int, int] | None = None
    unhealthy = 0

    starting: list[tuple[Request, Decision]] = []
    estimates: list[Lease] = []
    stalled: list[int] = []
    moved: list[tuple[int, datetime | None, datetime | None]] = []  # estimates that changed
    applied = Applied(started=[], booked=[], shown={})
    for decision in decisions:
        request = requests[decision.lease_id]
        decision, held = _offpeak_held(offpeak, decision, request, policies)
        # (a picture kept from an earlier pass has not_before of that pass: at least now)
        wanted = max(request.not_before, now)
        fits_when_wanted = decision.start is not None and decision.start == wanted
        if fits_when_wanted and decision.start <= now:
            starting.append((request, decision))
        elif fits_when_wanted:
            if _book(request, decision, now=now):
                result.booked.append(decision.lease_id)
                applied.booked.append((request, decision))
            else:
                applied.complete = False
        else:
            result.waiting[decision.lease_id] = decision.start
            stall = ""
            if decision.start is None:
                if in_service is None:
                    in_service = in_service_by_node(card_model_id)
                    unhealthy = unhealthy_count(card_model_id)
                stall = planner.never_fits_because(in_service, request, unhealthy)
            planned = decision.card_ids if decision.start is not None and not held else None
            if shown.get(decision.lease_id) != (decision.start, stall, planned):
                before = shown.get(decision.lease_id)
                moved.append((decision.lease_id, before and before[0], decision.start))
                estimates.append(
                    Lease(
                        pk=decision.lease_id,
                        estimated_start=decision.start,
                        stall_reason=stall,
                        planned_cards=None if planned is None else list(planned),
                    )
                )
                applied.shown[decision.lease_id] = (decision.start, stall, planned)
                if stall and shown.get(decision.lease_id, (None, "", None))[1] != stall:
                    stalled.append(decision.lease_id)
    if starting:
        result.started = start_batch(starting, now=now)
        if len(result.started) != len(starting):
            applied.complete = False
        applied.started = starting
    # One statement per 500 changed estimates, not one per waiting lease (the queue is
    # re-planned on every pass, and a long queue's estimates all move together).
    Lease.objects.bulk_update(
        estimates, ["estimated_start", "stall_reason", "planned_cards"], batch_size=500
    )
    if not stalled_tell(stalled):
        applied.complete = False
    # a big move of the start told (scheduler.eta): a timeline event and a notice
    keys = {pk: waiting[pk].key for pk, _old, _new in moved if pk in waiting}
    ahead_of = work_ahead_of_leases(keys) if keys else {}
    told = moves.estimates_moved(told_moves(moved, keys, now=now, ahead_of=ahead_of), now=now)
    applied.told = stalled + told
    return applied


def _offpeak_held(
    offpeak: OffPeakHold, decision: Decision, request: Request, policies: dict[int, str]
) -> tuple[Decision, bool]:
    """Off-peak only where the lease asked for it: a start its policy does not allow waits
    for the next one (scheduler/offpeak.py), with no cards yet (True: moved)."""
    if decision.lease_id not in policies or decision.start is None:
        return decision, False
    allowed = offpeak.hold(
        decision.lease_id, policies[decision.lease_id], decision.start, request.duration
    )
    if allowed == decision.start:
        return decision, False
    return Decision(decision.lease_id, allowed), True


def _book(request: Request, decision: Decision, *, now: datetime) -> bool:
    """A reservation that starts later: the lease becomes ``scheduled`` with its cards booked
    for its window (False: someone else moved it first)."""
    end = decision.start + request.duration
    if not transition(
        decision.lease_id,
        frm=[LeaseStatus.QUEUED],
        to=LeaseStatus.SCHEDULED,
        kind="booked",
        at=now,
        start_at=decision.start,
        end_at=end,
        estimated_start=None,
        stall_reason="",
        planned_cards=None,
    ):
        return False
    Allocation.objects.bulk_create(
        Allocation(card_id=c, lease_id=decision.lease_id, start_at=decision.start, end_at=end)
        for c in decision.card_ids
    )
    return True


def in_service_by_node(card_model_id: int) -> dict[int, int]:
    """The model's cards in service (not retired) per node, usable or not."""
    rows = (
        Card.objects.in_service()
        .filter(card_model_id=card_model_id)
        .values_list("node_id")
        .annotate(n=Count("pk"))
        .order_by()
    )
    return dict(rows)


def unhealthy_count(card_model_id: int) -> int:
    """The model's cards kept out of placement only by their readings (``Card.health``)."""
    return Card.objects.unhealthy().filter(card_model_id=card_model_id).count()


def stalled_tell(lease_ids: list[int]) -> bool:
    """Tell each holder once that their waiting lease cannot start as asked, and why (in the
    pass's transaction: a notice per lease and reason, never one per pass). A notice that
    cannot be written leaves the reason unset, so the next pass records and tells it again.
    False when one could not be written."""
    told = True
    if not lease_ids:
        return told
    for lease in Lease.objects.filter(pk__in=lease_ids).select_related(
        "user__profile", "card_model"
    ):
        try:
            with transaction.atomic():
                notice_send(
                    lease,
                    kind=Kind.LEASE_STALLED,
                    message="stalled",
                    params={
                        "id": lease.pk,
                        "n": lease.count,
                        "model": lease.card_model.name,
                        "reason": lease.stall_reason,
                        "same_node": lease.same_node,
                    },
                    key=f"lease:{lease.pk}:stalled:{lease.stall_reason}",
                )
        except Exception:
            logger.exception("lease %s: stall notice not written; the next pass retries", lease.pk)
            Lease.objects.filter(pk=lease.pk).update(stall_reason="")
            told = False
    return told


def start_batch(starting: list[tuple[Request, Decision]], *, now: datetime) -> list[int]:
    """queued → provisioning for every lease the pass starts now, in three statements for the
    whole batch: the compare-and-set UPDATE, the events, the allocations (so a queue that
    drains at once after a big release costs one round trip per kind, not per lease)."""
    ids = [decision.lease_id for _request, decision in starting]
    updated = Lease.objects.filter(pk__in=ids, status=LeaseStatus.QUEUED).update(
        status=LeaseStatus.PROVISIONING,
        status_changed_at=now,
        start_at=now,
        end_at=ExpressionWrapper(Value(now) + F("duration"), output_field=DateTimeField()),
        estimated_start=None,
        stall_reason="",
        planned_cards=None,
    )
    if updated != len(ids):
        # Someone else changed one of them (they hold the model's lock too, so this is a
        # defence): keep only those this UPDATE moved.
        moved = set(
            Lease.objects.filter(
                pk__in=ids, status=LeaseStatus.PROVISIONING, status_changed_at=now, start_at=now
            ).values_list("pk", flat=True)
        )
        starting = [(r, d) for r, d in starting if d.lease_id in moved]
    LeaseEvent.objects.bulk_create(
        LeaseEvent(
            lease_id=decision.lease_id,
            at=now,
            kind="placed",
            from_status=LeaseStatus.QUEUED,
            to_status=LeaseStatus.PROVISIONING,
        )
        for _request, decision in starting
    )
    Allocation.objects.bulk_create(
        (
            Allocation(
                card_id=c, lease_id=decision.lease_id, start_at=now, end_at=now + request.duration
            )
            for request, decision in starting
            for c in decision.card_ids
        ),
        batch_size=2000,
    )
    started = [decision.lease_id for _request, decision in starting]
    lent_mark(started, now=now)
    return started


def lent_mark(lease_ids: list[int], *, now: datetime) -> None:
    """Mark the leases just started that sit on cards of another team's idle guaranteed share
    (``shares.lent_after_placement``): they are taken back first when that team asks."""
    if not lease_ids or not GuaranteedShare.objects.exists():
        return
    lent = [
        pk
        for pk, team_id, model_id in Lease.objects.filter(pk__in=lease_ids).values_list(
            "pk", "team_id", "card_model_id"
        )
        if shares.lent_after_placement(team_id=team_id, card_model_id=model_id, now=now)
    ]
    if lent:
        Lease.objects.filter(pk__in=lent).update(lent=True)
        for pk in lent:
            event_record(pk, kind="lent", at=now)


def replan(
    card_model_id: int, *, now: datetime, joined: int | None = None, seen: int | None = None
) -> PassResult:
    """Run the model's queue pass (the model is locked) and hand what it started to the
    workers after commit. *joined*: the one change is that this lease joined the queue
    (*seen*: ``plancache.hold``'s version, taken before it was written)."""
    joining = moves.because("request_ahead", lease=joined) if joined else nullcontext()
    with joining:
        result = schedule_card_model(card_model_id, now=now, joined=joined, seen=seen)
    hand_over(result.started)
    return result


def release_begin(
    lease: Lease,
    *,
    reason: str,
    now: datetime,
    kind: str,
    actor=None,
    cut_at: datetime | None = None,
) -> bool:
    """provisioning/active → releasing: the cards are free from *cut_at* (default now), the
    queue is re-planned, and the backend is told after commit. The one way a holding ends
    early or at its end; the caller holds the model's lock. False if the lease was not
    running (someone else won).

    The *reason* (an ``EndReason``) is written on the lease here, with the state: every later
    step (the backend's release, a lost task re-sent by the sweep, an operator resolving a
    failed release, the holder's notice) reads it from the lease."""
    if reason not in EndReason.values:
        raise ValueError(f"not an end reason: {reason!r}")
    cut_at = cut_at or now
    if not transition(
        lease.pk,
        frm=RUNNING_STATES,
        to=LeaseStatus.RELEASING,
        kind=kind,
        at=now,
        actor=actor,
        data={"reason": reason},
        ended_at=cut_at,
        end_reason=reason,
    ):
        return False
    # Its browser sessions end with it: their URLs answer "ended" from this commit on, and
    # the backend's release stops their processes.
    Session.objects.end_for_lease(lease.pk, at=now)
    cards_free(lease, cut_at)
    with moves.because("released", lease=lease.pk):
        replan(lease.card_model_id, now=now)
    enqueue_after_commit("leasing.tasks.release_lease", lease.pk)
    return True
