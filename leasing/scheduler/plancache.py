"""The planner's picture of a card model kept in the process from one pass to the next.

Reading a model's cards, its open allocations and its waiting leases costs time in
proportion to the pool and the queue (about 40 ms for 1,600 cards and 1,000 waiting leases);
a request that joins a queue needs none of it to have changed since the last pass. So the
pass keeps the picture it ended with (the cards, the holders' busy periods, the waiting
leases with what was stored for them), and the next pass in the same process uses it when
the database says nothing the planner reads has changed since: ``PlanVersion``, moved by
triggers on every such write (migration leasing/0025), so no write path can forget it.

``hold`` locks the model's version row for the transaction (moving it on) before anything
is read, so nobody can change what the planner reads until the commit; the picture is kept
after the commit with the version the transaction ended with, and only then. A pass that
rolls back keeps nothing. Each process keeps its own pictures: a request served by another
process than the last pass reads the database, as before.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime

from django.db import connection, transaction

from leasing.scheduler.planner import CardSlot, Decision, Request, Timeline
from leasing.scheduler.snapshot import Waiting, card_slots, timeline_for, waiting_for


@dataclass
class Picture:
    """What a pass reads of one model: as the database holds it at ``version``."""

    version: int
    cards: list[CardSlot]
    holders: Timeline  # busy periods of the leases holding or booked on cards
    waiting: list[Waiting]  # in service order

    def timeline(self) -> Timeline:
        """A copy of the holders' periods for a plan to add its reservations to."""
        copy = Timeline()
        for card_id, periods in self.holders.busy.items():
            if periods:
                copy.busy[card_id] = list(periods)
        return copy


_kept: dict[int, Picture] = {}

_BUMP = (
    "INSERT INTO leasing_planversion (card_model_id, version) VALUES (%s, 1)"
    " ON CONFLICT (card_model_id) DO UPDATE SET version = leasing_planversion.version + 1"
    " RETURNING version"
)


def hold(card_model_id: int) -> int:
    """Lock the model's version row until the commit, moving it on; the version it had."""
    with connection.cursor() as cursor:
        cursor.execute(_BUMP, [card_model_id])
        return cursor.fetchone()[0] - 1


def version_now(card_model_id: int) -> int:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT version FROM leasing_planversion WHERE card_model_id = %s", [card_model_id]
        )
        row = cursor.fetchone()
    return 0 if row is None else row[0]


def take(card_model_id: int, version: int, *, now: datetime) -> Picture | None:
    """The picture kept at *version* (it leaves the store: a pass changes it), or None."""
    picture = _kept.pop(card_model_id, None)
    if picture is None or picture.version != version:
        return None
    picture.holders.prune(now)
    return picture


def load(card_model_id: int, *, now: datetime) -> Picture:
    """The picture read from the database."""
    return Picture(
        version=-1,
        cards=card_slots(card_model_id, now=now),
        holders=timeline_for(card_model_id, now=now),
        waiting=waiting_for(card_model_id, now=now),
    )


def forget(card_model_id: int | None = None) -> None:
    """Drop the kept pictures (one model's, or all)."""
    if card_model_id is None:
        _kept.clear()
    else:
        _kept.pop(card_model_id, None)


@dataclass
class Applied:
    """What a pass wrote, to bring its picture up to what the database now holds."""

    started: list[tuple[Request, Decision]]
    booked: list[tuple[Request, Decision]]
    shown: dict[int, tuple]  # lease id -> (estimated start, stall reason, planned cards)
    complete: bool = True  # False: something was not written as decided (keep nothing)


def keep_after_commit(card_model_id: int, picture: Picture, applied: Applied, *, now) -> None:
    """Bring *picture* up to what the pass wrote and keep it once the transaction commits,
    with the version the transaction ends with (nobody else could move it: ``hold``)."""
    if not applied.complete:
        return
    gone = set()
    for request, decision in applied.started:
        gone.add(decision.lease_id)
        for card_id in decision.card_ids:
            picture.holders.add(card_id, now, now + request.duration)
    for request, decision in applied.booked:
        gone.add(decision.lease_id)
        for card_id in decision.card_ids:
            picture.holders.add(card_id, decision.start, decision.start + request.duration)
    waiting = []
    for w in picture.waiting:
        if w.request.lease_id in gone:
            continue
        shown = applied.shown.get(w.request.lease_id)
        if shown is not None:
            eta, stall, planned = shown
            w = replace(w, estimated_start=eta, stall_reason=stall, planned_cards=planned)
        waiting.append(w)
    picture.waiting = waiting
    picture.version = version_now(card_model_id)
    transaction.on_commit(lambda: _kept.__setitem__(card_model_id, picture))
