"""A request joining a queue: planned against the leases ahead of it, and those behind it
planned again only while a budget lasts; the rest of the stored plan is marked stale
(``QueueMark``) for the refresh (``refresh.queue_refresh``).

A waiting lease's plan depends only on the leases ahead of it, so the newcomer's answer is
exact as soon as those ahead are; the leases behind it all move a little (every estimate
behind an insertion changes in a packed queue), which costs one search over the model's
cards per lease: 2–8 ms each with 1,600 cards, seconds for a long queue. That work is left
to the worker instead of making the requester wait for it (docs/performance.md).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from datetime import datetime

from leasing import statements
from leasing.enqueue import enqueue_after_commit
from leasing.models import Lease, QueueMark
from leasing.scheduler.planner import Decision
from leasing.scheduler.queueplan import Key, QueuePlan
from leasing.scheduler.rows import EpochMicros, at
from leasing.scheduler.snapshot import Waiting

# How much of the queue a request plans again itself, counted in leases times cards (each
# re-planned lease costs about one pass over the model's cards): a short queue is exact at
# once, a long one is left to the refresh. A count, not a clock, so tests decide the same.
JOIN_BUDGET = 1_000


@dataclass
class Joined:
    stale_after: Key | None  # the plan is exact up to this key; None: exact throughout
    estimate: Decision | None = None  # the newcomer's, when it lies in the stale stretch
    restored: int = 0  # the plan's first entries, taken back as stored (nothing to write)


def join_plan(
    plan: QueuePlan,
    waiting: list[Waiting],
    joined: int,
    mark: Key | None,
    newcomer: Waiting | None = None,
) -> Joined | None:
    """Plan lease *joined* into the stored plan: the leases ahead of it keep theirs (they
    alone decide its start); the newcomer and those behind it are planned in order while
    ``JOIN_BUDGET`` lasts, and the rest are left stale (the refresh plans them). A stale
    stretch already there (*mark*) is planned first, so the newcomer's plan is exact when
    the budget reaches it and an estimate otherwise. None when the stored plan cannot be
    trusted (then the caller plans the whole queue). *newcomer*: the lease's entry in
    *waiting*, when the caller has it (else it is looked for)."""
    new = _find(waiting, joined, newcomer)
    if new is None:
        return None
    limit = new.key if mark is None or new.key < mark else mark
    # those up to *limit* (the newcomer aside): in service order, so a bisection finds them
    split = bisect.bisect_right(waiting, limit, key=_service_key)
    if split and waiting[split - 1] is new:
        split -= 1
    exact = waiting[:split]
    if not plan.restore((w.key, w.request, w.estimated_start, w.planned_cards) for w in exact):
        return None
    rest = waiting[split:]  # in service order, the newcomer among them
    spend = max(1, len(plan.cards))
    budget = JOIN_BUDGET
    done = 0
    for w in rest:
        # the newcomer is always planned when it is next; the others while the budget lasts
        if budget < spend and not (w is new and done == 0):
            break
        plan.append(w.key, w.request)
        budget -= spend
        done += 1
    if done == len(rest):
        return Joined(stale_after=None, restored=len(exact))
    stale_after = rest[done - 1].key if done else limit
    if new.key <= stale_after:
        return Joined(stale_after=stale_after, restored=len(exact))
    ahead = bisect.bisect_left(rest, new.key, lo=done, key=_service_key)
    # only those with stored cards count (``estimate_behind``): picked in one comprehension
    stale = [
        (w.request, w.estimated_start, w.planned_cards) for w in rest[done:ahead] if w.planned_cards
    ]
    estimate = plan.estimate_behind(stale, new.request)
    return Joined(stale_after=stale_after, estimate=estimate, restored=len(exact))


def _service_key(w: Waiting) -> Key:
    return w.key


def _find(waiting: list[Waiting], joined: int, newcomer: Waiting | None) -> Waiting | None:
    """Lease *joined*'s entry in *waiting* (in service order): found by its key when known."""
    if newcomer is not None and newcomer.request.lease_id == joined:
        i = bisect.bisect_left(waiting, newcomer.key, key=_service_key)
        if i < len(waiting) and waiting[i].request.lease_id == joined:
            return waiting[i]
    return next((w for w in waiting if w.request.lease_id == joined), None)


def _mark(model: int):
    mark = QueueMark.objects.filter(card_model_id=model)
    return mark.values_list("rank", "fair", EpochMicros("virtual_at"), "lease_id_after")[:1]


def mark_of(card_model_id: int) -> Key | None:
    """Where the model's stored plan turns stale (``QueueMark.key``), or None."""
    found = statements.rows("joining.mark", _mark, model=card_model_id)
    if not found:
        return None
    rank, fair, virtual_at, lease_id = found[0]
    return (-rank, -(1.0 if fair is None else fair), at(virtual_at), lease_id)


def marks_of(card_model_ids) -> dict[int, Key]:
    """``mark_of`` for several models in one query (models without a mark are left out)."""
    rows = QueueMark.objects.filter(card_model_id__in=list(card_model_ids)).values_list(
        "card_model_id", "rank", "fair", EpochMicros("virtual_at"), "lease_id_after"
    )
    return {
        model: (-rank, -(1.0 if fair is None else fair), at(virtual_at), lease_id)
        for model, rank, fair, virtual_at, lease_id in rows
    }


def mark_fields(key: Key) -> dict:
    """A service key as ``QueueMark``'s columns (``QueueMark.key`` reads them back)."""
    return {"rank": -key[0], "fair": -key[1], "virtual_at": key[2], "lease_id_after": key[3]}


def mark_put(card_model_id: int, key: Key, *, now: datetime, had: Key | None) -> None:
    """Plans after *key* are stale (replacing the mark there was, *had*)."""
    if had is None:
        QueueMark.objects.create(card_model_id=card_model_id, since=now, **mark_fields(key))
        enqueue_after_commit("leasing.tasks.queue_refresh", card_model_id)
    elif key != had:
        QueueMark.objects.filter(card_model_id=card_model_id).update(**mark_fields(key))


def estimate_write(decision: Decision) -> None:
    """A newcomer behind a stale stretch: its estimated start, no planned cards (its plan is
    stale until the refresh)."""
    Lease.objects.filter(pk=decision.lease_id).update(
        estimated_start=decision.start, planned_cards=None
    )


def plan_in_order(plan: QueuePlan, waiting: list[Waiting]) -> Key | None:
    """Plan *waiting* (in service order) from scratch into the empty *plan* while
    ``JOIN_BUDGET`` lasts; the key after which the rest is left stale, or None when every
    lease was planned."""
    spend = max(1, len(plan.cards))
    budget = JOIN_BUDGET
    for n, w in enumerate(waiting):
        if n and budget < spend:
            return waiting[n - 1].key
        plan.append(w.key, w.request)
        budget -= spend
    return None
