"""The queue's order and a plan of it kept up to date instead of rebuilt.

**Order** (``service_key``): priority class first; inside a class, the team's fair-share
factor (``fairshare``: a team further below its share first); then by a *virtual submit
time*: when the lease was submitted plus a slack that grows with its size (card-hours)
up to a cap. Every lease declares its duration, so a short one can be served ahead of a
long one submitted a little earlier, but never ahead of one submitted more than the cap
before it: the key is fixed when the lease is submitted, so a lease is overtaken only by
leases submitted before its own virtual time, and everyone who waits long enough comes
first. That bound is the aging. The fair-share factors change only when they are recomputed
(at fixed times, ``leasing.teams.fairshare``), which moves the plan's version and plans the
queue again from the start; between two recomputations no key changes while a lease waits,
which is what lets the plan below be updated rather than rebuilt (docs/decisions.md, "queue
order", "fair share").

**Plan** (``QueuePlan``): conservative backfill as ``planner.plan_queue`` decides it: in
service order, each waiting lease gets the earliest window around the reservations of
everyone ahead of it. A lease's decision depends only on the timeline and the leases
ahead, so when a request joins, the leases ahead keep theirs and only the newcomer and
those behind it are planned again; when time moves on and leases start or end exactly as
planned, only those ahead of a lease that started from behind them are looked at again (its
cards are now held, which can change their best fit). Anything else that changes the timeline (an early
release, a new card, a drain) needs ``rebuild``. tests/leasing/test_queueplan.py holds
every step to ``plan_queue`` on random timelines.

About 530 lines, one class on purpose: every step (join, leave, advance, reorder) keeps the
same reservations and start index exact, and the shortcuts of ``_replan`` reason about all
of them; split, each part would reach into the other's internals.
"""

from __future__ import annotations

import bisect
import heapq
import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from leasing.scheduler.planner import (
    CardSlot,
    Decision,
    Request,
    Timeline,
    cards_for,
    earliest,
    place,
)

# The slack of the virtual submit time: SLACK_PER_CARD_HOUR per card-hour asked, at most
# SLACK_CAP. Chosen on the Philly trace (bench/trace_replay.py, docs/performance.md).
SLACK_PER_CARD_HOUR = timedelta(minutes=15)
SLACK_CAP = timedelta(hours=4)

Key = tuple  # (-rank, -fair-share factor, virtual submit time, lease id): smaller first
KEY_FIELDS = ("-rank", "-fair", "virtual", "lease_id")  # in the plan cache's fingerprint
Window = tuple  # (start, end, frozenset of node ids): busy time added to or freed from a plan
_NOT_BEFORE = object()  # _keep: search from the old start on
_GO_ON = object()  # _keep_earlier: no earlier start, ask the next question


def slack(
    duration: timedelta,
    count: int,
    *,
    per_card_hour: timedelta = SLACK_PER_CARD_HOUR,
    cap: timedelta = SLACK_CAP,
) -> timedelta:
    """How far behind its submit time a lease of this size is served (see the module)."""
    card_hours = count * duration / timedelta(hours=1)
    return min(cap, per_card_hour * card_hours)


def service_key(
    *,
    rank: int,
    submitted_at: datetime,
    duration: timedelta,
    count: int,
    lease_id: int,
    fair: float = 1.0,
    per_card_hour: timedelta = SLACK_PER_CARD_HOUR,
    cap: timedelta = SLACK_CAP,
) -> Key:
    """The lease's place in the queue: higher class first, then the higher fair-share factor
    of its team (*fair*, ``fairshare.factors``), then the earlier virtual submit time, then
    the lower id. Changes only when the factors are recomputed."""
    virtual = submitted_at + slack(duration, count, per_card_hour=per_card_hour, cap=cap)
    return (-rank, -fair, virtual, lease_id)


@dataclass
class Planned:
    key: Key
    request: Request
    decision: Decision


class QueuePlan:
    """Conservative backfill over a queue, kept up to date as requests join and time moves.

    *timeline* holds the busy periods of the leases that hold cards; the plan adds each
    waiting lease's reservation to it (and takes it back when re-planning), so it always
    reads: holders + every planned reservation.
    """

    def __init__(self, cards: Sequence[CardSlot], timeline: Timeline, *, now: datetime):
        self.cards = cards
        self.timeline = timeline
        timeline.watch(cards)
        self.now = now
        self.keys: list[Key] = []
        self.entries: list[Planned] = []
        # every planned start (some outdated): ``advance`` looks at the entries only when
        # one of these has come (a heap, its smallest first, of (start, lease, a number that
        # keeps two items of one lease apart, the entry))
        self._starts: list[tuple[datetime, int, int, Planned]] = []
        self._pushed = itertools.count()
        self.node_of = {c.card_id: c.node_id for c in cards}
        self.by_node: dict[int, list[CardSlot]] = {}
        for card in cards:
            self.by_node.setdefault(card.node_id, []).append(card)

    # --- reading ----------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.entries)

    def any_due(self, now: datetime) -> bool:
        """Whether a planned start may have come by *now* (False: none has, for sure)."""
        return bool(self._starts) and self._starts[0][0] <= now

    def decisions(self) -> list[Decision]:
        """The decisions in service order (what ``plan_queue`` returns for the queue)."""
        return [e.decision for e in self.entries]

    # --- changing ---------------------------------------------------------------------
    def rebuild(self, items: Iterable[tuple[Key, Request]]) -> list[Decision]:
        """Plan the whole queue from scratch on the current timeline (no reservations)."""
        for entry in self.entries:
            self._unreserve(entry)
        ordered = sorted(items, key=lambda kr: kr[0])
        self.keys = [k for k, _r in ordered]
        self.entries = [Planned(k, r, self._plan(r)) for k, r in ordered]
        self._starts_reset()
        return self.decisions()

    def reorder(self, key_of, *, now: datetime | None = None) -> bool:
        """The keys changed (the fair-share factors were recomputed): *key_of(request)* gives
        each waiting lease its new key. The leases whose place in the order did not change up
        to the first that did keep their decisions (each depends only on the timeline and
        those ahead); from there on the queue is planned again in the new order. True when
        anything was planned again.

        *now*: when the keys changed, if later than the plan's time: those planned again are
        planned from then on (a start before it would be a start in the past: the lease would
        hold its cards from a moment it did not hold them). No planned start may have come
        before it (``advance`` was called at each), so the leases kept are exact then too."""
        if now is not None and now > self.now:
            self.now = now
            self.timeline.prune(now)
        new = [key_of(e.request) for e in self.entries]
        if all(a < b for a, b in zip(new, new[1:], strict=False)):
            # the factors changed but not the order (no team passed another): every decision
            # stands, only the keys are rewritten (a newcomer's place is found by them)
            for entry, key in zip(self.entries, new, strict=True):
                entry.key = key
            self.keys = new
            return False
        keyed = sorted(zip(new, self.entries, strict=True), key=lambda ke: ke[0])
        first = next((n for n, (_k, e) in enumerate(keyed) if e is not self.entries[n]), len(keyed))
        for entry in reversed(self.entries[first:]):
            self._unreserve(entry)
        for n, (key, entry) in enumerate(keyed):
            entry.key = key
            if n >= first:
                entry.decision = self._plan(entry.request)
        self.entries = [e for _k, e in keyed]
        self.keys = [k for k, _e in keyed]
        self._starts_reset()  # the decisions planned again: ``advance`` looks at their starts
        return first < len(keyed)

    def restore(
        self, stored: Iterable[tuple[Key, Request, datetime | None, Sequence[int] | None]]
    ) -> bool:
        """Take back a plan a pass made earlier (each waiting lease's key, request, planned
        start and cards; start None: it can never fit), in service order, without planning.

        False, leaving the plan empty, when it cannot be exactly what planning now would
        give: a lease was never planned, its start has come, or its cards are no longer
        usable or free, or not on the nodes its requirements allow. (A plan is exact as long as every change that frees cards re-plans,
        which is the rule: ``run.replan``.)"""
        until = {c.card_id: c.usable_until for c in self.cards}
        entries: list[Planned] = []
        ok = True
        for key, request, start, card_ids in stored:
            if start is None:
                if card_ids is not None:
                    ok = False
                    break
                entries.append(Planned(key, request, Decision(request.lease_id, None)))
                continue
            if (
                card_ids is None
                or start <= self.now
                or start < request.not_before
                or len(set(card_ids)) != request.count
            ):
                ok = False
                break
            end = start + request.duration
            if not all(
                c in until
                and (request.nodes is None or self.node_of[c] in request.nodes)
                and (until[c] is None or end <= until[c])
                and self.timeline.is_free(c, start, end)
                for c in card_ids
            ):
                ok = False
                break
            entry = Planned(key, request, Decision(request.lease_id, start, tuple(card_ids)))
            self._reserve(entry)
            entries.append(entry)
        if not ok or any(a.key >= b.key for a, b in zip(entries, entries[1:], strict=False)):
            for entry in entries:
                self._unreserve(entry)
            return False
        self.entries = entries
        self.keys = [e.key for e in entries]
        self._starts_reset()
        return True

    def estimate_behind(
        self,
        stale: Iterable[tuple[Request, datetime | None, Sequence[int] | None]],
        request: Request,
    ) -> Decision:
        """An estimate for *request* behind leases whose stored plan is stale (planned before
        someone joined ahead of them): their stored reservations that still fit are counted
        as busy, the others are left out. Not an exact plan: the caller neither stores cards
        from it nor starts the lease on it. The plan itself is left as it was."""
        added: list[tuple[int, datetime, datetime]] = []
        until = {c.card_id: c.usable_until for c in self.cards}
        for stale_request, start, card_ids in stale:
            if start is None or not card_ids:
                continue
            end = start + stale_request.duration
            if all(
                c in until and (until[c] is None or end <= until[c])
                and self.timeline.is_free(c, start, end)
                for c in card_ids
            ):  # fmt: skip
                for c in card_ids:
                    self.timeline.add(c, start, end)
                    added.append((c, start, end))
        if request.not_before < self.now:
            request = request.not_before_at(self.now)
        decision = earliest(cards_for(self.cards, request), self.timeline, request)
        for c, start, end in added:
            self.timeline.remove(c, start, end)
        return Decision(request.lease_id, decision.start)

    def append(self, key: Key, request: Request) -> Planned:
        """Plan *request* after everyone in the plan (its key must be the largest)."""
        if self.keys and key <= self.keys[-1]:
            raise ValueError("append: the key must come after every key in the plan")
        entry = Planned(key, request, self._plan(request))
        self.keys.append(key)
        self.entries.append(entry)
        self._track(entry)
        return entry

    def add(self, key: Key, request: Request) -> list[Planned]:
        """A request joins: plan it after everyone ahead; re-plan only those behind it.

        Returns the entries whose decision was (re)made: the newcomer, then those behind."""
        i = bisect.bisect_right(self.keys, key)
        behind = self.entries[i:]
        for entry in reversed(behind):
            self._unreserve(entry)
        new = Planned(key, request, self._plan(request))
        self._replan(behind, added=self._windows(new), freed=[])
        self.keys.insert(i, key)
        self.entries.insert(i, new)
        # tracked once in the plan: the index, rebuilt from the entries when it grows, would
        # lose a start tracked before
        self._track(new)
        return [new, *behind]

    def remove(self, lease_id: int) -> list[Planned]:
        """A waiting lease leaves (cancelled, rejected): those behind it may move up."""
        i = next((n for n, e in enumerate(self.entries) if e.request.lease_id == lease_id), None)
        if i is None:
            return []
        gone = self.entries[i]
        behind = self.entries[i + 1 :]
        for entry in reversed(self.entries[i:]):
            self._unreserve(entry)
        del self.keys[i]
        del self.entries[i]
        self._replan(behind, added=[], freed=self._windows(gone))
        return behind

    def advance(self, now: datetime) -> list[Planned]:
        """Time moves to *now* with every holder ending when it said it would: take out (and
        return, in service order) the leases whose planned start has come. Their
        reservations stay in the timeline: they now hold those cards.

        A lease that starts now from behind one still waiting was planned around it; now it
        holds its cards, and for the one ahead that is busy time added (the best fit there
        may change), so those ahead of a starting lease are planned again (``_replan``)."""
        self.now = now
        self.timeline.prune(now)
        out: list[Planned] = []
        # again while the re-planning moves someone's start to now (a lease ahead of one
        # that started may move to another node and free the cards of one behind it)
        while self.any_due(now):
            # the entries whose tracked start has come (every current start is tracked; an
            # outdated one names an entry whose start moved, or one no longer in the plan)
            come: dict[int, Planned] = {}
            starts = self._starts  # ``_track`` may put a new heap in its place
            while starts and starts[0][0] <= now:
                entry = heapq.heappop(starts)[3]
                d = entry.decision
                if d.start is not None and d.start <= now and self._holds(entry):
                    come[entry.request.lease_id] = entry
            if not come:
                continue  # only outdated starts had come
            due = sorted(come.values(), key=lambda e: e.key)
            for entry in reversed(due):  # out of the plan, found by their keys
                i = bisect.bisect_left(self.keys, entry.key)
                del self.keys[i]
                del self.entries[i]
            keep = self.entries
            out += due
            last = due[-1].key
            if keep and keep[0].key < last:  # a lease started from behind one still waiting
                # those ahead of the last one started are planned again; those behind it were
                # planned after it and move only if someone ahead of them does: they keep
                # their reservations unless a lease ahead needs a search (``_replan``)
                ahead = bisect.bisect_left(self.keys, last)
                for entry in reversed(keep[:ahead]):
                    self._unreserve(entry)
                started = [(e.key, w) for e in due for w in self._windows(e)]
                self._replan(keep, added=[], freed=[], started=started, reserved_from=ahead)
        out.sort(key=lambda e: e.key)
        return out

    # --- inside -----------------------------------------------------------------------
    def _replan(
        self,
        behind: list[Planned],
        *,
        added: list[Window],
        freed: list[Window],
        started: list[tuple[Key, Window]] = (),
        reserved_from: int | None = None,
    ) -> None:
        """Plan *behind* again, in order, after the timeline changed ahead of them: busy time
        *added* (new reservations) and *freed* (reservations taken out).

        *reserved_from*: the entries from there on still hold their reservations (none of the
        changes reaches them unless an entry before them changes): they are taken out only
        when an entry ahead needs a search (which must not see them), and when none does,
        they stand as they are.

        What ``earliest`` and ``place`` would decide, without a search over the whole pool
        where the answer is known (``_keep``). Every decision that changes adds its old
        window to *freed* and its new one to *added* for those behind it. *started*: leases
        that hold cards now and were behind some of *behind* (``advance``): added busy time
        for those ahead of them."""
        # The times the changes span, for a test that needs no walk over them: an entry whose
        # window no change reaches (nothing freed before its end, nothing added over it)
        # keeps its decision, as ``_keep`` would decide it. Most of a long queue is that.
        freed_from = min((w[0] for w in freed), default=None)
        added_span = _span(added)
        started_span = _span([w for _k, w in started])
        last_started = max((k for k, _w in started), default=None)
        for n, entry in enumerate(behind):
            if n == reserved_from:
                return  # no entry ahead changed or searched: those left stand as they are
            old = entry.decision
            if old.start is None:
                if freed_from is None:
                    continue  # nothing was freed: still never fits
            else:
                start, end = old.start, old.start + entry.request.duration
                if (
                    (freed_from is None or freed_from >= end)
                    and (added_span is None or added_span[0] >= end or added_span[1] <= start)
                    and (
                        last_started is None
                        or entry.key > last_started
                        or started_span[0] >= end
                        or started_span[1] <= start
                    )
                ):
                    self._reserve(entry)
                    continue
            if reserved_from is not None:  # (before it: at it, the loop has returned)
                for later in reversed(behind[reserved_from:]):
                    self._unreserve(later)  # out of the way of this search
                reserved_from = None
            extra = [w for key, w in started if key > entry.key]
            kept = self._keep(entry, old, added + extra if extra else added, freed)
            if kept is _NOT_BEFORE:
                later = entry.request
                if old.start > later.not_before:
                    later = later.not_before_at(old.start)
                entry.decision = self._plan(later)
            elif kept is None:
                entry.decision = self._plan(entry.request)
            else:
                entry.decision = kept
                self._reserve(entry)
            if entry.decision != old:
                self._track(entry)
                was, new = self._windows(entry, old), self._windows(entry)
                freed, added = freed + was, added + new
                if was:
                    freed_from = min(was[0][0], freed_from or was[0][0])
                added_span = _span(new, added_span)

    def _keep(
        self, entry: Planned, old: Decision, added: list[Window], freed: list[Window]
    ) -> Decision | object | None:
        """The decision *entry* gets, found without searching the whole pool; None when it
        needs ``earliest``; ``_NOT_BEFORE`` when it needs it only from its old start on. The reasoning (held to the full planner by the property tests):

        * busy time added never makes an earlier start possible, so only nodes where time
          was freed before the lease's end can offer an earlier start; if its old cards are
          still free, its start is the earlier of the old one and the best on those nodes
          (a one-node request fits on one node at a time, so the search can stay on them);
        * at that start, ``place`` ranks nodes by their free cards over the window; nodes
          no change touches in the window rank as before, so the old node and domain stay
          the best fit unless a touched node now ranks ahead of it.
        """
        request = entry.request
        if old.start is None:
            return old if not freed else None
        start, end = old.start, old.start + request.duration
        before_end = [w for w in freed if w[0] < end]
        if before_end or any(a < end and start < b for a, b, _n in added):
            if not all(self.timeline.is_free(c, start, end) for c in old.card_ids):
                if before_end:
                    return None
                # only busy time added: it cannot start before its old start, which is
                # still a candidate (the period ending there was not taken out)
                return _NOT_BEFORE
        if before_end:
            if not request.same_node or self._indexed(request):
                return None  # (one card read off the index costs less than the question)
            earlier = self._keep_earlier(request, old, before_end)
            if earlier is not _GO_ON:
                return earlier
        return self._keep_at(request, old, added, freed)

    def _keep_earlier(
        self, request: Request, old: Decision, before_end: list[Window]
    ) -> Decision | object | None:
        """``_keep``'s first question, time having been freed before the lease's end: an
        earlier start on the nodes where it was freed (placed over the whole pool then), or
        ``_GO_ON`` when there is none."""
        nodes = set().union(*(w[2] for w in before_end))
        if request.nodes is not None:
            nodes &= request.nodes
        sub = [c for n in sorted(nodes) for c in self.by_node.get(n, ())]
        if request.not_before < self.now:
            request = request.not_before_at(self.now)
        earlier = earliest(sub, self.timeline, request)
        if earlier.start is None or earlier.start >= old.start:
            return _GO_ON
        # place over the whole pool at the new start (best fit across every node)
        chosen = place(
            cards_for(self.cards, request), self.timeline, request.count, earlier.start,
            earlier.start + request.duration, same_node=True,
        )  # fmt: skip
        return None if chosen is None else Decision(old.lease_id, earlier.start, tuple(chosen))

    def _keep_at(
        self, request: Request, old: Decision, added: list[Window], freed: list[Window]
    ) -> Decision | None:
        """``_keep``'s second question, at the old start: the old cards, unless a node the
        changes touched inside its window now ranks ahead of them."""
        start, end = old.start, old.start + request.duration
        timeline = self.timeline
        touched = set().union(*(w[2] for w in (*added, *freed) if w[0] < end and start < w[1]))
        if request.nodes is not None:
            touched &= request.nodes  # changes on nodes it may not use do not concern it
        if not touched:
            return old  # nothing changed inside its window: the same cards are the best fit
        if self._indexed(request):
            return None  # one card read off the index costs less than what follows
        node = self.node_of[old.card_ids[0]]
        domains = {c.domain for c in self.by_node[node] if c.card_id in set(old.card_ids)}
        if (
            node in touched
            or len(domains) != 1
            or any(self.node_of[c] != node for c in old.card_ids)
        ):
            chosen = place(
                cards_for(self.cards, request),
                timeline,
                request.count,
                start,
                end,
                same_node=request.same_node,
            )
            return None if chosen is None else Decision(old.lease_id, start, tuple(chosen))
        # the old choice came from place's first step (one node, one domain) on an untouched
        # node: compare it only with the touched nodes' best
        mine = _best_domain(self.by_node[node], timeline, request.count, start, end)
        others = _best_domain(
            [c for n in sorted(touched) for c in self.by_node.get(n, ())],
            timeline, request.count, start, end,
        )  # fmt: skip
        if mine is None:
            return None
        best = mine if others is None or mine[0] < others[0] else others
        return Decision(old.lease_id, start, best[1])

    def _indexed(self, request: Request) -> bool:
        """Whether ``earliest`` finds *request* from the timeline's index (one card, any of
        the plan's cards: ``search.FreeIndex``); then ``_keep`` asks only its cheap questions
        and leaves the rest to that search."""
        index = self.timeline.index
        return (
            request.count == 1
            and request.nodes is None
            and index is not None
            and index.cards is self.cards
        )

    def _holds(self, entry: Planned) -> bool:
        """Whether *entry* is in the plan (found by its key)."""
        i = bisect.bisect_left(self.keys, entry.key)
        return i < len(self.entries) and self.entries[i] is entry

    def _track(self, entry: Planned) -> None:
        start = entry.decision.start
        if start is not None:
            heapq.heappush(self._starts, (start, entry.request.lease_id, next(self._pushed), entry))
            if len(self._starts) > 2 * len(self.entries) + 64:
                self._starts_reset()  # outdated starts pile up: keep the current ones only

    def _starts_reset(self) -> None:
        self._starts = [
            (e.decision.start, e.request.lease_id, next(self._pushed), e)
            for e in self.entries
            if e.decision.start is not None
        ]
        heapq.heapify(self._starts)

    def _windows(self, entry: Planned, decision: Decision | None = None) -> list[Window]:
        d = entry.decision if decision is None else decision
        if d.start is None:
            return []
        nodes = frozenset(self.node_of[c] for c in d.card_ids)
        return [(d.start, d.start + entry.request.duration, nodes)]

    def _plan(self, request: Request) -> Decision:
        if request.not_before < self.now:
            request = request.not_before_at(self.now)
        decision = earliest(cards_for(self.cards, request), self.timeline, request)
        if decision.start is not None:
            end = decision.start + request.duration
            for card_id in decision.card_ids:
                self.timeline.add(card_id, decision.start, end)
        return decision

    def _reserve(self, entry: Planned) -> None:
        d = entry.decision
        if d.start is None:
            return
        end = d.start + entry.request.duration
        for card_id in d.card_ids:
            self.timeline.add(card_id, d.start, end)

    def _unreserve(self, entry: Planned) -> None:
        d = entry.decision
        if d.start is None:
            return
        end = d.start + entry.request.duration
        for card_id in d.card_ids:
            self.timeline.remove(card_id, d.start, end)


def _span(windows: list[Window], span: tuple | None = None) -> tuple | None:
    """(earliest start, latest end) of *windows* and of *span* (None: none at all)."""
    for a, b, _nodes in windows:
        span = (a, b) if span is None else (min(span[0], a), max(span[1], b))
    return span


def _best_domain(cards: Sequence[CardSlot], timeline: Timeline, count, start, end):
    """``place``'s first step over *cards*: (its ranking key, the cards) of the best node and
    interconnect domain with *count* cards free over [start, end), or None."""
    free: dict[int, dict[int, list[int]]] = {}
    for card in cards:
        if card.usable_until is not None and end > card.usable_until:
            continue
        if timeline.is_free(card.card_id, start, end):
            free.setdefault(card.node_id, {}).setdefault(card.domain, []).append(card.card_id)
    best = None
    for node, domains in free.items():
        node_free = sum(len(ids) for ids in domains.values())
        for domain, ids in domains.items():
            if len(ids) >= count:
                key = (node_free, len(ids), node, domain)
                if best is None or key < best[0]:
                    best = (key, tuple(ids[:count]))
    return best
