"""Reads for teams: which a user sees or manages, approvals waiting, a team's use this month."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal

from django.db.models import QuerySet

from inventory.models import CardModel
from leasing import choices, periods
from leasing.billing.accrued import month_usage_by_model
from leasing.billing.prices import PriceBooks
from leasing.choices import BOOKED_STATES, HOLDING_STATES, LeaseStatus
from leasing.models import GuaranteedShare, Lease, LeaseChange, MemberLimit, Quota
from leasing.teams import quotas
from portal.models import Membership, Team
from portal.permissions import is_finance, is_operator, leads_team, teams_led_by

# --- teams -------------------------------------------------------------------------------


def teams_visible_to(user) -> QuerySet[Team]:
    """Operators and finance see every team; others the teams they belong to."""
    if is_operator(user) or is_finance(user):
        return Team.objects.all()
    return Team.objects.filter(memberships__user=user).distinct()


def team_for_manager(user, slug: str) -> Team | None:
    """The team, if *user* may see its page (its leads, operators, finance)."""
    team = Team.objects.filter(slug=slug).first()
    if team is None:
        return None
    if is_operator(user) or is_finance(user) or leads_team(user, team.pk):
        return team
    return None


def approvals_for(user) -> QuerySet[Lease]:
    """Requests waiting for a decision *user* may take."""
    pending = Lease.objects.filter(status=LeaseStatus.PENDING_APPROVAL).select_related(
        "user", "team", "card_model"
    )
    if is_operator(user):
        return pending
    return pending.filter(team_id__in=teams_led_by(user))


@dataclass
class QuotaRow:
    """One line of a team's quota table: a rule (or a model in use) and its use this month."""

    card_model: CardModel | None
    rule: Quota | None
    used_hours: Decimal = Decimal(0)  # held up to now, as billed (the report's figure)
    booked_hours: Decimal = Decimal(0)  # cards placed or booked, still to come this month
    waiting_hours: Decimal = Decimal(0)  # requests still waiting (queue, approval), admitted
    money: Decimal = Decimal(0)  # spent so far + booked ahead (what the money budget counts)
    money_spent: Decimal = Decimal(0)  # held up to now, at the bill's prices
    concurrent_now: int = 0

    @property
    def left_hours(self) -> Decimal | None:
        if self.rule is None or self.rule.card_hours_per_month is None:
            return None
        spoken_for = self.used_hours + self.booked_hours + self.waiting_hours
        return max(self.rule.card_hours_per_month - spoken_for, Decimal(0))


def _holds_now(charge: quotas.Charge, now: datetime) -> bool:
    return charge.start <= now < charge.end and charge.status in choices.BOOKED_STATES


def _used_hours(card_minutes: int) -> Decimal:
    return Decimal(card_minutes) / 60


def team_month_total(team: Team, *, now: datetime) -> QuotaRow:
    """The total line of ``team_overview`` alone (card-hours used, money spent, cards held
    now), for a lead's dashboard: the same figures, without pricing every charge of the month
    for the quota table's other columns."""
    month = periods.month_of(now)
    total = QuotaRow(card_model=None, rule=None)
    for c in quotas.charges(team.pk, *month):
        if _holds_now(c, now):
            total.concurrent_now += c.count
    billed = month_usage_by_model(team.pk, since=month[0], until=month[1], now=now)
    for minutes, cost in billed.values():
        total.used_hours += _used_hours(minutes)
        total.money_spent += cost
    return total


def team_page(team: Team, *, now: datetime, since: datetime, until: datetime) -> tuple:
    """(``team_overview``, ``team_daily_hours`` over [since, until)): what the team page
    shows, the team's charges read once for the month and the chart's days."""
    month = periods.month_of(now)
    chart_end = min(until, now)
    if chart_end <= since:  # a chart of days still to come: nothing to read for it
        return team_overview(team, now=now), {}
    in_month, in_chart = quotas.charges_over(team.pk, [month, (since, chart_end)])
    overview = team_overview(team, now=now, charges=in_month)
    return overview, team_daily_hours(team, since=since, until=until, now=now, charges=in_chart)


def team_overview(team: Team, *, now: datetime, charges: list | None = None) -> dict:
    """Everything a lead's team page shows, in a bounded number of queries (*charges*: the
    month's, when the caller has read them: ``team_page``)."""
    month = periods.month_of(now)
    rules = {
        q.card_model_id: q for q in Quota.objects.filter(team=team).select_related("card_model")
    }
    if charges is None:
        charges = quotas.charges(team.pk, *month)
    models = {
        m.pk: m
        for m in CardModel.objects.filter(
            pk__in={c.card_model_id for c in charges} | set(rules) - {None}
        )
    }
    rows: dict[int | None, QuotaRow] = {}
    for model_id in sorted(
        set(models) | set(rules), key=lambda k: (k is not None, models[k].name if k else "")
    ):
        rows[model_id] = QuotaRow(card_model=models.get(model_id), rule=rules.get(model_id))
    if None not in rows:
        rows[None] = QuotaRow(card_model=None, rule=None)
    books = PriceBooks(team_id=team.pk, until=month[1])
    books.preload(models.values())
    for c in charges:
        spent = quotas.charge_money(c, books, month[0], min(month[1], now))
        booked = quotas.charge_money(c, books, max(month[0], now), month[1])
        waiting = c.status in choices.WAITING_STATES
        for key in (c.card_model_id, None):
            row = rows[key]
            if waiting:  # admitted, not held: neither used nor booked (shown apart)
                row.waiting_hours += c.count * periods.overlap_hours(c.start, c.end, *month)
            elif c.end > now:
                row.booked_hours += c.count * periods.overlap_hours(
                    max(c.start, now), c.end, *month
                )
            row.money += spent + booked
            if _holds_now(c, now):
                row.concurrent_now += c.count
    # Used so far: the finance report's figure (recorded + accrued, by the bill's own pieces).
    billed = month_usage_by_model(team.pk, since=month[0], until=month[1], now=now)
    for model_id, (minutes, cost) in billed.items():
        for key in (model_id, None):
            if key in rows:
                rows[key].used_hours += _used_hours(minutes)
                rows[key].money_spent += cost
    holders = (
        Lease.objects.filter(team=team, status__in=HOLDING_STATES)
        .select_related("user", "card_model")
        .order_by("end_at")
    )
    limits = (
        MemberLimit.objects.filter(membership__team=team)
        .select_related("membership__user", "card_model")
        .order_by("membership__user__username", "card_model__name")
    )
    return {
        "month": month,
        "rows": list(rows.values()),
        "holders": holders,
        "pending": Lease.objects.filter(team=team, status=LeaseStatus.PENDING_APPROVAL)
        .select_related("user", "card_model")
        .order_by("submitted_at"),
        "pending_changes": LeaseChange.objects.filter(
            lease__team=team, status=LeaseChange.Status.PENDING, lease__status__in=BOOKED_STATES
        )
        .select_related("lease__user", "lease__card_model", "card_model", "requested_by")
        .order_by("requested_at"),
        "limits": limits,
        "memberships": Membership.objects.filter(team=team)
        .select_related("user")
        .order_by("role", "user__username"),
        # Guaranteed shares (operators set them): cards the team gets within a stated time.
        "shares": GuaranteedShare.objects.filter(team=team)
        .select_related("card_model")
        .order_by("card_model__name", "family"),
    }


CHART_DAYS_MAX = 366


def team_daily_hours(
    team: Team, *, since: datetime, until: datetime, now: datetime, charges: list | None = None
) -> dict[str, dict]:
    """Card-hours held per card model and day (site time zone) in [since, until), up to *now*:
    the team chart over any range (whole days; at most ``CHART_DAYS_MAX``). *charges*: those
    of [since, min(until, now)), when the caller has read them (``team_page``)."""
    until = min(until, now)
    if until <= since:
        return {}
    found = quotas.charges(team.pk, since, until) if charges is None else charges
    names = dict(
        CardModel.objects.filter(pk__in={c.card_model_id for c in found}).values_list("pk", "name")
    )
    days: dict[str, dict] = {}
    day_len = timedelta(days=1)
    for c in found:
        # Only the days the charge touches (a lease is mostly hours long; a range has many).
        lo, hi = max(c.start, since), min(c.end, until)
        day = since + timedelta(days=(lo - since) // day_len)
        while day < hi:
            hours = c.count * periods.overlap_hours(c.start, min(c.end, until), day, day + day_len)
            if hours:
                per_day = days.setdefault(names[c.card_model_id], {})
                key = periods.local_date(day)
                per_day[key] = per_day.get(key, Decimal(0)) + hours
            day += day_len
    return days


def team_for_viewer(user, slug: str) -> Team | None:
    """The team, if *user* may see its page: its members and leads, operators, finance."""
    team = Team.objects.filter(slug=slug).first()
    if team is None:
        return None
    if (
        is_operator(user)
        or is_finance(user)
        or Membership.objects.filter(user=user, team=team).exists()
    ):
        return team
    return None
