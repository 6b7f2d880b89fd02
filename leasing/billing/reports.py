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
from django.db.models import Avg, Count, F, Min, QuerySet, Sum
from django.db.models.functions import TruncDay, TruncWeek
from django.utils.translation import gettext_lazy as _

from inventory.models import CardModel, Node, Region, Vendor
from leasing.choices import Priority
from leasing.models import UsageRecord
from leasing.periods import local_date, site_tz
from portal.models import Department, Membership, Team
from portal.permissions import is_finance, is_operator

# group_by value -> (record field, column heading)
GROUPS = {
    "team": ("team_id", _("Team")),
    "department": ("department_id", _("Department")),
    "user": ("user_id", _("User")),
    "card_model": ("card_model_id", _("Card model")),
    "vendor": ("vendor", _("Vendor")),
    "region": ("region_id", _("Region")),
    "priority": ("priority", _("Priority")),
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
    return tuple(
        Membership.objects.filter(user=user, role=Membership.Role.LEAD)
        .order_by("team_id")
        .values_list("team_id", flat=True)
    )


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


def usage_report(f: ReportFilter) -> dict:
    """Rows per period × group, and the totals: card-hours, cost, leases, average queue wait.

    Three queries whatever the size: the grouped rows, the totals, the labels.
    """
    field_name = GROUPS[f.group_by][0]
    rows = list(
        records(f)
        .values(period=_period_expr(f.period), key=F(field_name))
        .annotate(
            card_minutes=Sum("card_minutes"),
            cost=Sum("cost"),
            leases=Count("lease_id", distinct=True),
            wait=Avg("wait_seconds"),
        )
        .order_by("period", "key")
    )
    names = labels(f.group_by, {row["key"] for row in rows})
    for row in rows:
        row["period"] = local_date(row["period"])
        row["label"] = (
            names.get(row["key"], str(row["key"])) if row["key"] is not None else str(_("(none)"))
        )
        row["card_hours"] = hours(row["card_minutes"])
        row["cost"] = money(row["cost"])
        row["wait_minutes"] = (
            None if row["wait"] is None else round(Decimal(row["wait"]) / HOUR_MINUTES, 1)
        )
    totals = records(f).aggregate(
        card_minutes=Sum("card_minutes"),
        cost=Sum("cost"),
        leases=Count("lease_id", distinct=True),
        wait=Avg("wait_seconds"),
    )
    totals["cost"] = money(totals["cost"])
    totals["card_hours"] = hours(totals["card_minutes"])
    totals["wait_minutes"] = (
        None if totals["wait"] is None else round(Decimal(totals["wait"]) / HOUR_MINUTES, 1)
    )
    return {"filter": f, "rows": rows, "totals": totals}


DETAIL_HEADINGS = (
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
    _("Card-minutes"),
    _("Price per card-hour"),
    _("Cost"),
)
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


def usage_detail_rows(f: ReportFilter, *, chunk_size: int = 5000) -> Iterator[tuple]:
    """Every record in the filter, one tuple each, read from a server-side cursor (flat memory)."""
    qs = records(f)
    users = _names(get_user_model(), "username", qs.values("user_id").distinct())
    teams = _names(Team, "slug")
    departments = _names(Department, "name")
    models = _names(CardModel, "name")
    nodes = _names(Node, "hostname", qs.values("node_id").distinct())
    regions = _names(Region, "name")
    for row in (
        qs.order_by("start_at", "lease_id", "node_id")
        .values_list(*_DETAIL_COLUMNS)
        .iterator(chunk_size=chunk_size)
    ):
        (lease, user, team, dept, model, vendor, node, region, *rest) = row
        yield (
            lease,
            users.get(user, user),
            teams.get(team, team),
            departments.get(dept, ""),
            models.get(model, model),
            vendor,
            nodes.get(node, node),
            regions.get(region, region),
            *rest,
        )


# --- monthly statements --------------------------------------------------------------------


def month_bounds(month: date) -> tuple[date, date]:
    """First and last day of *month*."""
    first = month.replace(day=1)
    last = (first + timedelta(days=32)).replace(day=1) - timedelta(days=1)
    return first, last


def statement(team: Team, month: date) -> dict:
    """Every usage record of *team* in *month*, by lease, and the totals (a sum of the lines)."""
    first = month.replace(day=1)
    lines = (
        UsageRecord.objects.filter(team=team, month=first)
        .select_related("user", "card_model", "node")
        .order_by("lease_id", "start_at", "node_id")
    )
    totals = lines.aggregate(
        card_minutes=Sum("card_minutes"),
        cost=Sum("cost"),
        leases=Count("lease_id", distinct=True),
        first=Min("start_at"),
    )
    totals["cost"] = money(totals["cost"])
    totals["card_hours"] = hours(totals["card_minutes"])
    by_model = [
        {**row, "card_hours": hours(row["card_minutes"]), "cost": money(row["cost"])}
        for row in lines.order_by()
        .values("card_model__name")
        .annotate(card_minutes=Sum("card_minutes"), cost=Sum("cost"))
        .order_by("card_model__name")
    ]
    return {"team": team, "month": first, "lines": lines, "totals": totals, "by_model": by_model}
