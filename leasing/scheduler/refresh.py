"""Bringing a stored queue plan up to date without planning the whole queue under the lock:
the refresh plans the stale stretch requests left behind them (``QueueMark``), a slice per
transaction, and the tick starts what is due only when time alone moved.
"""

from __future__ import annotations

import bisect
import hashlib
import logging
import time
from datetime import datetime, timedelta

from django.core.cache import cache
from django.db import connection, transaction
from django.utils import timezone

from leasing.locking import lock_card_models
from leasing.models import QueueMark
from leasing.scheduler import plancache, shares
from leasing.scheduler.headfirst import HeadFirstPlan, team_of
from leasing.scheduler.joining import mark_fields, mark_of
from leasing.scheduler.planner import CardSlot
from leasing.scheduler.preemption import preemption_plan
from leasing.scheduler.queueplan import QueuePlan
from leasing.scheduler.run import (
    PassResult,
    apply_decisions,
    passing,
    planned_whole,
    schedule_card_model,
)
from leasing.transitions import hand_over

logger = logging.getLogger(__name__)

# How much a slice plans while it holds the model's lock, at least one lease: each planned
# lease costs one pass over the model's cards and searches through their busy periods (the
# holders' and the plan's reservations: they grow with the queue), counted as cards plus
# periods / PERIODS_PER_CARD (``_spend``): about five leases of a 1,600-card pool with no
# queue, two behind 10,000 waiting. A count, so tests decide the same and a slow moment does
# not make slices longer; and no new lease is begun once REFRESH_PLAN_SECONDS have passed
# since the lock was taken, so a slow moment (a loaded machine: one lease behind 10,000
# waiting took 20-45 ms) makes them shorter (bench/queue_length.py prints the holds).
REFRESH_BUDGET = 10_000
PERIODS_PER_CARD = 8
REFRESH_PLAN_SECONDS = 0.03
# the leases a slice starts at most where nobody waits ahead of them (a queue that drains):
# their writes and hand-overs are part of the slice's hold of the lock
REFRESH_STARTS = 200


def _spend(plan: QueuePlan) -> int:
    """What planning one lease into *plan* costs, counted (``REFRESH_BUDGET``)."""
    periods = sum(len(p) for p in plan.timeline.busy.values())
    return max(1, len(plan.cards) + periods // PERIODS_PER_CARD)


def queue_refresh(card_model_id: int, *, now: datetime | None = None) -> bool:
    """Plan the stale stretch of a model's stored plan (``QueueMark``) exactly, a slice at a
    time: one transaction holds the model's lock while it plans ``REFRESH_BUDGET`` (a count;
    less once ``REFRESH_PLAN_SECONDS`` have passed) plus the reading, so requests that join
    meanwhile wait one slice, not the whole queue.
    True when a stale stretch is left (the caller runs it again).

    The leases up to the mark keep their (exact) plan; those after it are planned in order
    after them, as ``plan_queue`` would. A stale lease that now fits at once starts here,
    from behind those ahead of it, and they are planned again around the cards it holds
    (``QueuePlan.advance``), as a pass over the whole queue would do."""
    now = now or timezone.now()
    if QueueMark.objects.filter(card_model_id=card_model_id).exists():
        plancache.warm(card_model_id, now=now)  # a cold process reads outside the lock
    with transaction.atomic():
        lock_card_models([card_model_id])
        locked = time.perf_counter()
        mark = mark_of(card_model_id)
        if mark is None:
            return False
        seen = plancache.hold(card_model_id)
        picture = plancache.take(card_model_id, seen, now=now) or plancache.load(
            card_model_id, now=now
        )
        waiting = picture.waiting
        if planned_whole(shares.shares_covering(card_model_id), picture.policies()):
            hand_over(schedule_card_model(card_model_id, now=now).started)
            return mark_of(card_model_id) is not None
        split = bisect.bisect_right(waiting, mark, key=_service_key)
        stale = waiting[split:]
        plan = _plan_up_to_mark(picture, waiting[:split], mark, seen, now=now)
        if plan is None:
            hand_over(schedule_card_model(card_model_id, now=now).started)
            return mark_of(card_model_id) is not None
        planned = _plan_slice(plan, stale, now=now, locked=locked)
        # A lease that fits now starts here, and those ahead of it are planned again around
        # the cards it now holds (QueuePlan.advance), as a pass over the whole queue would;
        # handing this to a pass bounded by the join budget would leave it stale again.
        # The last slice plans the whole queue: where one team waits, what fits now around
        # the holders and the head starts too (``headfirst``), as in every pass.
        more = len(planned) < len(stale)
        if not more:
            plan.teams_known(team_of(waiting))
        due = plan.advance(now)
        plan.teams_known(None)  # kept for the next slice or the tick: it only moves in time
        entries = due + plan.entries if due else planned
        result = PassResult()
        with passing(plan.passers[0] if not more and plan.passers else None):
            applied = apply_decisions(card_model_id, [e.decision for e in entries],
                                      {e.request.lease_id: e.request for e in entries},
                                      picture.index(), policies={}, now=now,
                                      result=result)  # fmt: skip
        hand_over(result.started)
        if more:
            last = planned[-1].key
            QueueMark.objects.filter(card_model_id=card_model_id).update(**mark_fields(last))
        else:
            QueueMark.objects.filter(card_model_id=card_model_id).delete()
        plancache.keep_after_commit(card_model_id, picture, applied, now=now)
        re_estimated = not due and not applied.started and not applied.booked
        if re_estimated and not applied.told:
            _commit_without_waiting_for_the_disk()
        if re_estimated and applied.complete:
            # the next slice goes on from this plan if nothing changes meanwhile; the last
            # leaves the whole plan, for the tick (``_kept_plan``)
            picture.refresh_plan = (plan, planned[-1].key if more else None, picture.version)
        return more


def _plan_slice(plan: QueuePlan, stale: list, *, now: datetime, locked: float) -> list:
    """A slice of the stale stretch *stale* planned into *plan* (after those up to the mark),
    in order: while the budget and ``REFRESH_PLAN_SECONDS`` from *locked* last, and up to the
    first lease that starts now from behind one that waits (``queue_refresh``)."""
    spend = _spend(plan)
    budget = REFRESH_BUDGET
    planned = []
    starts = 0
    waits_ahead = bool(plan.entries)  # a lease ahead still waits (those kept all do)
    for w in stale:
        entry = plan.append(w.key, w.request)
        planned.append(entry)
        if entry.decision.start is not None and entry.decision.start <= now:
            if waits_ahead:
                break  # it starts now, from behind those ahead: they are planned around it
            # it starts now with nobody waiting ahead (a queue that drains): nothing is planned
            # again around it, its write is one row of a batch, and the clock still bounds it
            starts += 1
            if starts >= REFRESH_STARTS:
                break
        else:
            waits_ahead = True
            budget -= spend
        if budget < spend or time.perf_counter() - locked > REFRESH_PLAN_SECONDS:
            break
    return planned


def _service_key(w):
    return w.key


def _commit_without_waiting_for_the_disk() -> None:
    """This slice only re-estimated (no lease started or was booked, nobody was sent a
    notice): its COMMIT returns before PostgreSQL has flushed it (``synchronous_commit`` off
    for this transaction only), so the model's lock is not held through a slow disk's flush
    (up to 126 ms at 10,000 waiting here; docs/performance.md). A crash may lose the last such
    slices whole (the estimates and the stale mark together), and the refresh plans that
    stretch again; a notice is only ever sent from a commit that waited for the disk."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SET LOCAL synchronous_commit TO OFF")


def _plan_up_to_mark(picture, exact, mark, seen: int, *, now: datetime) -> QueuePlan | None:
    """The stored plan of the leases up to the mark (*exact*): the one the last slice left on
    the picture when nothing was written since (the model's version is the one it ended with,
    its mark is this one, and no planned start has come), else taken back from what is
    stored (``QueuePlan.restore``); None when that cannot be trusted."""
    kept, picture.refresh_plan = picture.refresh_plan, None
    if kept is not None and kept[1] == mark and kept[2] == seen:
        plan = kept[0]
        if not plan.any_due(now):
            plan.advance(now)  # only time moves on
            return plan
    plan = HeadFirstPlan(picture.cards, picture.timeline(), now=now)
    stored = ((w.key, w.request, w.estimated_start, w.planned_cards) for w in exact)
    return plan if plan.restore(stored) else None


# The tick trusts the stored plan (starting what is due from it) for at most this long per
# model; then it plans the whole queue again, a net under any change that freed cards
# without re-planning (every such path re-plans: ``replan``).
FULL_PASS_EVERY = timedelta(minutes=1)


def queue_tick(card_model_id: int, *, now: datetime | None = None) -> PassResult:
    """The periodic pass for one model with a queue. Every change that frees cards plans the
    queue itself (``replan``), so what is left to the tick is time: a planned start that has
    come, which the stored plan cannot be taken back with (``QueuePlan.restore``), and then
    the whole queue is planned (a lease whose start came late may no longer fit around
    those ahead). Otherwise the stored plan stands and nothing is written. The whole queue
    is also planned when the model's usable cards are not the ones the plan was made for,
    when a higher class needs room (preemption), with shares or off-peak policies (as every
    pass does), and at least every ``FULL_PASS_EVERY`` unless this process kept the plan and
    nothing was written since (``_kept_plan``). A stale stretch left by requests is planned
    first (``queue_refresh``)."""
    now = now or timezone.now()
    slices = 0
    while slices < TICK_REFRESH_SLICES and queue_refresh(card_model_id, now=now):
        slices += 1
    plancache.warm(card_model_id, now=now)  # a cold process reads outside the lock
    with transaction.atomic():
        lock_card_models([card_model_id])
        seen = plancache.hold(card_model_id)
        taken = plancache.take(card_model_id, seen, now=now)
        picture = taken or plancache.load(card_model_id, now=now)
        waiting = picture.waiting
        if not waiting:
            return PassResult()
        cards = picture.cards
        pool = _pool_digest(cards)
        key = f"cardpool:queue-pass:{card_model_id}"
        last = _last_pass(key)
        whole = planned_whole(shares.shares_covering(card_model_id), picture.policies())
        plan = _kept_plan(picture, seen, now=now)
        trusted = (
            last is not None
            and last[0] == pool
            # the net: a whole pass now and then, unless nothing was written since the plan
            # this process kept was made (planning again would decide the same)
            and (plan is not None or now - last[1] < FULL_PASS_EVERY)
            and not whole
            and not QueueMark.objects.filter(card_model_id=card_model_id).exists()
        )
        preempted = trusted and preemption_plan(card_model_id, now=now, covering=[])
        if preempted:
            trusted = False  # a higher class needed room: plan the queue around the victims
        if trusted and plan is None:
            plan = HeadFirstPlan(cards, picture.timeline(), now=now)
            stored = ((w.key, w.request, w.estimated_start, w.planned_cards) for w in waiting)
            trusted = plan.restore(stored)  # refused when a planned start has come
        if trusted:
            # only time moved, but where one team waits a lease whose requested start came
            # may now fit around the head: then the pass starts it (``headfirst``)
            plan.teams_known(team_of(waiting))
            trusted = not plan.would_pass(now)
            plan.teams_known(None)
        if not trusted:
            again = None
            if not preempted:
                # nothing was written since it was taken or read (under the lock, at *seen*):
                # the pass plans from this picture rather than read the whole queue again
                picture.version = seen
                plancache.put_back(card_model_id, picture)
                again = seen
            result = schedule_card_model(card_model_id, now=now, seen=again)
            hand_over(result.started)
            # a plan made out of service order (shares, off-peak) is never taken back: the
            # next tick plans the whole queue again
            done = None if whole else (pool, now)
            transaction.on_commit(lambda: _last_pass_put(key, done), robust=True)
            return result
        # nothing due, nothing changed: the stored plan stands (and is kept for the next tick)
        plancache.keep_after_commit(card_model_id, picture, plancache.Applied([], [], {}), now=now)
        picture.refresh_plan = (plan, None, picture.version)
        return PassResult()


def _kept_plan(picture, seen: int, *, now: datetime) -> QueuePlan | None:
    """The whole queue's plan the last refresh slice or tick left on the picture, when the
    model's version is still the one it ended with (nothing the planner reads was written
    since: the stored plan is that plan) and no planned start has come; else None (the
    stored plan is taken back and checked: ``QueuePlan.restore``, a walk over the queue)."""
    kept, picture.refresh_plan = picture.refresh_plan, None
    if kept is None or kept[1] is not None or kept[2] != seen or kept[0].any_due(now):
        return None
    plan = kept[0]
    plan.advance(now)  # only time moves on
    return plan


TICK_REFRESH_SLICES = 25


def _last_pass(key: str):
    """(pool digest, when) of the model's last whole-queue pass by the tick; None when the
    cache has none or cannot be read (then the tick plans the whole queue, as it did)."""
    try:
        return cache.get(key)
    except Exception:
        logger.warning("queue tick: the cache could not be read; planning the whole queue")
        return None


def _last_pass_put(key: str, value) -> None:
    try:
        cache.set(key, value, timeout=None)
    except Exception:
        logger.warning("queue tick: the cache could not be written")


def _pool_digest(cards: list[CardSlot]) -> str:
    """Which cards the plan may use, and until when: a plan made for other cards is not
    trusted (a card came back, a node was drained or undrained)."""
    text = ";".join(f"{c.card_id},{c.node_id},{c.domain},{c.usable_until}" for c in cards)
    return hashlib.sha256(text.encode()).hexdigest()
