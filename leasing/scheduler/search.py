"""The searches behind ``planner.earliest``: the first moment a request fits, found without
trying ``planner.place`` at every candidate (``not_before`` and every end of a busy period after
it), which cost a pass over every card per candidate and made long queues slow.

* ``first_free_card``: one card (and the few cards that can be chosen then);
* ``first_on_a_node``: a request that must stay on one node;
* ``first_spread``: a request that may spread across nodes (one sweep over the cards' free
  windows);
* ``first_feasible``: the general case (a horizon): the first candidate where ``place`` can
  succeed.

Each answers exactly what trying every candidate answers (tests/leasing/test_queueplan.py), or
``UNKNOWN`` where a period of zero or negative length makes the shortcut unsafe (then
``earliest`` tries every candidate). Pure Python over the planner's card slots, timeline and
request (``planner.CardSlot``, ``Timeline``, ``Request``), which it does not import: the planner
imports it.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Sequence
from datetime import datetime, timedelta

UNKNOWN = object()


def in_the_way(card_id: int, periods, gaps: dict, t0: datetime, d: timedelta):
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


class FreeIndex:
    """``first_free_card``'s index over one list of cards (``Timeline.watch``), for the pool
    where nothing is free: most cards are then busy in one unbroken stretch (no gap between
    their periods, no end of use), and such a card is free over ``[t0, t0 + d)`` exactly when
    its stretch begins no earlier than ``t0 + d`` or ends by ``t0``, else first from its end.
    Those cards are kept sorted by where the stretch begins and where it ends; the others
    (gaps, an end of use) are looked at one by one as before. The timeline marks a card
    *dirty* when its periods change; it is placed again at the next search (``settle``)."""

    def __init__(self, cards: Sequence):
        self.cards = cards
        self.pos = {card.card_id: n for n, card in enumerate(cards)}
        self.dirty: set[int] = set(self.pos)  # card ids to place again
        self.stretch: dict[int, tuple[datetime, datetime]] = {}  # position -> (begins, ends)
        self.by_begin: list[tuple[datetime, int]] = []  # sorted (begins, position)
        self.by_end: list[tuple[datetime, int]] = []  # sorted (ends, position)
        self.empty: set[int] = set()  # positions with no busy time and no end of use
        self.odd: set[int] = set()  # positions looked at one by one

    def settle(self, busy: dict, gaps: dict) -> None:
        """Place every dirty card again, from its periods now."""
        pos = self.pos
        for card_id in self.dirty:
            n = pos.get(card_id)
            if n is None:
                continue  # the timeline's, not one of these cards
            periods = busy.get(card_id)
            new = None  # its stretch, when it is one
            if self.cards[n].usable_until is None and periods:
                gap = gaps.get(card_id)
                if gap is None:
                    gap = gaps[card_id] = longest_gap(periods)
                if not gap:  # no gap between periods, none of no length (timedelta.max)
                    new = (periods[0][0], periods[-1][1])
            old = self.stretch.get(n)
            if new is not None and new == old:
                continue  # a period taken out and put back, or one inside the stretch
            if old is not None:
                del self.stretch[n]
                del self.by_begin[bisect.bisect_left(self.by_begin, (old[0], n))]
                del self.by_end[bisect.bisect_left(self.by_end, (old[1], n))]
            self.empty.discard(n)
            self.odd.discard(n)
            if new is not None:
                self.stretch[n] = new
                bisect.insort(self.by_begin, (new[0], n))
                bisect.insort(self.by_end, (new[1], n))
            elif self.cards[n].usable_until is None and not periods:
                self.empty.add(n)
            else:
                self.odd.add(n)
        self.dirty.clear()

    def idle(self, timeline, now: datetime) -> list[int]:
        """The positions, in order, of the cards on which no busy period has begun by *now*
        and whose end of use (if any) is after it (``HeadFirstPlan._idle_now``)."""
        self.settle(timeline.busy, timeline.gaps)
        busy, cards = timeline.busy, self.cards
        by_begin = self.by_begin
        out = [n for _b, n in by_begin[bisect.bisect_right(by_begin, (now, len(cards))) :]]
        out += self.empty
        for n in self.odd:
            periods = busy.get(cards[n].card_id)
            limit = cards[n].usable_until
            if (not periods or periods[0][0] > now) and (limit is None or limit > now):
                out.append(n)
        out.sort()
        return out

    def first_free(self, timeline, t0: datetime, d: timedelta):
        """``first_free_card`` over the indexed cards: the one-stretch cards from the two
        sorted lists, the others by ``_scan``."""
        self.settle(timeline.busy, timeline.gaps)
        if self.empty:
            return t0, None
        by_end = self.by_end
        best, at_best = None, []
        if by_end:
            if by_end[0][0] <= t0 or self.by_begin[-1][0] >= t0 + d:
                return t0, None  # a stretch over before t0, or one that begins after
            best = by_end[0][0]  # the others are busy until their ends
            for ends, n in by_end:
                if ends != best:
                    break
                at_best.append(n)
        if not self.odd:
            if best is None:
                return None, None  # no cards
            return best, [self.cards[n] for n in sorted(at_best)]
        cards = self.cards
        return _scan([(n, cards[n]) for n in self.odd], timeline, t0, d, best, at_best, cards)


def first_free_card(cards: Sequence, timeline, t0: datetime, d: timedelta):
    """``(t, among)``: the earliest *t* >= *t0* where some card is free over ``[t, t + d)``,
    and the cards, in their order, among which every card free then is (None: all of them;
    ``place`` chooses among them as among all, as the others are busy then). ``(None, None)``
    if no card ever is free, or ``(UNKNOWN, None)`` when a period of zero or negative length
    makes the shortcut unsafe. A card's free windows begin at *t0* or at one of its own ends,
    so the first candidate where any card is free is the smallest such moment over the cards.

    Two rounds: first the cards whose answer needs no walk over their periods (free at *t0*,
    or no gap between their periods as long as *d*: free from their last end, and then only
    from it), then a walk over the others' periods, each stopped at the best found so far.
    Those walked may be free at the answer: they are among the cards returned.

    When the timeline keeps a ``FreeIndex`` over these very *cards*, it answers (the same)."""
    index = timeline.index
    if index is not None and index.cards is cards and d > timedelta(0):
        return index.first_free(timeline, t0, d)
    return _scan(enumerate(cards), timeline, t0, d, None, [], cards)


def _scan(items, timeline, t0: datetime, d: timedelta, best, at_best: list[int], cards):
    """``first_free_card`` over *items* (``(position, card)``), from the *best* moment found
    so far and the positions *at_best* free from it."""
    busy = timeline.busy
    gaps = timeline.gaps
    walks = []
    end0 = t0 + d
    probe = (t0, t0)
    bisect_right = bisect.bisect_right
    for n, card in items:
        card_id = card.card_id
        periods = busy.get(card_id)
        t = t0
        # ``in_the_way`` inlined, its search left for the cards that need it: this loop runs
        # over every card for every one-card request planned
        if periods and periods[0][0] < end0 and periods[-1][1] > t0:
            gap = gaps.get(card_id)
            if gap is None:
                gap = gaps[card_id] = longest_gap(periods)
            if gap == timedelta.max:
                return UNKNOWN, None  # a period of no length
            if gap < d:
                # no gap between its periods fits the request, and a period begins before
                # the request would end and ends after it would begin: busy until its last end
                t = periods[-1][1]
            else:  # ``in_the_way`` inlined: the first period running at t0 or after it
                j = bisect_right(periods, probe)
                if j > 0 and periods[j - 1][1] > t0:
                    j -= 1
                if j < len(periods) and periods[j][0] < end0:
                    walks.append((n, card, periods, j))
                    continue
        limit = card.usable_until
        if limit is not None and t + d > limit:
            continue
        if best is None or t < best:
            if t == t0:
                return t0, None  # free from the first moment asked: nothing is earlier
            best = t
            at_best = [n]
        elif t == best:
            at_best.append(n)
    best = _walk(walks, t0, d, best)
    if best is None:
        return None, None
    among = sorted(at_best + [w[0] for w in walks])
    return best, [cards[n] for n in among]


def _walk(walks: list, t0: datetime, d: timedelta, best: datetime | None):
    """``first_free_card``'s second round: the first moment each walked card is free over
    ``[t, t + d)``, its walk stopped at the *best* found so far; the earliest of them and
    *best*."""
    for _n, card, periods, j in walks:
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


def first_spread(cards: Sequence, timeline, request):
    """The earliest *t* >= ``not_before`` where ``count`` cards of the pool are free over
    ``[t, t + duration)`` (where ``place`` succeeds for a request that may spread), None if
    never, or ``UNKNOWN`` when a period of zero or negative length makes it unsafe.

    A card is free at *t* inside its closed windows (``first_feasible`` says which); the
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
                return UNKNOWN
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


def first_on_a_node(cards: Sequence, timeline, request):
    """The earliest *t* >= ``not_before`` where one node has ``count`` cards free over
    ``[t, t + duration)`` (where ``place`` succeeds for a one-node request), None if never,
    or ``UNKNOWN`` when a period of zero or negative length makes it unsafe.

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
        if periods and (way := in_the_way(card.card_id, periods, gaps, t0, d)) is not None:
            j, gap = way
            if gap == timedelta.max:
                return UNKNOWN  # a period of no length
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
                    return UNKNOWN
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
    far); ``timedelta.max`` when a period has no length (then ``first_free_card`` walks)."""
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


def first_feasible(
    cards: Sequence,
    timeline,
    request,
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
