"""A queue plan with a reservation depth: conservative backfill for the first ``depth``
waiting leases, backfill for the rest (Slurm's ``bf_max_job_test``).

``QueuePlan`` reserves cards for every waiting lease. When thousands wait, a request that the
order puts near the front (a short one, or one of a team below its fair share) re-plans
everyone behind it, and with a full plan those behind move too: the cost of one join grows
with the queue (docs/performance.md, "Queue policy on a real trace"). ``BoundedPlan`` keeps
the same plan for the *head* (the first ``depth`` leases in service order: each gets the
earliest window around the holders and everyone ahead of it) and none for the *tail*:

* a tail lease holds no reservation; it starts when it fits **now** on cards no head
  reservation needs over its whole length (``_backfill``, in service order), or when it
  moves into the head as leases ahead of it start or leave (``_promote``);
* it is told a start from the free card-time the plan leaves (``tail_estimates``): the
  first moment by which the card-time free after the holders and the head's reservations
  covers the tail's work ahead of it, and its own count of cards is free. (Counting only
  90 % of that time, for cards fragmentation leaves idle, changed the replay's told waits
  by 5 % and kept no more starts: it is not done.)

So a join behind the head costs a search in a sorted list, a join into the head re-plans at
most ``depth`` leases, and a lease started from the tail never delays a reservation.
tests/leasing/test_bounded_plan.py holds the head to ``plan_queue`` and the tail's backfill to
"nothing more fits now"; with a depth past the queue it is ``QueuePlan`` exactly.

Used by the replay (``bench/trace_replay.py --depth``); the portal's passes still plan the
whole queue (``QueuePlan``, stored per lease), see docs/decisions.md "reservation depth".
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable
from datetime import datetime, timedelta

from leasing.scheduler.planner import Decision, cards_for, place
from leasing.scheduler.queueplan import Key, Planned, QueuePlan

DEPTH = 10  # leases planned with reservations (bench/trace_replay.py --depth)
_FAR = timedelta(days=36_500)


class BoundedPlan(QueuePlan):
    """``QueuePlan`` for the first *depth* leases in service order; the rest wait unplanned
    in ``tail`` (see the module). ``entries`` and ``keys`` hold the head only."""

    def __init__(self, cards, timeline, *, now: datetime, depth: int = DEPTH):
        if depth < 1:
            raise ValueError("depth: at least 1")
        super().__init__(cards, timeline, now=now)
        self.depth = depth
        self.tail: list[Planned] = []  # in service order, no reservation, decision start None
        self.tail_keys: list[Key] = []

    # --- reading ----------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.entries) + len(self.tail)

    def tail_estimates(self, now: datetime) -> list[tuple[Planned, datetime]]:
        """Each tail lease with the start it is told (see the module), in service order:
        never before *now* or its own earliest start."""
        out = []
        free = FreeTime(self.timeline, len(self.cards), now)
        ahead = 0.0
        for entry in self.tail:
            request = entry.request
            out.append((entry, max(free.at(ahead, request.count), request.not_before)))
            ahead += request.count * request.duration.total_seconds()
        return out

    def tail_estimate(self, lease_id: int, now: datetime) -> datetime | None:
        """``tail_estimates`` for one tail lease (None: not in the tail)."""
        n = next((i for i, e in enumerate(self.tail) if e.request.lease_id == lease_id), None)
        if n is None:
            return None
        request = self.tail[n].request
        ahead = sum(e.request.count * e.request.duration.total_seconds() for e in self.tail[:n])
        free = FreeTime(self.timeline, len(self.cards), now)
        return max(free.at(ahead, request.count), request.not_before)

    # --- changing ---------------------------------------------------------------------
    def rebuild(self, items: Iterable[tuple[Key, object]]) -> list[Decision]:
        ordered = sorted(items, key=lambda kr: kr[0])
        for entry in self.entries:
            self._unreserve(entry)
        self.entries, self.keys, self.tail, self.tail_keys = [], [], [], []
        for key, request in ordered:
            self.append(key, request)
        return self.decisions()

    def restore(self, stored) -> bool:
        """A bounded plan is not taken back from stored plans: plan it (``rebuild``)."""
        return False

    def append(self, key: Key, request) -> Planned:
        last = self.tail_keys[-1] if self.tail_keys else (self.keys[-1] if self.keys else None)
        if last is not None and key <= last:
            raise ValueError("append: the key must come after every key in the plan")
        if len(self.entries) < self.depth:
            return super().append(key, request)
        entry = Planned(key, request, Decision(request.lease_id, None))
        self.tail.append(entry)
        self.tail_keys.append(key)
        return entry

    def add(self, key: Key, request) -> list[Planned]:
        """A request joins: behind the head it waits in the tail (nothing is planned); in
        the head it is planned and those behind it in the head are planned again
        (``QueuePlan.add``), the head's last lease first moving to the tail when it is full
        (nobody in the head is behind it: taking its reservation back changes no one's)."""
        if len(self.entries) >= self.depth:
            if key > self.keys[-1]:
                i = bisect.bisect_right(self.tail_keys, key)
                entry = Planned(key, request, Decision(request.lease_id, None))
                self.tail_keys.insert(i, key)
                self.tail.insert(i, entry)
                return [entry]
            last = self.entries.pop()
            self.keys.pop()
            self._unreserve(last)
            self._to_tail(last)
        return super().add(key, request)

    def remove(self, lease_id: int) -> list[Planned]:
        for n, entry in enumerate(self.tail):
            if entry.request.lease_id == lease_id:
                del self.tail[n], self.tail_keys[n]
                return []
        behind = super().remove(lease_id)
        return behind + self._promote()

    def reorder(self, key_of, *, now: datetime | None = None) -> bool:
        """The keys changed: the head is planned again from the first lease whose place
        changed (at most ``depth`` leases), the tail only sorted."""
        if now is not None and now > self.now:
            self.now = now
            self.timeline.prune(now)
        everyone = self.entries + self.tail
        keyed = sorted(((key_of(e.request), e) for e in everyone), key=lambda ke: ke[0])
        first = next((n for n, (_k, e) in enumerate(keyed) if e is not everyone[n]), len(keyed))
        for entry in reversed(self.entries[first:]):
            self._unreserve(entry)
        for n, (key, entry) in enumerate(keyed):
            entry.key = key
            if first <= n < self.depth:
                entry.decision = self._plan(entry.request)
            elif n >= self.depth:
                entry.decision = Decision(entry.request.lease_id, None)
        head, tail = keyed[: self.depth], keyed[self.depth :]
        self.entries, self.keys = [e for _k, e in head], [k for k, _e in head]
        self.tail, self.tail_keys = [e for _k, e in tail], [k for k, _e in tail]
        self._starts_reset()
        return first < len(head)

    def advance(self, now: datetime) -> list[Planned]:
        """``QueuePlan.advance`` for the head, the tail moving up as the head empties; then
        the tail's backfill: what fits now around every reservation starts now."""
        out: list[Planned] = []
        while True:
            out += super().advance(now)
            self._promote()
            if not self.any_due(now):
                break
        while started := self._backfill(now):
            out += started
            if not self.entries:
                break
            # they hold cards now and were behind the whole head: the head's best fits are
            # looked at again around them (no start moves: only busy time was added), and
            # a head lease that moves to other cards may leave room for more of the tail
            for entry in reversed(self.entries):
                self._unreserve(entry)
            windows = [(e.key, w) for e in started for w in self._windows(e)]
            self._replan(self.entries, added=[], freed=[], started=windows)
        out.sort(key=lambda e: e.key)
        return out

    # --- inside -----------------------------------------------------------------------
    def _to_tail(self, entry: Planned) -> None:
        entry.decision = Decision(entry.request.lease_id, None)
        self.tail.insert(0, entry)
        self.tail_keys.insert(0, entry.key)

    def _promote(self) -> list[Planned]:
        """Tail leases move into the head while it has room, planned behind everyone in it."""
        moved = []
        while self.tail and len(self.entries) < self.depth:
            entry = self.tail.pop(0)
            self.tail_keys.pop(0)
            entry.decision = self._plan(entry.request)
            self.entries.append(entry)
            self.keys.append(entry.key)
            self._track(entry)
            moved.append(entry)
        return moved

    def _room(self, now: datetime):
        """How long the cards free now stay free: per count k, the longest time k cards of
        one node (*same*) and k cards of the pool (*anywhere*, longest first) are free."""
        busy = self.timeline.busy
        spans: list[tuple[int, timedelta]] = []
        for card in self.cards:
            periods = busy.get(card.card_id)
            if periods and periods[0][0] <= now:
                continue
            free = periods[0][0] - now if periods else _FAR
            if card.usable_until is not None:
                free = min(free, card.usable_until - now)
            if free > timedelta(0):
                spans.append((card.node_id, free))
        return room_of(spans)

    def _backfill(self, now: datetime) -> list[Planned]:
        """Tail leases that fit now, in service order, on cards free over their whole length
        around every reservation (``place``); the counts of ``_room`` skip those that
        cannot without a search."""
        started: list[Planned] = []
        if not self.tail:
            return started
        same, anywhere = self._room(now)
        n = 0
        while anywhere and n < len(self.tail):
            entry = self.tail[n]
            request = entry.request
            k = request.count
            if request.same_node:
                room = same.get(k)
            else:
                room = anywhere[k - 1] if k <= len(anywhere) else None
            chosen = None
            if room is not None and room >= request.duration and request.not_before <= now:
                chosen = place(
                    cards_for(self.cards, request), self.timeline, k, now,
                    now + request.duration, same_node=request.same_node,
                )  # fmt: skip
            if chosen is None:
                n += 1
                continue
            entry.decision = Decision(request.lease_id, now, tuple(chosen))
            self._reserve(entry)
            del self.tail[n], self.tail_keys[n]
            started.append(entry)
            same, anywhere = self._room(now)
        return started


def room_of(spans: Iterable[tuple[int, timedelta]]):
    """From (node, how long a card stays free) of the cards free now: per count k, the longest
    time k cards of one node are free (*same*, a dict), and the spans longest first
    (*anywhere*: k cards of the pool are free for its k-th)."""
    by_node: dict[int, list[timedelta]] = {}
    anywhere: list[timedelta] = []
    for node, span in spans:
        by_node.setdefault(node, []).append(span)
        anywhere.append(span)
    same: dict[int, timedelta] = {}
    for node_spans in by_node.values():
        node_spans.sort(reverse=True)
        for k, span in enumerate(node_spans, 1):
            if span > same.get(k, timedelta(0)):
                same[k] = span
    anywhere.sort(reverse=True)
    return same, anywhere


class FreeTime:
    """The free card-time of a pool from *now* on: its cards less the busy ones of
    *timeline* (holders and reservations), swept forward once (``at``)."""

    def __init__(self, timeline, pool: int, now: datetime):
        change: dict[datetime, int] = {}
        for periods in timeline.busy.values():
            for start, end in periods:
                start = max(start, now)
                if end > start:
                    change[start] = change.get(start, 0) + 1
                    change[end] = change.get(end, 0) - 1
        self.change, self.moments, self.pool = change, sorted(change), pool
        self.t, self.busy, self.covered, self.i = now, 0, 0.0, 0
        self._catch_up()

    def at(self, need: float, count: int) -> datetime:
        """The first moment, not before the last answer, by which the free card-time covers
        *need* card-seconds and *count* cards are free (asked with *need* not decreasing)."""
        while self.covered < need:
            rate = self.pool - self.busy
            nxt = self.moments[self.i] if self.i < len(self.moments) else None
            left = need - self.covered
            if nxt is None or (rate > 0 and rate * (nxt - self.t).total_seconds() >= left):
                self.t += timedelta(seconds=left / max(rate, 1))
                self.covered = need
                break
            self._move(nxt)
        while self.pool - self.busy < count and self.i < len(self.moments):
            self._move(self.moments[self.i])
        return self.t

    def _move(self, moment: datetime) -> None:
        self.covered += max(self.pool - self.busy, 0) * (moment - self.t).total_seconds()
        self.t = moment
        self._catch_up()

    def _catch_up(self) -> None:
        while self.i < len(self.moments) and self.moments[self.i] <= self.t:
            self.busy += self.change[self.moments[self.i]]
            self.i += 1
