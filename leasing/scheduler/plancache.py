"""The planner's picture of a card model kept from one pass to the next, in the process and
shared between processes through the cache.

Reading a model's cards, its open allocations and its waiting leases costs time in
proportion to the pool and the queue (about 30 ms for 1,600 cards and 1,000 waiting leases);
a request that joins a queue needs none of it to have changed since the last pass. So the
pass keeps the picture it ended with (the cards, the holders' busy periods, the waiting
leases with what was stored for them), and the next pass uses it when the database says
nothing the planner reads has changed since: ``PlanVersion``, moved by triggers on every
such write (migration leasing/0025), so no write path can forget it.

``hold`` locks the model's version row for the transaction before anything is read, so
nobody can change what the planner reads until the commit; the picture is kept after the
commit with the version the transaction ended with, and only then. A pass that rolls back
keeps nothing.

**Between processes** (``CARDPOOL["PLAN_SHARING"]``, on when the cache is Redis): each pass
also leaves in the cache, under the version it ended with, one *step*: what it changed (the
leases that joined, those that started or were booked, the plans it wrote: a few hundred
bytes) and the version it started from; or, when it read the picture from the database, the
whole picture (a *base*, about 300 KB for 1,000 waiting). A process whose own picture is
behind (or that has none) walks the steps back from the version it holds until it reaches
its own picture or a base, and replays them: a few cache reads instead of the database.
Every ``BASE_EVERY`` steps the worker leaves a fresh base (``share``), so walks stay
short. A step missing, evicted or unreadable, a walk longer than ``WALK_MAX``: the database,
as without sharing. Steps are written only after the commit and describe exactly one
committed version, so a stale one can never be used (versions only grow); they expire after
``SHARE_SECONDS``. After restoring a database backup, clear the cache (docs/operations.md).
"""

from __future__ import annotations

import bisect
import hashlib
import logging
from collections import defaultdict
from dataclasses import dataclass, field, fields, replace
from datetime import datetime

from django.conf import settings
from django.core.cache import cache
from django.db import connection, transaction
from django.utils import timezone

from leasing.enqueue import enqueue_after_commit
from leasing.scheduler.planner import CardSlot, Decision, Request, Timeline
from leasing.scheduler.queueplan import KEY_FIELDS
from leasing.scheduler.search import longest_gap
from leasing.scheduler.snapshot import Waiting, card_slots, timeline_for, waiting_for

logger = logging.getLogger(__name__)

WALK_MAX = 16  # steps a process replays before it reads the database instead
BASE_EVERY = 8  # steps after a base before the worker is asked for a fresh one
SHARE_SECONDS = 600  # how long a step stays in the cache


@dataclass
class Picture:
    """What a pass reads of one model: as the database holds it at ``version``."""

    version: int
    cards: list[CardSlot]
    holders: Timeline  # busy periods of the leases holding or booked on cards
    waiting: list[Waiting]  # in service order
    depth: int = 0  # steps since the last shared base
    # what a pass did to it before planning (``admit``), and the version it was taken at
    # (None: read from the database inside this transaction)
    added: list[Waiting] = field(default_factory=list)
    taken: int | None = None
    # the refresh's plan up to its mark, left for its next slice: (QueuePlan, mark, version)
    refresh_plan: tuple | None = field(default=None, compare=False, repr=False)
    # lease id -> its entry in ``waiting``, and the off-peak start policies (lease id ->
    # policy): built when first asked (``index``, ``policies``), then kept up to date by
    # ``_insert`` and ``_advance``, so a pass looks up the few leases it touches instead of
    # walking the queue (tests/leasing/test_plan_index.py)
    by_id: dict[int, Waiting] | None = field(default=None, compare=False, repr=False)
    start_policies: dict[int, str] | None = field(default=None, compare=False, repr=False)

    def timeline(self) -> Timeline:
        """A copy of the holders' periods for a plan to add its reservations to."""
        copy = Timeline()
        gaps = self.holders.gaps  # kept with the picture: found once per card, not per pass
        for card_id, periods in self.holders.busy.items():
            if periods:
                copy.busy[card_id] = list(periods)
                gap = gaps.get(card_id)
                if gap is None:
                    gap = gaps[card_id] = longest_gap(periods)
                copy.gaps[card_id] = gap
        return copy

    def index(self) -> dict[int, Waiting]:
        """Each waiting lease's entry, by lease id."""
        if self.by_id is None:
            self.by_id = {w.request.lease_id: w for w in self.waiting}
        return self.by_id

    def policies(self) -> dict[int, str]:
        """The waiting leases with an off-peak start policy: lease id -> policy."""
        if self.start_policies is None:
            self.start_policies = {
                w.request.lease_id: w.start_policy for w in self.waiting if w.start_policy
            }
        return self.start_policies


_kept: dict[int, Picture] = {}

_HOLD = (
    "INSERT INTO leasing_planversion (card_model_id, version) VALUES (%s, 0)"
    " ON CONFLICT (card_model_id) DO UPDATE SET version = leasing_planversion.version"
    " RETURNING version"
)


def hold(card_model_id: int) -> int:
    """Lock the model's version row until the commit (without moving it: a pass that
    writes nothing the planner reads leaves every kept picture current); its version."""
    with connection.cursor() as cursor:
        cursor.execute(_HOLD, [card_model_id])
        return cursor.fetchone()[0]


_VERSION = "SELECT version FROM leasing_planversion WHERE card_model_id = %s"
_VERSION_FOR_SHARE = _VERSION + " FOR SHARE"


def version_now(card_model_id: int) -> int:
    with connection.cursor() as cursor:
        cursor.execute(_VERSION, [card_model_id])
        row = cursor.fetchone()
    return 0 if row is None else row[0]


def take(card_model_id: int, version: int, *, now: datetime) -> Picture | None:
    """The picture at *version*: this process's (it leaves the store: a pass changes it),
    brought up to *version* by the steps other processes shared; None when there is none."""
    picture = _kept.pop(card_model_id, None)
    if picture is None or picture.version != version:
        picture = _walk(card_model_id, version, picture) if sharing() else None
        if picture is None:
            return None
    picture.holders.prune(now)
    picture.taken = version
    picture.added = []
    return picture


def put_back(card_model_id: int, picture: Picture) -> None:
    """*picture*, taken (``take``) in this transaction with nothing written since, for the
    pass that follows in the same transaction to take again (at the same version) instead of
    reading the whole model from the database under the lock."""
    _kept[card_model_id] = picture


def admit(picture: Picture, newcomers: list[Waiting]) -> None:
    """Leases that joined the queue since *picture* was kept (read by the pass itself)."""
    _insert(picture, newcomers)
    picture.added.extend(newcomers)


def _insert(picture: Picture, newcomers: list[Waiting]) -> None:
    """*newcomers* into the waiting leases, in service order (a few: one search each)."""
    if len(newcomers) > 8:
        picture.waiting = sorted([*picture.waiting, *newcomers], key=_service_order)
    else:
        for w in newcomers:
            bisect.insort(picture.waiting, w, key=_service_order)
    _indexed(picture, newcomers)


def _indexed(picture: Picture, entries: list[Waiting]) -> None:
    """*entries* (new or changed) into the picture's index and policies, where built."""
    if picture.by_id is not None:
        picture.by_id.update((w.request.lease_id, w) for w in entries)
    if picture.start_policies is not None:
        for w in entries:
            if w.start_policy:
                picture.start_policies[w.request.lease_id] = w.start_policy
            else:
                picture.start_policies.pop(w.request.lease_id, None)


def _service_order(w: Waiting):
    return w.key


def load(card_model_id: int, *, now: datetime) -> Picture:
    """The picture read from the database."""
    return Picture(
        version=-1,
        cards=card_slots(card_model_id, now=now),
        holders=timeline_for(card_model_id, now=now),
        waiting=waiting_for(card_model_id, now=now),
    )


_SNAPSHOT = "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY"


def warm(card_model_id: int, *, now: datetime) -> bool:
    """Before a pass takes the model's lock, in a process with no picture of the model: read
    one in a snapshot of its own (PostgreSQL's repeatable read: every query sees the same
    committed state, the version row included; nothing is locked), and keep it at the version
    that snapshot saw. The pass under the lock then takes it (``take``) when nothing was
    written meanwhile, instead of reading the whole model while requests wait for the lock;
    when something was, ``take`` refuses it (another version) and the pass reads as before.
    Nothing outside a transaction of its own (a caller's transaction has its snapshot) or on
    SQLite (one writer: nothing waits on a read there). True when a picture was read."""
    if card_model_id in _kept or connection.vendor != "postgresql" or connection.in_atomic_block:
        return False
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute(_SNAPSHOT)
            cursor.execute(_VERSION, [card_model_id])
            row = cursor.fetchone()
        if row is None:
            return False
        picture = load(card_model_id, now=now)
    picture.version = row[0]
    _kept[card_model_id] = picture
    return True


def forget(card_model_id: int | None = None) -> None:
    """Drop this process's kept pictures (one model's, or all); the shared steps stay."""
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
    told: list[int] = field(default_factory=list)  # leases whose holders were sent a notice


def keep_after_commit(card_model_id: int, picture: Picture, applied: Applied, *, now) -> None:
    """Bring *picture* up to what the pass wrote and keep it once the transaction commits,
    with the version the transaction ends with (nobody else could move it: ``hold``); and
    share what changed (a step) or, when it was read from the database, the whole of it."""
    if not applied.complete:
        return
    _advance(picture, [(applied, now)])
    since, added = picture.taken, picture.added
    picture.version = version_now(card_model_id)
    picture.taken, picture.added = None, []
    transaction.on_commit(lambda: _kept.__setitem__(card_model_id, picture))
    if not sharing() or since == picture.version:
        return  # nothing the planner reads was written: the step there is still the one
    if since is None:
        picture.depth = 0
        transaction.on_commit(lambda: _put_base(card_model_id, picture), robust=True)
        return
    picture.depth += 1
    key = _key(card_model_id, f"step:{picture.version}")
    transaction.on_commit(lambda: _put(key, (since, added, applied, now)), robust=True)
    if picture.depth % BASE_EVERY == 0:
        enqueue_after_commit("leasing.tasks.plan_share", card_model_id)


def _advance(
    picture: Picture, passes: list[tuple[Applied, datetime]], added: list[Waiting] = ()
) -> None:
    """*picture* as the passes that decided each *applied* (at its time), in order, left it;
    *added*: the leases that joined the queue in those passes (the last pass's own are in
    its picture already). One walk over the waiting leases for all of them."""
    gone = set()
    shown: dict[int, tuple] = {}
    for applied, now in passes:
        for request, decision in applied.started:
            gone.add(decision.lease_id)
            for card_id in decision.card_ids:
                picture.holders.add(card_id, now, now + request.duration)
        for request, decision in applied.booked:
            gone.add(decision.lease_id)
            for card_id in decision.card_ids:
                picture.holders.add(card_id, decision.start, decision.start + request.duration)
        shown.update(applied.shown)
    _insert(picture, added)
    if not gone and not shown:
        return
    if len(gone) + len(shown) <= FEW_CHANGES:
        _change_few(picture, gone, shown)
        return
    waiting = []
    for w in picture.waiting:
        if w.request.lease_id in gone:
            continue
        now_shown = shown.get(w.request.lease_id)
        if now_shown is not None:
            eta, stall, planned = now_shown
            w = replace(w, estimated_start=eta, stall_reason=stall, planned_cards=planned)
        waiting.append(w)
    picture.waiting = waiting
    picture.by_id = picture.start_policies = None  # built again when next asked


# Up to this many leases changed by the passes replayed, each is found by its key (a search
# in the waiting leases, in service order); more, one walk over the queue.
FEW_CHANGES = 64


def _change_few(picture: Picture, gone: set[int], shown: dict[int, tuple]) -> None:
    """``_advance``'s changes, lease by lease: those *gone* leave the waiting leases, those
    *shown* get what the pass stored for them."""
    index = picture.index()
    waiting = picture.waiting
    for lease_id in gone:
        w = index.pop(lease_id, None)
        if w is not None:
            del waiting[_position(waiting, w)]
            if picture.start_policies is not None:
                picture.start_policies.pop(lease_id, None)
    for lease_id, (eta, stall, planned) in shown.items():
        w = index.get(lease_id)
        if w is None or lease_id in gone:
            continue
        new = replace(w, estimated_start=eta, stall_reason=stall, planned_cards=planned)
        waiting[_position(waiting, w)] = new
        index[lease_id] = new


def _position(waiting: list[Waiting], w: Waiting) -> int:
    """Where *w* is in *waiting* (in service order; keys are unique: they end in the id)."""
    i = bisect.bisect_left(waiting, w.key, key=_service_order)
    if i == len(waiting) or waiting[i] is not w:
        raise LookupError(w.request.lease_id)  # the index and the list disagree: a defect
    return i


# --- between processes ------------------------------------------------------------------


def sharing() -> bool:
    return settings.CARDPOOL["PLAN_SHARING"]


def shape_fingerprint() -> str:
    """A digest of the classes a shared step or base is pickled from (their names and
    fields): a deploy that changes one of them reads and writes under new keys, so a
    process never replays an entry of the old shape."""
    shape = [
        (cls.__qualname__, [(f.name, str(f.type)) for f in fields(cls)])
        for cls in (Picture, Applied, CardSlot, Timeline, Request, Decision, Waiting)
    ] + [("Key", KEY_FIELDS)]  # a waiting lease's service key (a tuple: no fields of its own)
    return hashlib.sha256(repr(shape).encode()).hexdigest()[:12]


def _key(card_model_id: int, what: str) -> str:
    """A step (``step:<version>``), a base (``base:<version>``), or ``base`` (the version
    of the newest base), under the shape's fingerprint."""
    database = settings.DATABASES["default"]["NAME"]
    return f"plan-picture:{_SHAPE}:{database}:{card_model_id}:{what}"


def _put_base(card_model_id: int, picture: Picture) -> None:
    """The whole picture, and the pointer to it; the base it replaces is deleted (only the
    newest is ever read, and a long queue's base is a few hundred kilobytes)."""
    busy = {card_id: periods for card_id, periods in picture.holders.busy.items() if periods}
    pointer = _key(card_model_id, "base")
    _put(_key(card_model_id, f"base:{picture.version}"), (picture.cards, busy, picture.waiting))
    try:
        old = cache.get(pointer)
        cache.set(pointer, picture.version, SHARE_SECONDS)
        if old is not None and old != picture.version:
            cache.delete(_key(card_model_id, f"base:{old}"))
    except Exception as exc:
        logger.warning("could not share the planner's picture (%s): %s", pointer, exc)


def _put(key: str, value) -> None:
    try:
        cache.set(key, value, SHARE_SECONDS)
    except Exception as exc:  # a cache that cannot be written only costs the next reader
        logger.warning("could not share the planner's picture (%s): %s", key, exc)


def _walk(card_model_id: int, version: int, own: Picture | None) -> Picture | None:
    """The picture at *version* from the shared steps, walked back to *own* (this process's
    picture, behind) or else to the newest base, then replayed forward. The walk goes on past
    the base towards *own* (replaying a few steps is cheaper than reading a base) while it
    can; None when neither is reached."""
    steps: list[tuple] = []
    at = version
    start: Picture | None = None
    to_base = None  # how many steps lead back to the base, once passed
    try:
        first = _key(card_model_id, f"step:{version}")
        found = cache.get_many([first, _key(card_model_id, "base")])
        base_at = found.get(_key(card_model_id, "base"), -1)
        step = found.get(first)
        while True:
            if own is not None and own.version == at:
                start = own
                break
            if at == base_at:
                to_base = len(steps)
                if own is None or own.version > at:
                    break
            if len(steps) >= WALK_MAX:
                break
            if step is None and steps:
                step = cache.get(_key(card_model_id, f"step:{at}"))
            if step is None:
                break
            steps.append(step)
            at, step = step[0], None
        if start is None:
            if to_base is None:
                return None
            steps = steps[:to_base]
            found = cache.get(_key(card_model_id, f"base:{base_at}"))
            if found is None:
                return None
            cards, busy, waiting = found
            start = Picture(base_at, cards, Timeline(busy=defaultdict(list, busy)), waiting)
    except Exception as exc:
        logger.warning("could not read the planner's shared picture: %s", exc)
        return None
    steps.reverse()  # oldest first
    try:
        _advance(
            start,
            [(applied, then) for _since, _added, applied, then in steps],
            [w for _since, added, _applied, _then in steps for w in added],
        )
    except Exception as exc:  # an entry that cannot be replayed: the database instead
        # (a half-advanced picture is dropped, this process's own included: ``take`` popped it)
        logger.warning("could not replay the planner's shared steps: %s", exc)
        return None
    start.depth = (start.depth if start is own else 0) + len(steps)
    start.version = version
    return start


def share(card_model_id: int) -> bool:
    """Leave a base of the model's picture at its current version in the cache (the worker,
    every ``BASE_EVERY`` steps): the version row is locked for reading only while the picture
    is taken or read, so writers wait for that alone. False when sharing is off."""
    if not sharing():
        return False
    now = timezone.now()
    with transaction.atomic():
        with connection.cursor() as cursor:
            locking = connection.features.has_select_for_update  # SQLite: one writer anyway
            cursor.execute(_VERSION_FOR_SHARE if locking else _VERSION, [card_model_id])
            row = cursor.fetchone()
        if row is None:
            return False
        version = row[0]
        picture = take(card_model_id, version, now=now) or load(card_model_id, now=now)
    picture.version, picture.taken, picture.added, picture.depth = version, None, [], 0
    _kept[card_model_id] = picture
    _put_base(card_model_id, picture)
    return True


_SHAPE = shape_fingerprint()
