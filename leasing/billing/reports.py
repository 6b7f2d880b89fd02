"""Usage and cost reports and monthly statements: reads over ``UsageRecord``, aggregated in SQL.

Every figure is a sum of records, so a report, a statement and the records agree to the cent.
A record belongs to the period (day, week, month; site time zone) in which it starts; records
never cross a month boundary, so months are exact.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta
from decimal import Decimal

from django.contrib.auth import get_user_model
from django.db.models import Count, F, Min, QuerySet, Sum
from django.db.models.functions import TruncDay, TruncWeek
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from inventory.models import CardModel, Node, Region, Vendor
from leasing.billing import accrued
from leasing.billing.prices import currency
from leasing.choices import Priority
from leasing.models import Statement, UsageRecord
from leasing.periods import local_date, month_of, site_tz
from portal.models import Department, Team
from portal.permissions import is_finance, is_operator, lead_memberships

# group_by value -> (record field, column heading)
GROUPS = {
    "team": ("team_id", _("Team")),
    "department": ("department_id", _("Department")),
    "user": ("user_id", _("User")),
    "card_model": ("card_model_id", _("Card model")),
    "vendor": ("vendor", _("Vendor")),
    "region": ("region_id", _("Region")),
    "priority": ("priority", _("Priority")),
    "tariff": ("off_peak", _("Peak / off-peak")),
}
PERIODS = {"day": _("Day"), "week": _("Week"), "month": _("Month")}
HOUR_MINUTES = Decimal(60)
TWO = Decimal("0.01")


@dataclass(frozen=True)
class ReportFilter:
    """What a report covers: ``start``…``end`` (whole days, both included, site time zone)."""

    start: date
    end: date
    group_by: str = "team"
    period: str = "month"
    team_ids: tuple[int, ...] | None = None  # None: every team

    @property
    def since(self) -> datetime:
        return datetime.combine(self.start, time.min, tzinfo=site_tz())

    @property
    def until(self) -> datetime:
        return datetime.combine(self.end + timedelta(days=1), time.min, tzinfo=site_tz())


def report_team_ids(user) -> tuple[int, ...] | None:
    """The teams *user* may report on: None for all (finance, operators), else the teams they lead."""
    if is_finance(user) or is_operator(user):
        return None
    return tuple(lead_memberships(user).order_by("team_id").values_list("team_id", flat=True))


def may_see_reports(user) -> bool:
    return report_team_ids(user) != ()


def records(f: ReportFilter) -> QuerySet[UsageRecord]:
    qs = UsageRecord.objects.filter(start_at__gte=f.since, start_at__lt=f.until)
    if f.team_ids is not None:
        qs = qs.filter(team_id__in=f.team_ids)
    return qs


def _period_expr(period: str):
    if period == "day":
        return TruncDay("start_at", tzinfo=site_tz())
    if period == "week":
        return TruncWeek("start_at", tzinfo=site_tz())
    return F("month")


def labels(group_by: str, keys) -> dict:
    """Display names for the group keys of a report."""
    keys = [k for k in keys if k is not None]
    if group_by == "vendor":
        return {k: str(Vendor(k).label) if k in Vendor.values else k for k in keys}
    if group_by == "priority":
        return {k: str(Priority(k).label) if k in Priority.values else k for k in keys}
    if group_by == "tariff":
        return {k: str(_("Off-peak") if k else _("Peak")) for k in keys}
    source = {
        "team": (Team, "name"),
        "department": (Department, "name"),
        "user": (get_user_model(), "username"),
        "card_model": (CardModel, "name"),
        "region": (Region, "name"),
    }[group_by]
    model, name = source
    return dict(model.objects.filter(pk__in=keys).values_list("pk", name))


def hours(card_minutes: int | None) -> Decimal:
    return (Decimal(card_minutes or 0) / HOUR_MINUTES).quantize(TWO)


def money(value) -> Decimal:
    """A sum of costs to the fen (SQLite hands back 84 for 84.00)."""
    return Decimal(value or 0).quantize(TWO)


def _summary(card_minutes, cost, leases, wait_sum, wait_count) -> dict:
    return {
        "card_minutes": card_minutes or 0,
        "card_hours": hours(card_minutes),
        "cost": money(cost),
        "leases": leases,
        "wait_minutes": (
            round(Decimal(wait_sum) / wait_count / HOUR_MINUTES, 1) if wait_count else None
        ),
        "wait_sum": wait_sum or 0,
        "wait_count": wait_count,
    }


def _pieces_summary(pieces: list[UsageRecord]) -> dict:
    waits = [p.wait_seconds for p in pieces if p.wait_seconds is not None]
    return _summary(
        sum(p.card_minutes for p in pieces),
        sum((p.cost for p in pieces), Decimal(0)),
        len({p.lease_id for p in pieces}),
        sum(waits),
        len(waits),
    )


def _accrued_rows(pieces: list[UsageRecord], f: ReportFilter) -> list[dict]:
    field_name = GROUPS[f.group_by][0]
    groups: dict[tuple, list[UsageRecord]] = {}
    for piece in pieces:
        key = (accrued.period_of(piece, f.period), getattr(piece, field_name))
        groups.setdefault(key, []).append(piece)
    return [
        {"period": period, "key": key, "usage": accrued.ACCRUED, **_pieces_summary(group)}
        for (period, key), group in groups.items()
    ]


def _row_order(row: dict):
    return (row["period"], row["key"] is None, row["key"] or 0, row["usage"] == accrued.ACCRUED)


def usage_report(f: ReportFilter, *, now: datetime | None = None) -> dict:
    """Rows per period × group × kind of usage — recorded, and accrued by leases still running
    (as of *now*) — and the totals of each and of both: card-hours, cost, leases, queue wait.

    The page, the API and the files all read this. A bounded number of queries whatever the
    size: the grouped records, their totals, the labels, the held time not yet recorded (and
    when there is some: its leases, their price books, which of them have records too).
    """
    now = now or timezone.now()
    field_name = GROUPS[f.group_by][0]
    rows = [
        {
            "period": local_date(row["period"]),
            "key": row["key"],
            "usage": accrued.RECORDED,
            **_summary(row["card_minutes"], row["cost"], row["leases"], row["ws"], row["wc"]),
        }
        for row in records(f)
        .values(period=_period_expr(f.period), key=F(field_name))
        .annotate(
            card_minutes=Sum("card_minutes"),
            cost=Sum("cost"),
            leases=Count("lease_id", distinct=True),
            ws=Sum("wait_seconds"),
            wc=Count("wait_seconds"),
        )
        .order_by("period", "key")
    ]
    pieces = accrued.accrued_pieces(
        since=f.since, until=f.until, now=now, team_ids=f.team_ids, detail=False
    )
    rows = sorted(rows + _accrued_rows(pieces, f), key=_row_order)
    names = labels(f.group_by, {row["key"] for row in rows})
    for row in rows:
        row["label"] = (
            names.get(row["key"], str(row["key"])) if row["key"] is not None else str(_("(none)"))
        )
        row["usage_label"] = accrued.USAGE_LABELS[row["usage"]]
    t = records(f).aggregate(
        card_minutes=Sum("card_minutes"),
        cost=Sum("cost"),
        leases=Count("lease_id", distinct=True),
        ws=Sum("wait_seconds"),
        wc=Count("wait_seconds"),
    )
    recorded = _summary(t["card_minutes"], t["cost"], t["leases"], t["ws"], t["wc"])
    acc = _pieces_summary(pieces)
    both = {p.lease_id for p in pieces}
    if both:  # a lease with a closed month recorded and this month accrued counts once
        both &= set(records(f).filter(lease_id__in=both).values_list("lease_id", flat=True))
    totals = _summary(
        recorded["card_minutes"] + acc["card_minutes"],
        recorded["cost"] + acc["cost"],
        recorded["leases"] + acc["leases"] - len(both),
        recorded["wait_sum"] + acc["wait_sum"],
        recorded["wait_count"] + acc["wait_count"],
    )
    recorded["usage_label"] = accrued.USAGE_LABELS[accrued.RECORDED]
    acc["usage_label"] = accrued.USAGE_LABELS[accrued.ACCRUED]
    totals |= {"recorded": recorded, "accrued": acc}
    return {
        "filter": f,
        "rows": rows,
        "totals": totals,
        "as_of": now,
        "pieces": pieces,  # the accrued usage itself, for the charts
        # The range reaches the current month: its figures grow until the month closes.
        "open": f.until > month_of(now)[0],
    }


def detail_headings() -> list[str]:
    """The columns of the every-record export, each naming its unit (and the currency)."""
    money_unit = {"currency": currency()}
    return [
        str(h)
        for h in (
            _("Lease"),
            _("User"),
            _("Team"),
            _("Department"),
            _("Card model"),
            _("Vendor"),
            _("Node"),
            _("Region"),
            _("Priority"),
            _("Start"),
            _("End"),
            _("Cards"),
            _("Card-hours"),
            _("Price per card-hour (%(currency)s)") % money_unit,
            _("Cost (%(currency)s)") % money_unit,
            _("Usage"),
        )
    ]


# Columns read per record; the names come from small lookups (no joins on the big scan,
# which lets PostgreSQL stream it straight off the start_at index).
_DETAIL_COLUMNS = (
    "lease_id",
    "user_id",
    "team_id",
    "department_id",
    "card_model_id",
    "vendor",
    "node_id",
    "region_id",
    "priority",
    "start_at",
    "end_at",
    "cards",
    "card_minutes",
    "price",
    "cost",
)


def _names(model, field: str, ids=None) -> dict:
    qs = model.objects.all() if ids is None else model.objects.filter(pk__in=ids)
    return dict(qs.values_list("pk", field))


def usage_detail_rows(
    f: ReportFilter, *, now: datetime | None = None, chunk_size: int = 5000
) -> Iterator[tuple]:
    """Every record in the filter, one tuple each, read from a server-side cursor (flat
    memory), then the accrued pieces of leases still running; the last column says which."""
    qs = records(f)
    pieces = accrued.accrued_pieces(
        since=f.since, until=f.until, now=now or timezone.now(), team_ids=f.team_ids
    )
    users = _names(get_user_model(), "username", qs.values("user_id").distinct())
    users |= {p.user_id: p.user.username for p in pieces}
    teams = _names(Team, "name")
    departments = _names(Department, "name")
    models = _names(CardModel, "name")
    nodes = _names(Node, "hostname", qs.values("node_id").distinct())
    nodes |= {p.node_id: p.node.hostname for p in pieces}
    regions = _names(Region, "name")
    kinds = {k: str(label) for k, label in accrued.USAGE_LABELS.items()}
    vendors = {k: str(label) for k, label in Vendor.choices}
    priorities = {k: str(label) for k, label in Priority.choices}
    rows = qs.order_by("start_at", "lease_id", "node_id").values_list(*_DETAIL_COLUMNS)
    running = ([getattr(p, c) for c in _DETAIL_COLUMNS] for p in pieces)
    for kind, source in (
        (accrued.RECORDED, rows.iterator(chunk_size=chunk_size)),
        (accrued.ACCRUED, running),
    ):
        for row in source:
            (lease, user, team, dept, model, vendor, node, region, priority, *rest) = row
            start, end, cards, card_minutes, price, cost = rest
            # Labels in the reader's language, never raw keys (huawei, normal, a slug); one
            # unit per column: card-hours, as the summary and the statement.
            yield (
                lease,
                users.get(user, user),
                teams.get(team, team),
                departments.get(dept, ""),
                models.get(model, model),
                vendors.get(vendor, vendor),
                nodes.get(node, node),
                regions.get(region, region),
                priorities.get(priority, priority),
                start,
                end,
                cards,
                hours(card_minutes),
                price,
                cost,
                kinds[kind],
            )


# --- monthly statements --------------------------------------------------------------------


def month_bounds(month: date) -> tuple[date, date]:
    """First and last day of *month*."""
    first = month.replace(day=1)
    last = (first + timedelta(days=32)).replace(day=1) - timedelta(days=1)
    return first, last


def statement(team: Team, month: date, *, now: datetime | None = None) -> dict:
    """A team's month: every usage record, by lease, and — while the month is open, or until
    its close is written — the usage accrued by leases still running, as of *now*.

    ``state``: ``open`` (the current month: recorded + accrued so far), ``closing`` (the
    month has ended but part of it is not recorded yet: the close runs every few minutes),
    ``closed`` (records only; they never change). Totals are sums of the lines.
    """
    now = now or timezone.now()
    first = month.replace(day=1)
    since = datetime.combine(first, time.min, tzinfo=site_tz())
    until = month_of(since)[1]
    lines = (
        UsageRecord.objects.filter(team=team, month=first)
        .select_related("user", "card_model", "node")
        .order_by("lease_id", "start_at", "node_id")
    )
    t = lines.aggregate(
        card_minutes=Sum("card_minutes"),
        cost=Sum("cost"),
        leases=Count("lease_id", distinct=True),
        first=Min("start_at"),
    )
    recorded = _summary(t["card_minutes"], t["cost"], t["leases"], 0, 0)
    pieces = accrued.accrued_pieces(since=since, until=until, now=now, team_ids=(team.pk,))
    pieces.sort(key=lambda p: (p.lease_id, p.start_at, p.node_id))
    acc = _pieces_summary(pieces)
    both = {p.lease_id for p in pieces}
    if both:
        both &= set(lines.filter(lease_id__in=both).values_list("lease_id", flat=True))
    totals = _summary(
        recorded["card_minutes"] + acc["card_minutes"],
        recorded["cost"] + acc["cost"],
        recorded["leases"] + acc["leases"] - len(both),
        0,
        0,
    ) | {"first": t["first"], "recorded": recorded, "accrued": acc}
    by_model: dict[str, dict] = {}
    for row in (
        lines.order_by()
        .values("card_model__name")
        .annotate(card_minutes=Sum("card_minutes"), cost=Sum("cost"))
    ):
        by_model[row["card_model__name"]] = row
    for piece in pieces:
        row = by_model.setdefault(
            piece.card_model.name,
            {"card_model__name": piece.card_model.name, "card_minutes": 0, "cost": 0},
        )
        row["card_minutes"] += piece.card_minutes
        row["cost"] += piece.cost
    if now < until:
        state = "open"
    else:
        state = "closing" if pieces else "closed"
    return {
        "team": team,
        "month": first,
        "lines": lines,
        "accrued": pieces,
        "totals": totals,
        "by_model": [
            {**row, "card_hours": hours(row["card_minutes"]), "cost": money(row["cost"])}
            for _name, row in sorted(by_model.items())
        ],
        "state": state,
        # Numbered and dated once the month is closed and issued (billing.statements).
        "issued": Statement.objects.filter(team=team, month=first).first(),
        "as_of": now,
        "closes_at": until,
    }
