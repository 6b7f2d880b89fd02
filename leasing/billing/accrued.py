"""Accrued usage: card-time held up to now that no usage record covers yet.

A lease's usage is recorded when it ends (and, for a lease running across months, when the
month closes). Until then its held time is *accrued*: reports and statements show it beside
the recorded usage, labelled, so "this month" is complete at any moment. It is computed by the
same rule as the records (``usage.usage_pieces``: the same pieces, the same price book, the
same rounding), so the figures do not move when the records are written — only the label does.
"""

from __future__ import annotations

from datetime import date, datetime, timedelta
from decimal import Decimal

from django.db.models import F, Q, Sum
from django.utils.translation import gettext_lazy as _

from inventory.models import Node
from leasing.billing.prices import PriceBook, estimate
from leasing.billing.usage import Held, held, usage_pieces
from leasing.choices import OPEN_STATES
from leasing.models import Allocation, Lease, UsageRecord
from leasing.periods import floor_minute, site_tz

RECORDED = "recorded"
ACCRUED = "accrued"
# What a figure is, as shown beside it on pages and in files.
USAGE_LABELS = {
    RECORDED: _("Recorded"),
    ACCRUED: _("Accrued (running)"),
}


# What ``usage.usage_pieces`` and the price books read of a lease: all that the sums need.
_FIGURE_FIELDS = (
    "user",
    "team__department",
    "card_model__vendor",
    "card_model__price_per_hour",
    "priority",
    "start_at",
    "submitted_at",
    "activated_at",
    "usage_recorded_until",
)


def accrued_pieces(
    *,
    since: datetime,
    until: datetime,
    now: datetime,
    team_ids: tuple[int, ...] | None = None,
    detail: bool = True,
) -> list[UsageRecord]:
    """The held time in [since, min(until, now)) that no record covers, as unsaved usage
    records (with their lease, user, card model and node loaded), ordered by start.

    ``detail=False`` is for callers that only add the pieces up (reports, the team's month):
    each lease is read with only the fields its pieces are made of, and no user or node is
    loaded — on thousands of running leases, most of the time otherwise.

    A bounded number of queries whatever the number of leases: the allocations not yet
    recorded, their leases, the price books (two), the nodes (with *detail*).
    """
    stop = min(until, floor_minute(now))
    if stop <= since:
        return []
    rows = Allocation.objects.filter(start_at__lt=stop, end_at__gt=since).filter(
        Q(lease__usage_recorded_until__isnull=True) | Q(end_at__gt=F("lease__usage_recorded_until"))
    )
    if team_ids is not None:
        rows = rows.filter(lease__team_id__in=team_ids)
    by_lease: dict[int, list[Held]] = {}
    # Unordered: a lease's pieces do not depend on the order of its allocations, and the
    # allocations' default order (node hostname, card index) costs a sort over two joins.
    for lease_id, card, node, region, start, end in rows.order_by().values_list(
        "lease_id", "card_id", "card__node_id", "card__node__region_id", "start_at", "end_at"
    ):
        by_lease.setdefault(lease_id, []).append((card, node, region, start, end))
    if not by_lease:
        return []
    leases = Lease.objects.filter(pk__in=by_lease).order_by("pk")
    if detail:
        leases = leases.select_related("team", "card_model", "user")
    else:
        leases = leases.select_related("team", "card_model").only(*_FIGURE_FIELDS)
    leases = list(leases)
    books = PriceBook.load_many(leases=leases, until=stop)
    pieces: list[UsageRecord] = []
    for lease in leases:
        bookmark = lease.usage_recorded_until
        after = since if bookmark is None else max(since, floor_minute(bookmark))
        pieces += usage_pieces(
            lease,
            allocations=by_lease[lease.pk],
            after=after,
            before=stop,
            book=books[(lease.card_model_id, lease.team_id)],
            # Only some allocations were read: the wait goes on the first piece only when
            # the lease started inside the range and nothing of it is recorded.
            with_wait=bookmark is None and floor_minute(lease.start_at) >= since,
        )
    if detail:
        nodes = Node.objects.in_bulk({p.node_id for p in pieces})
        for piece in pieces:
            piece.node = nodes[piece.node_id]
            piece.user = piece.lease.user
            piece.card_model = piece.lease.card_model
    pieces.sort(key=lambda r: (r.start_at, r.lease_id, r.node_id))
    return pieces


def month_usage_by_model(
    team_id: int, *, since: datetime, until: datetime, now: datetime
) -> dict[int, tuple[int, Decimal]]:
    """A team's month so far per card model, as the finance report counts it: the records
    of the month plus the accrued usage (card-minutes, cost). The team page's "used"."""
    out: dict[int, tuple[int, Decimal]] = {}
    for model_id, minutes, cost in (
        UsageRecord.objects.filter(team_id=team_id, month=since.date())
        .order_by()
        .values_list("card_model_id")
        .annotate(m=Sum("card_minutes"), c=Sum("cost"))
    ):
        out[model_id] = (minutes or 0, cost or Decimal(0))
    for piece in accrued_pieces(
        since=since, until=until, now=now, team_ids=(team_id,), detail=False
    ):
        minutes, cost = out.get(piece.lease.card_model_id, (0, Decimal(0)))
        out[piece.lease.card_model_id] = (minutes + piece.card_minutes, cost + piece.cost)
    return out


def period_of(piece: UsageRecord, period: str) -> date:
    """The report period a piece belongs to (the one it starts in), as the database gives
    it for records: the month's first day, the day, or the week's Monday."""
    if period == "month":
        return piece.month
    day = piece.start_at.astimezone(site_tz()).date()
    return day if period == "day" else day - timedelta(days=day.weekday())


def lease_cost(lease: Lease, *, now: datetime, until: datetime | None = None) -> dict:
    """What a lease has cost up to now and will have cost at its booked end, by the bill's own
    rule (``usage.usage_pieces``: the same pieces, price book and rounding as its records), for
    the lease page. A lease still waiting for cards has only the estimate (``prices.estimate``)
    from its estimated start. *until* is the end the lease shows when it is earlier than its
    booked one (a drain or a preemption: ``lifecycle.selectors.lease_truth``): the cost to the
    end stops there, as the bill will."""
    rows = held(lease.pk)
    book_until = max([lease.end_at, *(r[4] for r in rows)])
    book = PriceBook.load(card_model=lease.card_model, team_id=lease.team_id, until=book_until)
    pieces = usage_pieces(lease, allocations=rows, book=book) if rows else []
    so_far = sum(
        (p.cost for p in usage_pieces(lease, allocations=rows, before=floor_minute(now), book=book))
        if rows
        else (),
        Decimal(0),
    )
    if pieces and until is not None and lease.status in OPEN_STATES:
        pieces = usage_pieces(lease, allocations=rows, before=floor_minute(until), book=book)
    if pieces:
        to_end = sum((p.cost for p in pieces), Decimal(0))
    elif lease.status in OPEN_STATES:
        start = max(lease.estimated_start or lease.start_at, now)
        to_end = estimate(
            card_model=lease.card_model,
            team_id=lease.team_id,
            count=lease.count,
            start=start,
            end=start + lease.duration,
            priority=lease.priority,
        )
    else:
        to_end = Decimal(0)  # ended before it held a card
    return {"so_far": so_far, "to_end": to_end, "estimated": not pieces}
