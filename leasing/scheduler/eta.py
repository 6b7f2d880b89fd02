"""The start a waiting lease is told: the plan's start, plus room for the work that may
still pass it.

The queue's order (``queueplan.service_key``) lets a lease submitted later but smaller pass
one submitted a little earlier, within the earlier one's slack: a lease can be passed only
by leases submitted before its *virtual submit time* (submit + slack). The plan's start
(``Lease.estimated_start``, what the picture and the stored plan hold) counts only the
leases already waiting, so during that window it can only move later. The start the holder
is told counts that work: the plan's start plus ``PASSING_FACTOR`` times the time left
before the lease's virtual submit time, at most ``PASSING_CAP``, plus ``PASSING_STRETCH`` of
the plan's wait. The first part shrinks as that time runs out; both are gone once nobody
can pass any more, and from then the told start is the plan's. Moves are measured on the
start told, from the last one recorded as it reads at the moment of the move
(``told_moves``, ``told_again``, ``moves``): room running out is no move.

The stretch is for the holes a lease is planned into. A passer does not only push the lease
back by its own work: it takes a piece of the hole the lease was planned into, between
reservations further out, and the lease then moves to the next hole that fits it. The
further out its start, the more such holes lie ahead of it for the burst of passers to cut
into: on the Philly trace's overloaded pools (a sweep of short one-card jobs a second
apart, waits of two days) a lease with 7 min of slack moved later 33 min, about 1 % of its
wait, while the time-left margin gave it 14.

Under fair share a lease is also passed by the newcomers of teams ahead of it in the order,
which moves at each recomputation: the plan's wait is stretched by its team's work ahead
(``fairshare.ahead``, ``fairshare.stretched``) before the margin is added (the 1 % is of
that stretched wait).

The three were chosen on the Philly trace (bench/trace_replay.py, docs/performance.md "Queue
policy on a real trace"), like the slack itself: ≥ 80 % of waiting jobs start by their
first told start + 15 min on every ``--table`` and ``--overload`` row. A request of a higher
class may still pass; that move is told.
"""

from __future__ import annotations

import math
from datetime import datetime, timedelta

from leasing.scheduler import fairshare
from leasing.scheduler.queueplan import KEY_FIELDS, slack

PASSING_FACTOR = 2
PASSING_CAP = timedelta(hours=2)
PASSING_STRETCH = 0.01  # of the plan's wait, while the lease can still be passed


def virtual_submit(submitted_at: datetime, duration: timedelta, count: int) -> datetime:
    """The lease's virtual submit time (``queueplan.service_key``): nobody submitted after
    it passes the lease."""
    return submitted_at + slack(duration, count)


def told_start(
    planned: datetime | None, *, virtual_at: datetime, now: datetime, ahead: float = 0.0
):
    """The start to tell for a plan's start *planned* (None: none known), given the lease's
    virtual submit time *virtual_at* and its team's work ahead (*ahead*): see the module."""
    if planned is None:
        return None
    if ahead > 0 and planned > now:
        planned = now + fairshare.stretched(planned - now, ahead)
    left = virtual_at - now
    if left <= timedelta(0):
        return planned
    return planned + min(PASSING_FACTOR * left, PASSING_CAP) + stretch(planned - now)


def stretch(wait: timedelta) -> timedelta:
    """``PASSING_STRETCH`` of a plan's *wait* (none for a start now or past), in whole
    minutes, rounded down: none for a wait under 100 min, whose holes are few, and a start
    told reads as whole minutes."""
    return timedelta(minutes=math.floor(PASSING_STRETCH * max(wait.total_seconds(), 0) / 60))


def virtual_of(key) -> datetime:
    """The virtual submit time in a service key (``queueplan.service_key``)."""
    return key[KEY_FIELDS.index("virtual")]


def told_moves(moved, keys: dict, *, now: datetime, ahead_of: dict | None = None) -> list:
    """Plan starts that moved, ``(lease id, old, new)``, as the starts told (``told_start``,
    both at *now*) with what the new one is made of, ``(lease id, old, new, basis)``, for
    ``moves``: a move is measured on what the holder is told. *keys*: each lease's service
    key; *ahead_of*: the work ahead of each lease's team (``snapshot.work_ahead_of_leases``)."""
    out = []
    for pk, old, new in moved:
        key = keys.get(pk)
        basis = None
        if key is not None:
            virtual = virtual_of(key)
            ahead = (ahead_of or {}).get(pk, 0.0)
            basis = told_basis(new, virtual_at=virtual, ahead=ahead)
            old = told_start(old, virtual_at=virtual, now=now, ahead=ahead)
            new = told_start(new, virtual_at=virtual, now=now, ahead=ahead)
        out.append((pk, old, new, basis))
    return out


def told_basis(planned: datetime | None, *, virtual_at: datetime, ahead: float) -> dict | None:
    """What a start told is made of, kept on the lease's timeline with it (``moves``): the
    plan's start, the virtual submit time and the team's work ahead (None: no plan)."""
    if planned is None:
        return None
    return {"planned": planned.isoformat(), "virtual": virtual_at.isoformat(), "ahead": ahead}


def told_again(basis: dict, *, now: datetime) -> datetime | None:
    """The start told from a kept *basis* (``told_basis``) at *now*: what an earlier start
    told says now, time having moved and nothing else (the room for passing work shrinks as
    the virtual submit time comes, and is gone after it)."""
    return told_start(
        datetime.fromisoformat(basis["planned"]),
        virtual_at=datetime.fromisoformat(basis["virtual"]),
        now=now,
        ahead=float(basis.get("ahead", 0.0)),
    )


def lease_told_start(lease, *, now: datetime, ahead: float = 0.0) -> datetime | None:
    """``told_start`` for a waiting lease (its ``estimated_start`` is the plan's start);
    *ahead*: its team's work ahead (``snapshot.work_ahead``)."""
    virtual = virtual_submit(lease.submitted_at, lease.duration, lease.count)
    return told_start(lease.estimated_start, virtual_at=virtual, now=now, ahead=ahead)


def lease_told_basis(lease, *, ahead: float = 0.0) -> dict | None:
    """``told_basis`` of what ``lease_told_start`` tells the lease."""
    virtual = virtual_submit(lease.submitted_at, lease.duration, lease.count)
    return told_basis(lease.estimated_start, virtual_at=virtual, ahead=ahead)
