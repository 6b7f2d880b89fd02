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

from django.db import IntegrityError, transaction
from django.db.models import Exists, F, OuterRef

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
    cuts.update(at for at in changes if lo < at < hi)
    ordered = sorted(cuts)
    return list(zip(ordered, ordered[1:], strict=False))


def usage_pieces(lease: Lease) -> list[UsageRecord]:
    """The usage records a lease's allocations make (unsaved)."""
    allocations = [
        (card, node, region, floor_minute(start), floor_minute(end))
        for card, node, region, start, end in Allocation.objects.filter(lease=lease).values_list(
            "card_id", "card__node_id", "card__node__region_id", "start_at", "end_at"
        )
    ]
    allocations = [a for a in allocations if a[4] > a[3]]
    if not allocations:
        return []
    lo = min(a[3] for a in allocations)
    hi = max(a[4] for a in allocations)
    book = PriceBook.load(card_model=lease.card_model, team_id=lease.team_id, until=hi)
    discount = discount_for(lease.priority)
    records = []
    for w_start, w_end in _windows(lo, hi, book.changes()):
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
                )
            )
    records.sort(key=lambda r: (r.start_at, r.node_id))
    if lease.activated_at and lease.submitted_at:
        wait = (lease.activated_at - lease.submitted_at).total_seconds()
        records[0].wait_seconds = max(int(wait), 0)
    return records


def usage_record_lease(lease_id: int) -> int:
    """Write the usage records of an ended or failed lease; returns how many were written.

    Safe to call twice or concurrently: a lease that has records is left alone, and the
    unique constraint turns a racing second writer into a no-op.
    """
    lease = (
        Lease.objects.select_related("team", "card_model")
        .filter(pk=lease_id, status__in=RECORDED_STATES)
        .first()
    )
    if lease is None or UsageRecord.objects.filter(lease_id=lease_id).exists():
        return 0
    records = usage_pieces(lease)
    try:
        with transaction.atomic():
            UsageRecord.objects.bulk_create(records)
    except IntegrityError:
        return 0
    return len(records)


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
    """Ended or failed leases that held a card for at least a minute and have no records yet."""
    held = Allocation.objects.filter(lease=OuterRef("pk"), end_at__gte=F("start_at") + MINUTE)
    recorded = UsageRecord.objects.filter(lease=OuterRef("pk"))
    return Lease.objects.filter(status__in=RECORDED_STATES).filter(Exists(held), ~Exists(recorded))


def usage_record_missing(*, batch: int = BATCH) -> int:
    """Record a bounded batch of leases the end-of-lease hook missed; returns records written."""
    ids = list(leases_missing_usage().order_by("pk").values_list("pk", flat=True)[:batch])
    return sum(usage_record_lease(lease_id) for lease_id in ids)
