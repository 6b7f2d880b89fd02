"""One picture of a card model's future, read from the queue's plan: for each card, what
keeps it busy over a stretch of time: a lease holding it (until its effective end), a
reservation, a waiting lease the plan has put on it (from its estimated start for its
duration), maintenance or a drain, unhealthy readings.

The pool timeline (Gantt), the availability calendar, the free counts ("free now", "next
free"), the model page and the timeline API all read this one picture (invariant 11), so a
stretch shown free is free in the plan the scheduler carries out: a request that joins the
queue is planned after the leases ahead of it only, each of which is in the picture, so a
reservation asked for a free stretch starts where it was shown
(tests/leasing/test_picture.py holds that on random pools and queues).

Waiting leases behind a stale stretch of the stored plan (``QueueMark``: planned around
before someone joined ahead of them), and a lease whose off-peak policy just moved its start
(planned again from there by the next pass), are not on any card: they are listed as
``re_estimating`` for the model as a whole. Queues with guaranteed shares or off-peak
policies are planned whole on every pass and their cards stored like any other's. The
refresh plans a stale stretch right after the commit that left it and on every queue tick
(``refresh.queue_refresh``), and the tick plans a queue with shares or off-peak policies
whole every time, so a lease stays re-estimated for at most about one tick
(``re_estimated_within``; tests/leasing/test_picture_whole.py).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import DateTimeField, IntegerField, OuterRef, Subquery, Sum

from inventory.models import Card, Node
from leasing.choices import LeaseStatus
from leasing.models import Allocation, Lease
from leasing.scheduler.joining import mark_of
from leasing.scheduler.snapshot import waiting_for

HELD = "held"
RESERVED = "reserved"
PLANNED = "planned"
MAINTENANCE = "maintenance"
UNHEALTHY = "unhealthy"
KINDS = (HELD, RESERVED, PLANNED, MAINTENANCE, UNHEALTHY)


def re_estimated_within() -> timedelta:
    """How long a waiting lease is shown "planned, being re-estimated" at most: the refresh
    runs right after the commit that left a stale stretch, and every tick
    (``CARDPOOL["TICK_SECONDS"]``) plans what is left (``TICK_REFRESH_SLICES`` slices)."""
    return timedelta(seconds=settings.CARDPOOL["TICK_SECONDS"])


@dataclass(frozen=True)
class Booking:
    """What keeps a card busy over [start, end); *lease_id* the lease behind it, if any."""

    kind: str
    start: datetime
    end: datetime
    lease_id: int | None = None


@dataclass(frozen=True)
class PictureCard:
    card_id: int
    node_id: int
    hostname: str
    index: int
    domain: int


@dataclass(frozen=True)
class ReEstimating:
    """A waiting lease whose cards the plan does not hold yet (see the module)."""

    lease_id: int
    count: int
    estimated_start: datetime | None
    duration: timedelta


@dataclass
class Picture:
    card_model_id: int
    start: datetime
    end: datetime
    cards: list[PictureCard]
    bookings: dict[int, list[Booking]] = field(default_factory=dict)
    re_estimating: list[ReEstimating] = field(default_factory=list)

    def busy(self, card_id: int, start: datetime, end: datetime) -> list[Booking]:
        """The bookings of the card that overlap [start, end)."""
        return [b for b in self.bookings.get(card_id, ()) if b.start < end and start < b.end]

    def is_free(self, card_id: int, start: datetime, end: datetime) -> bool:
        return not self.busy(card_id, start, end)

    def free_count(self, start: datetime, end: datetime) -> int:
        """How many cards are free over the whole of [start, end)."""
        return sum(1 for c in self.cards if self.is_free(c.card_id, start, end))

    def free_stretches(self, card_id: int) -> list[tuple[datetime, datetime]]:
        """The card's free stretches inside the picture's window, in time order."""
        out = []
        t = self.start
        for b in sorted(self.bookings.get(card_id, ()), key=lambda b: b.start):
            if b.start > t:
                out.append((t, b.start))
            t = max(t, b.end)
        if t < self.end:
            out.append((t, self.end))
        return out

    def next_free(self, count: int, duration: timedelta, *, after: datetime) -> datetime | None:
        """The first moment from *after* at which *count* cards are free for *duration*
        (inside the window), or None. Candidates: *after* and every booking's end."""
        ends = sorted({b.end for bs in self.bookings.values() for b in bs if b.end > after})
        for t in [after, *ends]:
            if t + duration > self.end:
                break
            if self.free_count(t, t + duration) >= count:
                return t
        return None

    def kinds_at(self, start: datetime, end: datetime) -> dict[str, int]:
        """How many cards each kind keeps busy at some moment of [start, end) (a card counts
        under the first kind found, in ``KINDS`` order)."""
        out: dict[str, int] = {}
        for c in self.cards:
            kinds = {b.kind for b in self.busy(c.card_id, start, end)}
            for kind in KINDS:
                if kind in kinds:
                    out[kind] = out.get(kind, 0) + 1
                    break
        return out


def model_picture(
    card_model_id: int,
    *,
    start: datetime,
    end: datetime,
    now: datetime,
    hostnames: list[str] | None = None,
) -> Picture:
    """The picture of one model's cards in service over [start, end) (see the module); with
    *hostnames*, of those nodes' cards only (the timeline's page). Five queries."""
    rows = Card.objects.in_service().filter(card_model_id=card_model_id)
    if hostnames is not None:
        rows = rows.filter(node__hostname__in=hostnames)
    rows = rows.values_list(
        "pk", "node_id", "node__hostname", "index", "interconnect_domain",
        "status", "health", "node__status", "node__drain_at",
    ).order_by("node__hostname", "index")  # fmt: skip
    cards: list[PictureCard] = []
    bookings: dict[int, list[Booking]] = defaultdict(list)
    for pk, node_id, hostname, index, domain, status, health, node_status, drain_at in rows:
        cards.append(PictureCard(pk, node_id, hostname, index, domain))
        if status != Card.Status.OK or node_status in (
            Node.Status.MAINTENANCE,
            Node.Status.OFFLINE,
        ):
            bookings[pk].append(Booking(MAINTENANCE, start, end))
        elif health != Card.Health.OK:
            bookings[pk].append(Booking(UNHEALTHY, start, end))
        elif node_status == Node.Status.DRAINING:
            since = start if drain_at is None else max(start, drain_at)
            if since < end:
                bookings[pk].append(Booking(MAINTENANCE, since, end))
    ids = {c.card_id for c in cards}
    for card_id, lease_id in (
        Allocation.objects.held_back().filter(card_id__in=ids).values_list("card_id", "lease_id")
    ):
        bookings[card_id].append(Booking(HELD, start, end, lease_id))
    allocations = Allocation.objects.filter(
        card_id__in=ids, end_at__gt=start, start_at__lt=end
    ).values_list(
        "card_id", "start_at", "end_at", "lease_id", "lease__status",
        "lease__preempt_at", "lease__preempt_cards",
    )  # fmt: skip
    for card_id, a_start, a_end, lease_id, status, preempt_at, preempt_cards in allocations:
        # a lease marked for preemption holds its cards until its grace ends (as the
        # planner's snapshot reads it); a partial one already cut the periods it takes back
        if preempt_at is not None and preempt_cards is None:
            a_end = min(a_end, max(preempt_at, now))
        a_start, a_end = max(a_start, start), min(a_end, end)
        if a_end > a_start:
            kind = RESERVED if status == LeaseStatus.SCHEDULED else HELD
            bookings[card_id].append(Booking(kind, a_start, a_end, lease_id))
    picture = Picture(card_model_id, start, end, cards)
    mark = mark_of(card_model_id)
    for w in waiting_for(card_model_id, now=now):
        eta = w.estimated_start
        if eta is None:
            continue  # can never start as asked: nothing planned (its stall reason says why)
        if (mark is not None and w.key > mark) or not w.planned_cards:
            picture.re_estimating.append(
                ReEstimating(w.request.lease_id, w.request.count, eta, w.request.duration)
            )
            continue
        p_start, p_end = max(eta, start), min(eta + w.request.duration, end)
        if p_end <= p_start:
            continue
        for card_id in w.planned_cards:
            if card_id in ids:
                bookings[card_id].append(Booking(PLANNED, p_start, p_end, w.request.lease_id))
    for card_bookings in bookings.values():
        card_bookings.sort(key=lambda b: (b.start, b.end))
    picture.bookings = dict(bookings)
    return picture


@dataclass(frozen=True)
class PlannedSummary:
    """What the queue's plan holds of a model's cards for waiting leases: how many card
    bookings, and the earliest planned start."""

    cards: int
    first: datetime


def planned_annotations() -> dict:
    """``planned_cards`` (how many card bookings the queue's plan holds for waiting leases)
    and ``planned_first`` (the earliest planned start) for a query of card models, in the
    same statement (the dashboard's tiles, the model page)."""
    planned = Lease.objects.filter(
        card_model=OuterRef("pk"),
        status=LeaseStatus.QUEUED,
        planned_cards__isnull=False,
        estimated_start__isnull=False,
    ).order_by()
    return {
        "planned_cards": Subquery(
            planned.values("card_model").annotate(n=Sum("count")).values("n")[:1],
            output_field=IntegerField(),
        ),
        "planned_first": Subquery(
            planned.order_by("estimated_start").values("estimated_start")[:1],
            output_field=DateTimeField(),
        ),
    }
