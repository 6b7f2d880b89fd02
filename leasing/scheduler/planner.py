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

    def add(self, card_id: int, start: datetime, end: datetime) -> None:
        bisect.insort(self.busy[card_id], (start, end))

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
        out: set[datetime] = set()
        for card_id in card_ids:
            for _start, end in self.busy.get(card_id, ()):
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
    by_node: dict[int, dict[int, list[int]]] = defaultdict(lambda: defaultdict(list))
    for card in cards:
        if card.usable_until is not None and end > card.usable_until:
            continue
        if timeline.is_free(card.card_id, start, end):
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


def earliest(
    cards: Sequence[CardSlot],
    timeline: Timeline,
    request: Request,
    *,
    horizon: datetime | None = None,
) -> Decision:
    """The earliest start at or after ``request.not_before`` where the request fits."""
    card_ids = [c.card_id for c in cards]
    candidates = [request.not_before, *timeline.ends_after(card_ids, request.not_before)]
    for t in candidates:
        if horizon is not None and t > horizon:
            break
        chosen = place(
            cards, timeline, request.count, t, t + request.duration, same_node=request.same_node
        )
        if chosen is not None:
            return Decision(request.lease_id, t, tuple(chosen))
    return Decision(request.lease_id, None)


def plan_queue(
    cards: Sequence[CardSlot], timeline: Timeline, queue: Sequence[Request]
) -> list[Decision]:
    """Conservative backfill over *queue* (already in service order).

    Each decision's cards are added to *timeline* as a reservation, so later
    requests are planned around everyone ahead of them.
    """
    decisions = []
    for request in queue:
        decision = earliest(cards, timeline, request)
        if decision.start is not None:
            for card_id in decision.card_ids:
                timeline.add(card_id, decision.start, decision.start + request.duration)
        decisions.append(decision)
    return decisions
