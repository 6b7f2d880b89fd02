"""The placement and queue planner: pure Python over a snapshot, no database.

Every lease declares its end, so the future is known exactly: each card has a sorted
list of busy periods. The planner answers two questions on that picture:

* ``place`` — which cards to give *count* cards for ``[start, end)``: all on one node
  and one interconnect domain when possible, best fit (the node with the fewest free
  cards that still fits, so whole nodes stay whole for large requests);
* ``plan_queue`` — conservative backfill: walk the queue in order (priority, then
  submit time); each waiting lease gets the earliest window where it fits *around the
  reservations of everyone ahead of it*. A lease that fits now starts now — that is the
  backfill, and by construction it delays nobody ahead. The rest get an estimated start.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from leasing.scheduler.search import (
    UNKNOWN,
    FreeIndex,
    first_feasible,
    first_free_card,
    first_on_a_node,
    first_spread,
)


@dataclass(frozen=True)
class CardSlot:
    """A card as the planner sees it."""

    card_id: int
    node_id: int
    domain: int
    # None: the node takes any lease; else no lease may end after this (draining node).
    usable_until: datetime | None = None


@dataclass
class Timeline:
    """Busy periods per card, kept sorted by start; periods are half-open [start, end)."""

    busy: dict[int, list[tuple[datetime, datetime]]] = field(
        default_factory=lambda: defaultdict(list)
    )
    # Per card, the longest gap between two of its busy periods, found when first needed
    # (``first_free_card``: a card with no gap as long as the request is free only after its
    # last period, no walk over its periods). ``add`` and ``remove`` keep it where a period
    # after the last one comes or goes, ``prune`` forgets it where periods went. A gap kept
    # is never shorter than the truth (a longer one only makes the search walk).
    gaps: dict[int, timedelta] = field(default_factory=dict, compare=False, repr=False)
    # ``first_free_card``'s index over the cards of the plan that uses this timeline
    # (``watch``); every change of a card's periods marks it dirty there.
    index: FreeIndex | None = field(default=None, compare=False, repr=False)
    # No card's first period ends before this (None: not known): ``prune`` before it has
    # nothing to forget and walks no card. ``add`` and ``remove`` lower it where they must.
    ends_from: datetime | None = field(default=None, compare=False, repr=False)

    def watch(self, cards: Sequence[CardSlot]) -> None:
        """Keep ``first_free_card``'s index over *cards* (the list a plan searches)."""
        if self.index is None or self.index.cards is not cards:
            self.index = FreeIndex(cards)

    def add(self, card_id: int, start: datetime, end: datetime) -> None:
        periods = self.busy[card_id]
        if self.index is not None:
            self.index.dirty.add(card_id)
        if self.ends_from is not None and end < self.ends_from:
            self.ends_from = end
        gap = self.gaps.pop(card_id, None)
        if periods and periods[-1] <= (start, end):
            # after the card's last period (most reservations): the longest gap, when known,
            # is only joined by the one before this period (``search.longest_gap``)
            if gap is not None and end > start and periods[-1][1] <= start:
                self.gaps[card_id] = max(gap, start - periods[-1][1])
            periods.append((start, end))
        else:
            bisect.insort(periods, (start, end))

    def remove(self, card_id: int, start: datetime, end: datetime) -> None:
        """Take back a period added with ``add`` (a reservation being re-planned)."""
        periods = self.busy[card_id]
        i = bisect.bisect_left(periods, (start, end))
        if i == len(periods) or periods[i] != (start, end):
            raise KeyError((card_id, start, end))
        if self.index is not None:
            self.index.dirty.add(card_id)
        gap = self.gaps.pop(card_id, None)
        if gap is not None and 0 < i == len(periods) - 1 and start - periods[i - 1][1] < gap:
            # its last period, not behind the longest gap: what is kept still bounds the truth
            self.gaps[card_id] = gap
        del periods[i]
        if i == 0 and periods and self.ends_from is not None and periods[0][1] < self.ends_from:
            self.ends_from = periods[0][1]

    def prune(self, now: datetime) -> None:
        """Forget the periods that ended by *now*: they can no longer be in anyone's way."""
        if self.ends_from is not None and now < self.ends_from:
            return  # no first period has ended
        gaps = self.gaps
        ends_from = None
        for card_id, periods in self.busy.items():
            n = 0
            while n < len(periods) and periods[n][1] <= now:
                n += 1
            if n:
                del periods[:n]
                if self.index is not None:
                    self.index.dirty.add(card_id)
                if card_id in gaps:
                    del gaps[card_id]  # its gaps may have gone with them: found again
            if periods and (ends_from is None or periods[0][1] < ends_from):
                ends_from = periods[0][1]
        self.ends_from = ends_from

    def is_free(self, card_id: int, start: datetime, end: datetime) -> bool:
        periods = self.busy.get(card_id)
        if not periods:
            return True
        # The last period starting before `end` is the only one that can overlap
        # unless an earlier, longer one does — periods on one card never overlap,
        # so checking the neighbour is enough.
        i = bisect.bisect_left(periods, (end, end))
        if i > 0 and periods[i - 1][1] > start:
            return False
        return True

    def ends_after(self, card_ids: Iterable[int], t: datetime) -> list[datetime]:
        """Every end of a busy period after *t*: the only moments a wait can end."""
        busy = self.busy
        out: set[datetime] = set()
        for card_id in card_ids:
            for _start, end in busy.get(card_id, ()):
                if end > t:
                    out.add(end)
        return sorted(out)


@dataclass(frozen=True)
class Request:
    """A lease waiting to be placed."""

    lease_id: int
    count: int
    duration: timedelta
    not_before: datetime
    same_node: bool = True
    # The nodes the lease may use (its region, network, stack version); None: any node.
    nodes: frozenset[int] | None = None

    def not_before_at(self, t: datetime) -> Request:
        """The same request, not before *t* (``dataclasses.replace``, without its
        introspection: a long queue's re-plans ask this hundreds of thousands of times)."""
        return Request(self.lease_id, self.count, self.duration, t, self.same_node, self.nodes)


def cards_for(cards: Sequence[CardSlot], request: Request) -> Sequence[CardSlot]:
    """The cards *request* may be placed on: all, or those on its nodes."""
    if request.nodes is None:
        return cards
    nodes = request.nodes
    return [card for card in cards if card.node_id in nodes]


@dataclass(frozen=True)
class Decision:
    lease_id: int
    start: datetime | None  # None: can never fit in the current pool
    card_ids: tuple[int, ...] = ()


def place(
    cards: Sequence[CardSlot],
    timeline: Timeline,
    count: int,
    start: datetime,
    end: datetime,
    *,
    same_node: bool,
) -> list[int] | None:
    """Choose *count* cards free over [start, end), or None if they cannot be found."""
    if count == 1:
        return _place_one(cards, timeline.busy, start, end)
    return _place_many(cards, timeline, count, start, end, same_node=same_node)


def _place_many(
    cards: Sequence[CardSlot],
    timeline: Timeline,
    count: int,
    start: datetime,
    end: datetime,
    *,
    same_node: bool,
) -> list[int] | None:
    """``place`` for any count (one card too: tests/leasing/test_queueplan.py holds
    ``_place_one`` to it)."""
    by_node: dict[int, dict[int, list[int]]] = defaultdict(lambda: defaultdict(list))
    busy = timeline.busy
    bisect_left = bisect.bisect_left
    probe = (end, end)
    for card in cards:
        if card.usable_until is not None and end > card.usable_until:
            continue
        # Timeline.is_free, inlined: this loop runs over every card for every try
        periods = busy.get(card.card_id)
        if periods:
            i = bisect_left(periods, probe)
            if i > 0 and periods[i - 1][1] > start:
                continue
        by_node[card.node_id][card.domain].append(card.card_id)
    if not by_node:
        return None
    node_free = {
        node: sum(len(ids) for ids in domains.values()) for node, domains in by_node.items()
    }

    # 1. One node, one interconnect domain: best fit on the node, then on the domain.
    best: tuple[int, int, int, int] | None = None
    for node, domains in by_node.items():
        for domain, ids in domains.items():
            if len(ids) >= count:
                key = (node_free[node], len(ids), node, domain)
                if best is None or key < best:
                    best = key
    if best is not None:
        return by_node[best[2]][best[3]][:count]

    # 2. One node across its domains: the tightest node; fewest domains used.
    fitting = [node for node, free in node_free.items() if free >= count]
    if fitting:
        node = min(fitting, key=lambda n: (node_free[n], n))
        chosen: list[int] = []
        for ids in sorted(by_node[node].values(), key=len, reverse=True):
            chosen.extend(ids[: count - len(chosen)])
            if len(chosen) == count:
                return chosen
    if same_node:
        return None

    # 3. Across nodes, when the request allows it: fewest nodes (largest first).
    if sum(node_free.values()) < count:
        return None
    chosen = []
    for node in sorted(by_node, key=lambda n: (-node_free[n], n)):
        for ids in sorted(by_node[node].values(), key=len, reverse=True):
            chosen.extend(ids[: count - len(chosen)])
            if len(chosen) == count:
                return chosen
    return None


def _place_one(cards: Sequence[CardSlot], busy, start: datetime, end: datetime):
    """``place`` for one card (its first step, the only one one card needs): the first free
    card of the best-fitting node and domain, ranked as there. A leaner loop: most requests
    in a long queue are for one card, and this runs over every card for each."""
    bisect_left = bisect.bisect_left
    probe = (end, end)
    node_free: dict[int, int] = {}
    in_domain: dict[tuple[int, int], list[int]] = {}  # (node, domain) -> [free, first card]
    for card in cards:
        if card.usable_until is not None and end > card.usable_until:
            continue
        periods = busy.get(card.card_id)
        if periods:
            i = bisect_left(periods, probe)
            if i > 0 and periods[i - 1][1] > start:
                continue
        node = card.node_id
        node_free[node] = node_free.get(node, 0) + 1
        found = in_domain.get((node, card.domain))
        if found is None:
            in_domain[node, card.domain] = [1, card.card_id]
        else:
            found[0] += 1
    if not in_domain:
        return None
    best = min(in_domain, key=lambda nd: (node_free[nd[0]], in_domain[nd][0], nd[0], nd[1]))
    return [in_domain[best][1]]


def earliest(
    cards: Sequence[CardSlot],
    timeline: Timeline,
    request: Request,
    *,
    horizon: datetime | None = None,
) -> Decision:
    """The earliest start at or after ``request.not_before`` where the request fits.

    The candidates are ``not_before`` and every end of a busy period after it. Trying
    ``place`` at each one costs a pass over every card per candidate, which is what made a
    long queue slow (bench/trace_replay.py). So: for one card or one node, find the first
    moment that fits without listing the candidates (``first_free_card``,
    ``first_on_a_node``); across nodes, with one sweep over the free windows of every card
    (``first_spread``); else try ``not_before`` first (the common case), and otherwise
    find the first candidate where ``place`` can succeed with one sweep over the free
    windows of every card (see ``first_feasible``); then let ``place`` choose the cards
    there. Same answer, in one pass instead of one per candidate.
    """
    t0 = request.not_before
    valid = request.count > 0 and request.duration > timedelta(0)
    # One card, or one node: the first moment that fits (``not_before`` when it fits then)
    # found without a pass over every card per try; then ``place`` chooses there.
    searched = request.count == 1 or (request.same_node and horizon is None)
    spread = not request.same_node and horizon is None  # across nodes: one sweep
    if valid:
        if horizon is not None and t0 > horizon:
            return Decision(request.lease_id, None)
        if request.count == 1:
            # One card: the earliest moment any single card is free (no sweep, no list of
            # every end; tests/leasing/test_queueplan.py holds it to the general way).
            t, among = first_free_card(cards, timeline, t0, request.duration)
            if t is not UNKNOWN:
                if t is None or (horizon is not None and t > horizon):
                    return Decision(request.lease_id, None)
                # chosen among the cards that can be free then, as among all of them
                chosen = _place_one(among or cards, timeline.busy, t, t + request.duration)
                if chosen is not None:
                    return Decision(request.lease_id, t, tuple(chosen))
        elif spread or searched:
            # On one node: the earliest moment some node has enough cards free, node by node
            # from the likeliest. Across nodes: ``place`` succeeds exactly where enough cards
            # of the pool are free (its last step), so one sweep over the cards' free windows
            # finds the moment. Neither lists every end in the pool
            # (tests/leasing/test_queueplan.py holds both to the general way).
            t = (first_on_a_node if searched else first_spread)(cards, timeline, request)
            if t is None:
                return Decision(request.lease_id, None)
            if t is not UNKNOWN:
                chosen = place(cards, timeline, request.count, t, t + request.duration,
                               same_node=request.same_node)  # fmt: skip
                if chosen is not None:
                    return Decision(request.lease_id, t, tuple(chosen))
        else:
            # Fits when it asks to start (the common case): no need to list the candidates.
            chosen = place(
                cards, timeline, request.count, t0, t0 + request.duration,
                same_node=request.same_node,
            )  # fmt: skip
            if chosen is not None:
                return Decision(request.lease_id, t0, tuple(chosen))
    card_ids = [c.card_id for c in cards]
    candidates = [t0, *timeline.ends_after(card_ids, t0)]
    first = 0
    if valid:
        if len(candidates) == 1 and not searched and not spread:
            return Decision(request.lease_id, None)  # tried at t0 above; nothing frees up
        first = first_feasible(cards, timeline, request, candidates)
        if first is None:
            return Decision(request.lease_id, None)
    for t in candidates[first:]:
        if horizon is not None and t > horizon:
            break
        chosen = place(
            cards, timeline, request.count, t, t + request.duration, same_node=request.same_node
        )
        if chosen is not None:
            return Decision(request.lease_id, t, tuple(chosen))
    return Decision(request.lease_id, None)


def never_fits_because(in_service: dict[int, int], request: Request, unhealthy: int = 0) -> str:
    """Why *request* can never be placed (``earliest`` gave it no start), as a
    ``choices.StallReason`` value. *in_service* counts the model's cards in service per node,
    usable or not (faulty, draining, in maintenance): the planner saw only the usable ones.
    A request with node requirements (``request.nodes``) counts only the cards there.
    *unhealthy* counts those kept out only by their readings (hot, node silent): they come
    back on their own, so that is said first."""
    if request.nodes is not None:
        there = {n: c for n, c in in_service.items() if n in request.nodes}
        if sum(there.values()) < request.count <= sum(in_service.values()):
            return "requirements"
        in_service = there
    if sum(in_service.values()) < request.count:
        return "too_few_cards"
    if request.same_node and max(in_service.values(), default=0) < request.count:
        return "no_node_big_enough"
    if unhealthy:
        return "unhealthy"
    return "out_of_service"


def plan_queue(
    cards: Sequence[CardSlot], timeline: Timeline, queue: Sequence[Request]
) -> list[Decision]:
    """Conservative backfill over *queue* (already in service order).

    Each decision's cards are added to *timeline* as a reservation, so later
    requests are planned around everyone ahead of them.
    """
    decisions = []
    for request in queue:
        decision = earliest(cards_for(cards, request), timeline, request)
        if decision.start is not None:
            for card_id in decision.card_ids:
                timeline.add(card_id, decision.start, decision.start + request.duration)
        decisions.append(decision)
    return decisions
