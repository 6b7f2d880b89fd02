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
    # (``_first_free_card``: a card with no gap as long as the request is free only after its
    # last period, no walk over its periods). ``add`` and ``remove`` forget it; ``prune``
    # only takes gaps away, so what it leaves is never shorter than the truth.
    gaps: dict[int, timedelta] = field(default_factory=dict, compare=False, repr=False)

    def add(self, card_id: int, start: datetime, end: datetime) -> None:
        bisect.insort(self.busy[card_id], (start, end))
        self.gaps.pop(card_id, None)

    def remove(self, card_id: int, start: datetime, end: datetime) -> None:
        """Take back a period added with ``add`` (a reservation being re-planned)."""
        periods = self.busy[card_id]
        i = bisect.bisect_left(periods, (start, end))
        if i == len(periods) or periods[i] != (start, end):
            raise KeyError((card_id, start, end))
        del periods[i]
        self.gaps.pop(card_id, None)

    def prune(self, now: datetime) -> None:
        """Forget the periods that ended by *now*: they can no longer be in anyone's way."""
        for periods in self.busy.values():
            n = 0
            while n < len(periods) and periods[n][1] <= now:
                n += 1
            if n:
                del periods[:n]

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
    moment that fits without listing the candidates (``_first_free_card``,
    ``_first_on_a_node``); across nodes, with one sweep over the free windows of every card
    (``_first_spread``); else try ``not_before`` first (the common case), and otherwise
    find the first candidate where ``place`` can succeed with one sweep over the free
    windows of every card (see ``_first_feasible``); then let ``place`` choose the cards
    there. Same answer, in one pass instead of one per candidate.
    """
    t0 = request.not_before
    valid = request.count > 0 and request.duration > timedelta(0)
    # One card, or one node: the first moment that fits (``not_before`` when it fits then)
    # found without a pass over every card per try; then ``place`` chooses there.
    searched = request.count == 1 or (request.same_node and horizon is None)
    spread = not request.same_node and horizon is None  # the sweep below finds it
    if valid:
        if horizon is not None and t0 > horizon:
            return Decision(request.lease_id, None)
        if not searched:
            if not spread:
                # Fits when it asks to start (the common case): no list of the candidates.
                chosen = place(
                    cards, timeline, request.count, t0, t0 + request.duration,
                    same_node=request.same_node,
                )  # fmt: skip
                if chosen is not None:
                    return Decision(request.lease_id, t0, tuple(chosen))
        elif request.count == 1:
            # One card: the earliest moment any single card is free (no sweep, no list of
            # every end; tests/leasing/test_queueplan.py holds it to the general way).
            t = _first_free_card(cards, timeline, t0, request.duration)
            if t is not _UNKNOWN:
                if t is None or (horizon is not None and t > horizon):
                    return Decision(request.lease_id, None)
                chosen = place(cards, timeline, 1, t, t + request.duration, same_node=True)
                if chosen is not None:
                    return Decision(request.lease_id, t, tuple(chosen))
        else:
            # On one node: the earliest moment some node has enough cards free, node by
            # node from the likeliest, without listing every end in the pool
            # (tests/leasing/test_queueplan.py holds it to the general way).
            t = _first_on_a_node(cards, timeline, request)
            if t is None:
                return Decision(request.lease_id, None)
            if t is not _UNKNOWN:
                chosen = place(cards, timeline, request.count, t, t + request.duration,
                               same_node=True)  # fmt: skip
                if chosen is not None:
                    return Decision(request.lease_id, t, tuple(chosen))
    if valid and spread and request.count > 1:
        # Across nodes: ``place`` succeeds exactly where enough cards of the pool are free
        # (its last step), so one sweep over the cards' free windows finds the moment.
        t = _first_spread(cards, timeline, request)
        if t is None:
            return Decision(request.lease_id, None)
        if t is not _UNKNOWN:
            chosen = place(cards, timeline, request.count, t, t + request.duration,
                           same_node=False)  # fmt: skip
            if chosen is not None:
                return Decision(request.lease_id, t, tuple(chosen))
    card_ids = [c.card_id for c in cards]
    candidates = [t0, *timeline.ends_after(card_ids, t0)]
    first = 0
    if valid:
        if len(candidates) == 1 and not searched and not spread:
            return Decision(request.lease_id, None)  # tried above; nothing ever frees up
        first = _first_feasible(cards, timeline, request, candidates)
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


_UNKNOWN = object()


def _in_the_way(card_id: int, periods, gaps: dict, t0: datetime, d: timedelta):
    """When a period of the card's sorted *periods* overlaps ``[t0, t0 + d)``: the index of
    the first one still running at *t0* and the card's longest gap between periods (kept in
    *gaps*; ``timedelta.max`` for a period of no length). None when the card is free then."""
    j = bisect.bisect_right(periods, (t0, t0))  # ends are sorted like starts
    if j > 0 and periods[j - 1][1] > t0:
        j -= 1
    if j >= len(periods) or periods[j][0] >= t0 + d:
        return None
    gap = gaps.get(card_id)
    if gap is None:
        gap = gaps[card_id] = longest_gap(periods)
    return j, gap


def _first_free_card(cards: Sequence[CardSlot], timeline: Timeline, t0: datetime, d: timedelta):
    """The earliest *t* >= *t0* where some card is free over ``[t, t + d)``, None if none
    ever is, or ``_UNKNOWN`` when a period of zero or negative length makes the shortcut
    unsafe. A card's free windows begin at *t0* or at one of its own ends, so the first
    candidate where any card is free is the smallest such moment over the cards.

    Two rounds: first the cards whose answer needs no walk over their periods (free at *t0*,
    or no gap between their periods as long as *d*: free from their last end), then a walk
    over the others' periods, each stopped at the best found so far."""
    best: datetime | None = None
    busy = timeline.busy
    gaps = timeline.gaps
    walks = []
    end0 = t0 + d
    for card in cards:
        card_id = card.card_id
        periods = busy.get(card_id)
        t = t0
        # ``_in_the_way`` inlined, its search left for the cards that need it: this loop runs
        # over every card for every one-card request planned
        if periods and periods[0][0] < end0 and periods[-1][1] > t0:
            gap = gaps.get(card_id)
            if gap is None:
                gap = gaps[card_id] = longest_gap(periods)
            if gap == timedelta.max:
                return _UNKNOWN  # a period of no length
            if gap < d:
                # no gap between its periods fits the request, and a period begins before
                # the request would end and ends after it would begin: busy until its last end
                t = periods[-1][1]
            elif (way := _in_the_way(card_id, periods, gaps, t0, d)) is not None:
                walks.append((card, periods, way[0]))
                continue
        limit = card.usable_until
        if (best is None or t < best) and (limit is None or t + d <= limit):
            best = t
    for card, periods, j in walks:
        t = t0
        n = len(periods)
        while j < n:
            s, e = periods[j]
            if s >= t + d:
                break
            if e > t:
                t = e
                if best is not None and t >= best:
                    break
            j += 1
        if best is not None and t >= best:
            continue
        limit = card.usable_until
        if limit is not None and t + d > limit:
            continue
        best = t
    return best


def _first_spread(cards: Sequence[CardSlot], timeline: Timeline, request: Request):
    """The earliest *t* >= ``not_before`` where ``count`` cards of the pool are free over
    ``[t, t + duration)`` (where ``place`` succeeds for a request that may spread), None if
    never, or ``_UNKNOWN`` when a period of zero or negative length makes it unsafe.

    A card is free at *t* inside its closed windows (``_first_feasible`` says which); the
    windows, cut to start no earlier than ``not_before``, are swept in time order, a window
    opening before one closing at the same moment, until ``count`` are open at once."""
    t0, d, count = request.not_before, request.duration, request.count
    busy = timeline.busy
    events: list[tuple[datetime, int]] = []  # (moment, 0: a window opens, 1: one closes)
    open_now = 0  # cards free from t0 on for ever
    for card in cards:
        periods = busy.get(card.card_id)
        limit = None if card.usable_until is None else card.usable_until - d
        prev_end = None
        for s, e in periods or ():
            if e <= s:
                return _UNKNOWN
            b = s - d if limit is None or limit >= s - d else limit
            a = t0 if prev_end is None or prev_end < t0 else prev_end
            if a <= b:
                events.append((a, 0))
                events.append((b, 1))
            prev_end = e
        a = t0 if prev_end is None or prev_end < t0 else prev_end
        if limit is None:
            if a == t0:
                open_now += 1
            else:
                events.append((a, 0))
        elif a <= limit:
            events.append((a, 0))
            events.append((limit, 1))
    if open_now >= count:
        return t0
    events.sort()
    for t, closes in events:
        if closes:
            open_now -= 1
        else:
            open_now += 1
            if open_now >= count:
                return t
    return None


def _first_on_a_node(cards: Sequence[CardSlot], timeline: Timeline, request: Request):
    """The earliest *t* >= ``not_before`` where one node has ``count`` cards free over
    ``[t, t + duration)`` (where ``place`` succeeds for a one-node request), None if never,
    or ``_UNKNOWN`` when a period of zero or negative length makes it unsafe.

    Each card is free no earlier than a bound found without a walk (``not_before`` when free
    then, else the end of the period in the way, or its last end when no gap between its
    periods is long enough); a node no earlier than the ``count``-th smallest bound of its
    cards. Nodes are looked at from the smallest bound, each at its own cards' ends from its
    bound on (a card's free stretches begin at ``not_before`` or at one of its ends), and the
    look stops at the first node whose bound is not before the best found."""
    t0, d, count = request.not_before, request.duration, request.count
    busy = timeline.busy
    gaps = timeline.gaps
    nodes: dict[int, list] = defaultdict(list)  # node -> [(card, periods)]
    bounds: dict[int, list] = defaultdict(list)  # node -> its cards' bounds
    for card in cards:
        periods = busy.get(card.card_id)
        bound = t0
        if periods and (way := _in_the_way(card.card_id, periods, gaps, t0, d)) is not None:
            j, gap = way
            if gap == timedelta.max:
                return _UNKNOWN  # a period of no length
            bound = max(t0, periods[-1][1]) if gap < d else periods[j][1]
        if card.usable_until is not None and bound + d > card.usable_until:
            continue  # never free for that long before the card's end of use
        nodes[card.node_id].append((card, periods))
        bounds[card.node_id].append(bound)
    order = []
    for node, times in bounds.items():
        if len(times) >= count:
            times.sort()
            order.append((times[count - 1], node))
    order.sort()
    best = None
    for bound, node in order:
        if best is not None and bound >= best:
            break
        slots = nodes[node]
        times = {bound}
        for _card, periods in slots:
            for s, e in periods or ():
                if e <= s:
                    return _UNKNOWN
                if e > bound and (best is None or e < best):
                    times.add(e)
        for t in sorted(times):
            end = t + d
            probe = (end, end)
            free = 0
            for card, periods in slots:
                if card.usable_until is not None and end > card.usable_until:
                    continue
                if periods:
                    i = bisect.bisect_left(periods, probe)
                    if i > 0 and periods[i - 1][1] > t:
                        continue
                free += 1
            if free >= count:
                best = t
                break
    return best


def longest_gap(periods: list[tuple[datetime, datetime]]) -> timedelta:
    """The longest free gap between two of a card's busy periods (after the latest end so
    far); ``timedelta.max`` when a period has no length (then ``_first_free_card`` walks)."""
    longest = timedelta(0)
    last_end = periods[0][1]
    for s, e in periods:
        if e <= s:
            return timedelta.max
        if s - last_end > longest:
            longest = s - last_end
        if e > last_end:
            last_end = e
    return longest


def _first_feasible(
    cards: Sequence[CardSlot],
    timeline: Timeline,
    request: Request,
    candidates: list[datetime],
) -> int | None:
    """Index of the first candidate where ``place`` can succeed; None if there is none.

    ``place`` succeeds at *t* exactly when a node has *count* cards free over
    ``[t, t + duration)`` (steps 1 and 2), or, for a request that may spread, when the pool
    has (step 3). A card is free at *t* as ``Timeline.is_free`` decides it: with periods
    sorted by start, the last one starting before ``t + d`` must end by *t*. For periods of
    positive length that is a union of closed windows of *t*: ``(-inf, s0 - d]``,
    ``[e(k-1), s(k) - d]`` and ``[e(last), +inf)``, cut at ``usable_until - d``. Each window
    covers a run of candidates; one sweep over the candidates adds up free cards per node.
    Periods of zero or negative length fall back to 0 (the caller then tries every one).
    """
    d = request.duration
    count = request.count
    n = len(candidates)
    # delta[j]: changes of the per-node free count at candidate j
    delta: dict[int, list[tuple[int, int]]] = defaultdict(list)
    # cards free at every candidate (no period, no drain) start counted, with no events
    free_on: dict[int, int] = defaultdict(int)
    lo_index = bisect.bisect_left
    hi_index = bisect.bisect_right
    busy = timeline.busy

    for card in cards:
        node = card.node_id
        periods = busy.get(card.card_id)
        if not periods and card.usable_until is None:
            free_on[node] += 1
            continue
        limit = None if card.usable_until is None else card.usable_until - d
        # the windows (a, b) of this card, None for an open end
        windows: list[tuple[datetime | None, datetime | None]] = []
        prev_end: datetime | None = None
        for s, e in periods or ():
            if e <= s:
                return 0  # degenerate period: let the caller try every candidate
            b = s - d
            if limit is not None and limit < b:
                b = limit
            if prev_end is None or prev_end <= b:
                windows.append((prev_end, b))
            prev_end = e
        if limit is None:
            windows.append((prev_end, None))
        elif prev_end is None or prev_end <= limit:
            windows.append((prev_end, limit))
        for a, b in windows:
            lo = 0 if a is None else lo_index(candidates, a)
            hi = n if b is None else hi_index(candidates, b)
            if lo < hi:
                delta[lo].append((node, 1))
                if hi < n:
                    delta[hi].append((node, -1))

    total = sum(free_on.values())
    nodes_fitting = sum(1 for free in free_on.values() if free >= count)
    for j in range(n):
        for node, step in delta.get(j, ()):
            before = free_on[node]
            free_on[node] = before + step
            total += step
            if before < count <= before + step:
                nodes_fitting += 1
            elif before + step < count <= before:
                nodes_fitting -= 1
        if nodes_fitting > 0 or (not request.same_node and total >= count):
            return j
    return None


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
