"""Backfill around the head where one team waits (EASY inside a team).

``QueuePlan`` keeps a reservation for every waiting lease (conservative backfill), so a lease
starts early only into a hole no one ahead of it needs. Between teams that is what keeps
fair share honest: a team below its share is never passed by work of a team above it. Inside
one team it costs the team: its large leases hold idle cards in front of their reservations
that its own shorter work could use now (docs/performance.md, "Queue policy on a real
trace": b436b2's p95 6 % behind EASY's with every reservation kept, 8 % ahead with this).

So where every waiting lease of the model belongs to one team, ``HeadFirstPlan.advance``
also starts, in service order, each waiting lease that fits **now** on cards free over its
whole length around the holders and the **head's** reservation alone (the first lease in
service order: it is never delayed); those it passes are planned again behind it. Leases
of two or more teams waiting: exactly ``QueuePlan``.

Every lease still holds a planned start and cards, so every view of time reads the plan as
before; what changes is that a waiting lease behind the head may be passed by its own team's
shorter work, and its start moves (``moves`` tells it). The plan after ``advance`` is the
full plan of the queue left once nothing more starts: tests/leasing/test_headfirst.py holds
it to ``settled`` (``planner.plan_queue`` and these starts, from scratch) on random queues.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime, timedelta

from leasing.scheduler.bounded import room_of
from leasing.scheduler.planner import CardSlot, Decision, Request, Timeline, cards_for, place
from leasing.scheduler.queueplan import Planned, QueuePlan

_FAR = timedelta(days=36_500)


class HeadFirstPlan(QueuePlan):
    """``QueuePlan`` that backfills around the head alone while one team waits (see the
    module). *team_of(lease_id)*: the lease's team; None: never (plain ``QueuePlan``)."""

    def __init__(
        self,
        cards: Sequence[CardSlot],
        timeline: Timeline,
        *,
        now: datetime,
        team_of: Callable[[int], object] | None = None,
    ):
        super().__init__(cards, timeline, now=now)
        self.team_of = team_of
        # Built only when a card is free now (a full pool, the usual state of a long queue,
        # never needs them), then kept up to date; a restore or rebuild drops them:
        # the busy periods that are waiting leases' reservations (the rest are holders):
        # (card, start, end); and the waiting leases per team
        self._reserved: set[tuple[int, datetime, datetime]] | None = None
        self._teams: Counter | None = None
        self.passers: list[int] = []  # the leases the last ``advance`` started around the head

    # --- reading ----------------------------------------------------------------------
    def one_team(self) -> bool:
        """Whether two or more leases wait, all of one team (then the head alone is kept)."""
        if self.team_of is None or len(self.entries) < 2:
            return False
        if self._teams is None:
            self._teams = Counter(self.team_of(e.request.lease_id) for e in self.entries)
        return len(self._teams) == 1

    # --- changing ---------------------------------------------------------------------
    def teams_known(self, team_of: Callable[[int], object] | None) -> None:
        """Backfill around the head from now on where one team waits, with *team_of*; None:
        not (a plan of part of the queue, or one that only moves in time)."""
        self.team_of = team_of
        self._teams = None

    def advance(self, now: datetime) -> list[Planned]:
        """``QueuePlan.advance``; then, while one team waits, the leases that fit now around
        the holders and the head start too (those they pass planned again), until none does."""
        out = self._advance(now)
        self.passers = []
        while len(self.entries) > 1:
            started = self._backfill(now)
            if not started:
                break
            self.passers += [e.request.lease_id for e in started]
            out += started + self._advance(now)
        out.sort(key=lambda e: e.key)
        return out

    def rebuild(self, items: Iterable) -> list[Decision]:
        decisions = super().rebuild(items)
        self._reserved = self._teams = None
        return decisions

    def restore(self, stored) -> bool:
        ok = super().restore(stored)
        self._reserved = self._teams = None
        return ok

    def append(self, key, request: Request) -> Planned:
        entry = super().append(key, request)
        self._join(entry)
        return entry

    def add(self, key, request: Request) -> list[Planned]:
        out = super().add(key, request)
        self._join(out[0])
        return out

    def remove(self, lease_id: int) -> list[Planned]:
        gone = next((e for e in self.entries if e.request.lease_id == lease_id), None)
        out = super().remove(lease_id)
        if gone is not None:
            self._leave(gone)
        return out

    # --- inside -----------------------------------------------------------------------
    def _advance(self, now: datetime) -> list[Planned]:
        due = super().advance(now)
        for entry in due:  # they hold their cards now
            self._forget(entry)
            self._leave(entry)
        return due

    def _join(self, entry: Planned) -> None:
        if self._teams is not None:
            self._teams[self.team_of(entry.request.lease_id)] += 1

    def _leave(self, entry: Planned) -> None:
        if self._teams is not None:
            team = self.team_of(entry.request.lease_id)
            self._teams[team] -= 1
            if not self._teams[team]:
                del self._teams[team]

    def would_pass(self, now: datetime) -> bool:
        """Whether ``advance`` would start a lease around the head now (nothing changed but
        time: a lease's requested start came), without changing the plan."""
        return bool(self._choose(now, first=True))

    def _choose(self, now: datetime, *, first: bool = False):
        """(entry, cards) of those behind the head that fit now around the holders and the
        head's reservation, in service order (``place``), where one team waits; *first*: the
        first one only."""
        idle = self._idle_now(now)
        if not idle or not self.one_team():
            return []
        free = self._around_head(idle)
        scratch = Timeline()
        for card, periods in free:
            for period in periods:
                scratch.add(card.card_id, *period)
        same, anywhere = _room(free, now)
        cards = [card for card, _p in free]
        left = len(cards)
        started: list[tuple[Planned, tuple[int, ...]]] = []
        for entry in self.entries[1:]:
            request = entry.request
            k = request.count
            if k > left or request.not_before > now:
                continue
            room = same.get(k) if request.same_node else anywhere[k - 1]
            if room is None or room < request.duration:
                continue
            end = now + request.duration
            chosen = place(cards_for(cards, request), scratch, k, now, end,
                           same_node=request.same_node)  # fmt: skip
            if chosen is None:
                continue
            started.append((entry, tuple(chosen)))
            left -= k
            if first or not left:
                break
            for card_id in chosen:
                scratch.add(card_id, now, end)
            taken = set(chosen)
            free = [(c, p) for c, p in free if c.card_id not in taken]
            same, anywhere = _room(free, now)
        return started

    def _backfill(self, now: datetime) -> list[Planned]:
        """Those behind the head that fit now around the holders and the head's reservation
        started (``_choose``); the others planned again around them."""
        started = self._choose(now)
        if not started:
            return []
        gone = {e.request.lease_id for e, _c in started}
        for entry in reversed(self.entries):
            self._unreserve(entry)
        added, freed = [], []
        for entry, chosen in started:
            freed += self._windows(entry)
            entry.decision = Decision(entry.request.lease_id, now, chosen)
            for card_id in chosen:
                self.timeline.add(card_id, now, now + entry.request.duration)
            added += self._windows(entry)
        for entry, _c in started:
            self._leave(entry)
        self.entries = [e for e in self.entries if e.request.lease_id not in gone]
        self.keys = [e.key for e in self.entries]
        self._replan(self.entries, added=added, freed=freed)
        self._starts_reset()
        return [e for e, _c in started]

    def _idle_now(self, now: datetime):
        """The cards free now (no busy period has begun on them), each with its busy periods
        (holders' and reservations'), read off the timeline's index over the plan's cards."""
        self.timeline.watch(self.cards)  # kept since ``QueuePlan.__init__``: nothing rebuilt
        busy, cards = self.timeline.busy, self.cards
        return [
            (cards[n], busy.get(cards[n].card_id) or ())
            for n in self.timeline.index.idle(self.timeline, now)
        ]

    def _around_head(self, idle):
        """*idle* (``_idle_now``) with the periods of the holders and the head's reservation
        alone (the busy time a lease starting now must not overlap)."""
        if self._reserved is None:
            self._reserved = set()
            for entry in self.entries:
                self._forget(entry, reserve=True)
        reserved = self._reserved
        head = self.entries[0].decision
        head_cards = set(head.card_ids) if head.start is not None else ()
        out = []
        for card, periods in idle:
            card_id = card.card_id
            kept = [
                p for p in periods
                if (card_id, *p) not in reserved or (card_id in head_cards and p[0] == head.start)
            ]  # fmt: skip
            out.append((card, kept))
        return out

    def _forget(self, entry: Planned, *, reserve: bool = False) -> None:
        """Take *entry*'s reservation out of ``_reserved`` (*reserve*: put it in), where it
        is kept."""
        self._note(entry.decision, entry.request.duration, reserve=reserve)

    def _note(self, d: Decision, duration, *, reserve: bool) -> None:
        """``_forget`` for a decision *d* of that *duration* (one an entry may not hold yet)."""
        if self._reserved is None or d.start is None:
            return
        end = d.start + duration
        periods = [(c, d.start, end) for c in d.card_ids]
        if reserve:
            self._reserved.update(periods)
        else:
            self._reserved.difference_update(periods)

    def _plan(self, request: Request) -> Decision:
        decision = super()._plan(request)
        self._note(decision, request.duration, reserve=True)
        return decision

    def _reserve(self, entry: Planned) -> None:
        super()._reserve(entry)
        self._forget(entry, reserve=True)

    def _unreserve(self, entry: Planned) -> None:
        super()._unreserve(entry)
        self._forget(entry)


def _room(free, now: datetime):
    """How long the cards free now stay free of holders and the head (``bounded.room_of``):
    per count k, the longest time k cards of one node (*same*) and of the pool are."""
    spans = []
    for card, periods in free:
        span = periods[0][0] - now if periods else _FAR
        if card.usable_until is not None:
            span = min(span, card.usable_until - now)
        spans.append((card.node_id, span))
    same, anywhere = room_of(spans)
    return same, _Longest(anywhere)


class _Longest:
    """``anywhere[k - 1]``: the k-th longest span, or None past the last."""

    def __init__(self, spans: list[timedelta]):
        self.spans = spans

    def __getitem__(self, i: int) -> timedelta | None:
        return self.spans[i] if 0 <= i < len(self.spans) else None


def team_of(waiting) -> Callable[[int], object]:
    """A waiting lease's team, by lease id, from the model's waiting leases (``Waiting``);
    the table is made at the first question (most passes never ask: no card is free now)."""
    table: dict[int, object] = {}

    def of(lease_id: int) -> object:
        if not table:
            table.update((w.request.lease_id, w.team_id) for w in waiting)
        return table.get(lease_id)

    return of
