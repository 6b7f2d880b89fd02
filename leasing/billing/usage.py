"""Usage records: what an ended lease held, minute by minute, at the price in force.

A lease's allocations are the truth of which card it held when. When the lease ends (or
fails) they are cut into pieces at day boundaries (site time zone; so at month boundaries
too) and at price changes,
summed per node, and written as ``UsageRecord`` rows, once (a unique constraint and an
existence check make a second run write nothing).

Rounding, chosen so that every total reconciles exactly:

- times are truncated to the whole minute (UTC) before anything is counted, so the pieces
  of an allocation add up to its minutes exactly, however it is split;
- ``price = (team price in force, else list price in force, else the card model's price)
  × discount`` (the preemptible discount, or 1), kept to 4 decimal places (half up);
- ``cost = round(card_minutes × price / 60, 2)`` half up, per record; reports and
  statements only ever add up ``cost``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal

from django.db import IntegrityError, transaction
from django.db.models import Exists, F, OuterRef, Q
from django.utils import timezone

from leasing.billing.prices import PriceBook, discount_for, record_cost
from leasing.choices import RECORDED_STATES
from leasing.models import Allocation, Lease, UsageRecord
from leasing.periods import floor_minute, month_of, site_tz

logger = logging.getLogger(__name__)

MINUTE = timedelta(minutes=1)
BATCH = 500


@dataclass
class _Piece:
    start: datetime
    end: datetime
    card_minutes: int = 0
    cards: set = field(default_factory=set)
    region_id: int = 0


def _windows(
    lo: datetime, hi: datetime, changes: list[datetime]
) -> list[tuple[datetime, datetime]]:
    """[lo, hi) cut at every day start (site time zone; so also every month start) and every
    price change inside it — a record never spans two days, so day and week reports are exact."""
    cuts = {lo, hi}
    day = lo.astimezone(site_tz()).replace(hour=0, minute=0, second=0, microsecond=0)
    while day < hi:
        if lo < day:
            cuts.add(day)
        day = (day + timedelta(days=1, hours=2)).replace(hour=0)  # safe across DST changes
    cuts.update(changes)
    ordered = sorted(cuts)
    return list(zip(ordered, ordered[1:], strict=False))


Held = tuple[int, int, int, datetime, datetime]  # card, node, region, start, end


def held(lease_id: int) -> list[Held]:
    """The lease's allocations as (card, node, region, start, end)."""
    return list(
        Allocation.objects.filter(lease_id=lease_id).values_list(
            "card_id", "card__node_id", "card__node__region_id", "start_at", "end_at"
        )
    )


def usage_pieces(
    lease: Lease,
    *,
    allocations: list[Held] | None = None,
    after: datetime | None = None,
    before: datetime | None = None,
    book: PriceBook | None = None,
    with_wait: bool | None = None,
) -> list[UsageRecord]:
    """The usage records (unsaved) of the lease's held time in [after, before) — all of it
    by default. *after* and *before* are whole minutes; the pieces are the same whatever the
    bounds (cut at day starts and price changes), so a month recorded at its close and the
    rest recorded at the end add up to the lease recorded in one go. The queue wait goes on
    the lease's first piece: on the first of these when nothing held before them (or when
    *with_wait* says so, for a caller that passes only some of the allocations)."""
    rows = held(lease.pk) if allocations is None else allocations
    allocations = []
    for card, node, region, start, end in rows:
        s, e = floor_minute(start), floor_minute(end)
        if after is not None:
            s = max(s, after)
        if before is not None:
            e = min(e, before)
        if e > s:
            allocations.append((card, node, region, s, e))
    if not allocations:
        return []
    lo = min(a[3] for a in allocations)
    hi = max(a[4] for a in allocations)
    if book is None:
        book = PriceBook.load(card_model=lease.card_model, team_id=lease.team_id, until=hi)
    discount = discount_for(lease.priority)
    records = []
    for w_start, w_end in _windows(lo, hi, book.changes(lo, hi)):
        by_node: dict[int, _Piece] = {}
        for card, node, region, start, end in allocations:
            s, e = max(start, w_start), min(end, w_end)
            if e <= s:
                continue
            piece = by_node.setdefault(node, _Piece(start=s, end=e, region_id=region))
            piece.start, piece.end = min(piece.start, s), max(piece.end, e)
            piece.card_minutes += (e - s) // MINUTE
            piece.cards.add(card)
        list_price = book.list_price_at(w_start)
        price = book.price_at(w_start, discount)
        tariff = book.tariff_at(w_start)
        for node, piece in sorted(by_node.items()):
            records.append(
                UsageRecord(
                    lease=lease,
                    user_id=lease.user_id,
                    team_id=lease.team_id,
                    department_id=lease.team.department_id,
                    card_model_id=lease.card_model_id,
                    vendor=lease.card_model.vendor,
                    node_id=node,
                    region_id=piece.region_id,
                    priority=lease.priority,
                    month=month_of(w_start)[0].date(),
                    start_at=piece.start,
                    end_at=piece.end,
                    cards=len(piece.cards),
                    minutes=(piece.end - piece.start) // MINUTE,
                    card_minutes=piece.card_minutes,
                    list_price=list_price,
                    discount=discount,
                    price=price,
                    cost=record_cost(piece.card_minutes, price),
                    off_peak=tariff is not None,
                    tariff=Decimal(1) if tariff is None else tariff,
                )
            )
    records.sort(key=lambda r: (r.start_at, r.node_id))
    if with_wait is None:
        with_wait = records[0].start_at == min(floor_minute(r[3]) for r in rows)
    if lease.activated_at and lease.submitted_at and with_wait:
        wait = (lease.activated_at - lease.submitted_at).total_seconds()
        records[0].wait_seconds = max(int(wait), 0)
    return records


def _write(lease: Lease, records: list[UsageRecord], *, until: datetime) -> int:
    """Write *records* and move the lease's bookmark from where it was to *until*, together;
    a writer that finds the bookmark moved (someone else recorded) writes nothing."""
    old = lease.usage_recorded_until
    try:
        with transaction.atomic():
            moved = (
                Lease.objects.filter(pk=lease.pk)
                .filter(
                    Q(usage_recorded_until__isnull=True)
                    if old is None
                    else Q(usage_recorded_until=old)
                )
                .update(usage_recorded_until=until)
            )
            if moved != 1:
                return 0
            UsageRecord.objects.bulk_create(records)
    except IntegrityError:
        return 0
    lease.usage_recorded_until = until
    return len(records)


def usage_record_lease(lease_id: int) -> int:
    """Write the usage records of an ended or failed lease; returns how many were written.

    Records what its bookmark does not cover yet (all of it, or what came after the last
    month close) and moves the bookmark past its last allocation. Safe to call twice or
    concurrently: the bookmark is moved by compare-and-set in the same transaction.
    """
    lease = (
        Lease.objects.select_related("team", "card_model")
        .filter(pk=lease_id, status__in=RECORDED_STATES)
        .first()
    )
    if lease is None:
        return 0
    allocations = held(lease.pk)
    after = lease.usage_recorded_until
    last = max((a[4] for a in allocations), default=None)
    if after is not None and (last is None or last <= after):
        return 0  # recorded already
    records = usage_pieces(lease, allocations=allocations, after=after)
    return _write(lease, records, until=last if last is not None else timezone.now())


def leases_to_close(month_start: datetime):
    """Leases still holding (or not yet recorded as ended) with held time before *month_start*
    that their bookmark does not cover: their part of the closed month is to be recorded."""
    before = Allocation.objects.filter(lease=OuterRef("pk"), start_at__lt=month_start)
    return (
        Lease.objects.exclude(status__in=RECORDED_STATES)
        .alias(
            has=Exists(before),
            has_after=Exists(before.filter(end_at__gt=OuterRef("usage_recorded_until"))),
        )
        .filter(
            Q(usage_recorded_until__isnull=True, has=True)
            | Q(usage_recorded_until__lt=month_start, has_after=True)
        )
    )


def usage_close_month(*, now: datetime | None = None, batch: int = BATCH) -> int:
    """Close the months that have ended: record the held time before this month's start of
    leases that are still running (or otherwise unrecorded), so a past month's statement
    reads records only and never changes. Bounded batch; safe to run twice or at once."""
    month_start = month_of(now or timezone.now())[0]
    leases = list(
        leases_to_close(month_start).select_related("team", "card_model").order_by("pk")[:batch]
    )
    written = 0
    for lease in leases:
        records = usage_pieces(lease, after=lease.usage_recorded_until, before=month_start)
        written += _write(lease, records, until=month_start)
    return written


def usage_record_lease_safely(lease_id: int) -> None:
    """For the end-of-lease hook: never let a billing hiccup break an ending (the sweep retries)."""
    try:
        usage_record_lease(lease_id)
    except Exception:
        logger.exception(
            "usage records for lease %s failed; the periodic task will retry", lease_id
        )


def usage_record_after_commit(lease_id: int) -> None:
    """The lease's holding has ended (ended or failed): record its usage once the transaction
    commits. Called where the holding ends (``lifecycle.provisioning``), never from a signal,
    so a bulk write cannot skip it; ``usage_record_missing`` re-finds any that were lost."""
    transaction.on_commit(lambda: usage_record_lease_safely(lease_id), robust=True)


def leases_missing_usage():
    """Ended or failed leases that held a card for at least a minute their usage records do not
    cover yet (none written, or only up to a month close)."""
    held_minute = Allocation.objects.filter(
        lease=OuterRef("pk"), end_at__gte=F("start_at") + MINUTE
    )
    return (
        Lease.objects.filter(status__in=RECORDED_STATES)
        .alias(
            held=Exists(held_minute),
            held_after=Exists(held_minute.filter(end_at__gt=OuterRef("usage_recorded_until"))),
        )
        .filter(Q(usage_recorded_until__isnull=True, held=True) | Q(held_after=True))
    )


def usage_record_missing(*, batch: int = BATCH) -> int:
    """Record a bounded batch of leases the end-of-lease hook missed; returns records written."""
    ids = list(leases_missing_usage().order_by("pk").values_list("pk", flat=True)[:batch])
    return sum(usage_record_lease(lease_id) for lease_id in ids)
