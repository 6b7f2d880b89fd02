"""Quotas: what a team (and a member) has used, and whether a new request fits.

Usage is derived from the leases themselves, never kept as a running total that could
drift: a lease charges ``count × hours`` over its charge window — the booked window while
it runs or waits, cut at ``ended_at`` when it ends early (so the unused part is returned
without bookkeeping). Months are calendar months in the site's time zone; a lease across
a month boundary charges each month its share.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import ROUND_HALF_UP, Decimal

from django.db.models import Exists, Q

from inventory.models import CardModel
from leasing import statements
from leasing.billing.prices import PriceBooks, currency, estimate
from leasing.choices import BOOKED_STATES, CHARGED_STATES, LeaseStatus, Priority
from leasing.models import Allocation, Lease, MemberLimit, Quota
from leasing.notify.messages import breach_text, holder_zone, person_language, render
from leasing.notify.services import notify_team_leads
from leasing.periods import month_of, months_between, overlap_hours, site_tz
from portal.models import Team

HOUR = timedelta(hours=1)
TENTH = Decimal("0.1")
CENT = Decimal("0.01")


@dataclass(frozen=True)
class Charge:
    """One lease's charge window."""

    lease_id: int
    count: int
    start: datetime
    end: datetime
    card_model_id: int
    user_id: int
    status: str
    borrowed: bool
    priority: str


@dataclass(frozen=True)
class Ask:
    """Card-time a path wants to add: *count* cards of *card_model* over [start, end).

    ``length`` is the whole lease's length, checked against ``max_lease_hours`` (None when the
    change leaves it as it was: a resize). ``lease_id`` is the lease being changed (None for a
    new request); ``replaces`` a lease whose booking this ask takes over from ``start`` on (a
    move to another model: the old lease is charged up to then and not counted as held).
    """

    team: Team
    user: object
    card_model: CardModel
    count: int
    start: datetime
    end: datetime
    length: timedelta | None
    priority: str = Priority.NORMAL
    kind: str = "request"  # request | extend | resize | approve
    lease_id: int | None = None
    borrowed: bool = False
    replaces: int | None = None


# A lease moved back and forth more often than this is judged from the oldest one reached.
HOLDING_CHAIN_MOST = 1000


def holding_start(lease: Lease) -> datetime:
    """When the person's holding that *lease* carries on began: a move to another model
    (``replaces``) makes a new lease that continues the one it replaces, so the longest-lease
    rule measures from the first lease of the chain, not from the latest move."""
    start, replaces_id = lease.start_at, lease.replaces_id
    seen = {lease.pk}
    while replaces_id and replaces_id not in seen and len(seen) < HOLDING_CHAIN_MOST:
        seen.add(replaces_id)
        row = Lease.objects.filter(pk=replaces_id).values_list("start_at", "replaces_id").first()
        if row is None:
            break
        start, replaces_id = min(start, row[0]), row[1]
    return start


def _leases(team_id: int, *, card_model_id: int | None = None, user_id: int | None = None):
    leases = Lease.objects.filter(team_id=team_id)
    if card_model_id is not None:
        leases = leases.filter(card_model_id=card_model_id)
    if user_id is not None:
        leases = leases.filter(user_id=user_id)
    return leases


def charges(
    team_id: int,
    lo: datetime,
    hi: datetime,
    *,
    card_model_id: int | None = None,
    user_id: int | None = None,
    cut: tuple[int, datetime] | None = None,
) -> list[Charge]:
    """The charge windows of the team's leases that touch [lo, hi) (*cut*: one lease's window
    ends early, at the moment another takes its booking over).

    A lease that holds (or held) cards charges what its allocations cover — so a resize, a
    card swap or a partial preemption charges each card for its own time, as the bill does;
    a waiting lease charges ``count`` over its booked window.
    """
    (found,) = charges_over(
        team_id, [(lo, hi)], card_model_id=card_model_id, user_id=user_id, cut=cut
    )
    return found


def charges_over(
    team_id: int,
    ranges: list[tuple[datetime, datetime]],
    *,
    card_model_id: int | None = None,
    user_id: int | None = None,
    cut: tuple[int, datetime] | None = None,
) -> list[list[Charge]]:
    """``charges`` for each of *ranges*: ranges that overlap or touch share one read of the
    leases and allocations over the range that covers them (a page that shows a month and a
    chart's days); each keeps what its own read would find."""
    found: dict[int, list[Charge]] = {}
    group: list[int] = []
    filters = {"card_model_id": card_model_id, "user_id": user_id}
    for n in sorted(range(len(ranges)), key=lambda n: ranges[n]):
        if group and ranges[n][0] > max(ranges[g][1] for g in group):
            found.update(_read_together(team_id, [ranges[g] for g in group], group, cut, filters))
            group = []
        group.append(n)
    if group:
        found.update(_read_together(team_id, [ranges[g] for g in group], group, cut, filters))
    return [found[n] for n in range(len(ranges))]


def _read_together(team_id, ranges, names, cut, filters) -> dict[int, list[Charge]]:
    """``charges`` over each of *ranges* (named *names*) from one read over all of them."""
    lo_all, hi_all = min(lo for lo, _hi in ranges), max(hi for _lo, hi in ranges)
    rows = list(
        _leases(team_id, **filters)
        .filter(status__in=CHARGED_STATES, start_at__lt=hi_all, end_at__gt=lo_all)
        .filter(Q(ended_at__isnull=True) | Q(ended_at__gt=lo_all))
        .values_list(
            "pk",
            "count",
            "start_at",
            "end_at",
            "ended_at",
            "card_model_id",
            "user_id",
            "status",
            "borrowed",
            "priority",
        )
    )
    held: dict[int, list[tuple[datetime, datetime]]] = {}
    for lease_id, start, end in Allocation.objects.filter(
        lease_id__in=[r[0] for r in rows if r[7] != LeaseStatus.QUEUED], start_at__lt=hi_all
    ).values_list("lease_id", "start_at", "end_at"):
        held.setdefault(lease_id, []).append((start, end))
    return {
        name: _charges_in(rows, held, lo, hi, cut)
        for name, (lo, hi) in zip(names, ranges, strict=True)
    }


def _charges_in(rows, held, lo: datetime, hi: datetime, cut) -> list[Charge]:
    """``charges`` over [lo, hi) from the rows and allocations of a read that covers it."""
    out = []
    for pk, count, start, end, ended, model_id, user, status, borrowed, priority in rows:
        if not (start < hi and end > lo and (ended is None or ended > lo)):
            continue
        stop = min(end, ended) if ended else end
        if cut and pk == cut[0]:
            stop = min(stop, cut[1])
        windows = [(max(s, start), min(e, stop)) for s, e in held.get(pk, []) if s < hi]
        if status == LeaseStatus.QUEUED or not windows:
            windows = [(start, stop)] * count
        for s, e in windows:
            if e > s:
                out.append(Charge(pk, 1, s, e, model_id, user, status, borrowed, priority))
    return _merged(out)


def _merged(charges_: list[Charge]) -> list[Charge]:
    """Equal windows of one lease as one charge of their count (fewer price-book sums)."""
    merged: dict[tuple, int] = {}
    for c in charges_:
        key = (
            c.lease_id,
            c.start,
            c.end,
            c.card_model_id,
            c.user_id,
            c.status,
            c.borrowed,
            c.priority,
        )
        merged[key] = merged.get(key, 0) + c.count
    return [Charge(k[0], n, k[1], k[2], k[3], k[4], k[5], k[6], k[7]) for k, n in merged.items()]


def charge_money(charge: Charge, books: PriceBooks, lo: datetime, hi: datetime) -> Decimal:
    """What a charge costs inside [lo, hi), at the price book's prices (the one price rule)."""
    return books.cost(
        card_model_id=charge.card_model_id,
        count=charge.count,
        start=max(charge.start, lo),
        end=min(charge.end, hi),
        priority=charge.priority,
    )


def month_usage(
    team_id: int,
    month: tuple[datetime, datetime],
    *,
    card_model_id: int | None = None,
    user_id: int | None = None,
    cut: tuple[int, datetime] | None = None,
) -> tuple[Decimal, Decimal]:
    """(card-hours, money) the team (or one member) has used or booked in *month*."""
    lo, hi = month
    hours = money = Decimal(0)
    books = PriceBooks(team_id=team_id, until=hi)
    for c in charges(team_id, lo, hi, card_model_id=card_model_id, user_id=user_id, cut=cut):
        hours += c.count * overlap_hours(c.start, c.end, lo, hi)
        money += charge_money(c, books, lo, hi)
    return hours, money


def concurrent_use(
    team_id: int,
    start: datetime,
    end: datetime,
    *,
    card_model_id: int | None = None,
    user_id: int | None = None,
    exclude: int | None = None,
) -> tuple[int, datetime | None]:
    """Cards the team holds over [start, end) or waits for, and when the earliest held ones free up.

    Waiting leases count whatever their window (they were admitted); borrowed leases do not
    (they live on idle capacity and may be preempted); *exclude* (a lease being replaced) does
    not either.
    """
    leases = _leases(team_id, card_model_id=card_model_id, user_id=user_id).filter(borrowed=False)
    if exclude is not None:
        leases = leases.exclude(pk=exclude)
    held = leases.filter(status__in=BOOKED_STATES, start_at__lt=end, end_at__gt=start)
    waiting = leases.filter(status=LeaseStatus.QUEUED)
    rows = list(held.values_list("count", "end_at")) + [
        (n, None) for n in waiting.values_list("count", flat=True)
    ]
    frees = [e for _, e in rows if e is not None]
    return sum(n for n, _ in rows), (min(frees) if frees else None)


@dataclass(frozen=True)
class Breach:
    """A limit a request would break: kept as parameters (JSON), worded for whoever reads it
    (``notify.messages.breach_text``: the limit, what is left, when it frees or renews)."""

    scope: str  # "team" or "member"
    limit: str  # max_concurrent_cards | card_hours_per_month | max_lease_hours | money_per_month
    params: dict

    @property
    def message(self) -> str:
        return breach_text(self.limit, self.params)

    def stored(self) -> dict:
        return {"scope": self.scope, "limit": self.limit, "params": self.params}


def _hours(value: Decimal) -> str:
    return str(value.quantize(TENTH, rounding=ROUND_HALF_UP))


def _check(*, scope: str, rule, who: dict, ask: Ask, user_id: int | None) -> list[Breach]:
    breaches = []
    team, count, start, end = ask.team, ask.count, ask.start, ask.end
    model_id = rule.card_model_id
    # What is asked (a request, an extension, a resize) words the breach: an extension adds
    # no cards, a resize only those it adds (``notify.messages.breach_text``).
    base = {**who, "model": rule.card_model.name if rule.card_model else "", "ask": ask.kind}
    if rule.max_lease_hours is not None and ask.length is not None:
        if ask.length > rule.max_lease_hours * HOUR:
            params = {**base, "max": rule.max_lease_hours}
            if ask.kind == "extend":
                params["hours"] = _hours(Decimal(ask.length / HOUR))
            breaches.append(Breach(scope, "max_lease_hours", params))
    if rule.max_concurrent_cards is not None:
        used, frees = concurrent_use(
            team.pk, start, end, card_model_id=model_id, user_id=user_id, exclude=ask.replaces
        )
        if used + count > rule.max_concurrent_cards:
            params = {
                **base,
                "limit": rule.max_concurrent_cards,
                "used": used,
                "left": max(rule.max_concurrent_cards - used, 0),
                # an extension keeps the lease's cards longer and adds none
                "count": 0 if ask.kind == "extend" else count,
                "frees": frees.isoformat() if frees is not None else None,
            }
            if ask.kind == "extend":
                params["kept"] = count
            breaches.append(Breach(scope, "max_concurrent_cards", params))
    budget = rule.card_hours_per_month
    money = getattr(rule, "money_per_month", None)
    if budget is not None or money is not None:
        cut = (ask.replaces, start) if ask.replaces else None
        for month in months_between(start, end):
            need = count * overlap_hours(start, end, *month)
            used_hours, used_money = month_usage(
                team.pk, month, card_model_id=model_id, user_id=user_id, cut=cut
            )
            when = {
                "month": f"{month[0].astimezone(site_tz()):%Y-%m}",
                "renew": f"{month[1].astimezone(site_tz()):%Y-%m-%d}",
            }
            if budget is not None and used_hours + need > budget:
                params = {
                    **base,
                    **when,
                    "left": _hours(max(budget - used_hours, Decimal(0))),
                    "limit": _hours(budget),
                    "need": _hours(need),
                }
                breaches.append(Breach(scope, "card_hours_per_month", params))
            if money is not None:
                cost = estimate(
                    card_model=ask.card_model,
                    team_id=team.pk,
                    count=count,
                    start=max(start, month[0]),
                    end=min(end, month[1]),
                    priority=ask.priority,
                )
                if used_money + cost > money:
                    params = {
                        **base,
                        **when,
                        "left": str(max(money - used_money, Decimal(0)).quantize(CENT)),
                        "limit": str(money),
                        "cost": str(cost),
                    }
                    breaches.append(Breach(scope, "money_per_month", params))
    return breaches


def _team_rules(team_id: int, card_model_id: int):
    """The team's quotas that cover the card model: its own and the all-models one."""
    return Quota.objects.filter(team_id=team_id).filter(
        Q(card_model__isnull=True) | Q(card_model_id=card_model_id)
    )


def _member_rules(team_id: int, user_id: int, card_model_id: int):
    """The member's limits in the team that cover the card model."""
    return MemberLimit.objects.filter(
        membership__team_id=team_id, membership__user_id=user_id
    ).filter(Q(card_model__isnull=True) | Q(card_model_id=card_model_id))


def _rules_found(team: int, user: int, model: int):
    return (
        Team.objects.filter(pk=team)
        .annotate(
            quota=Exists(_team_rules(team, model)),
            limit=Exists(_member_rules(team, user, model)),
        )
        .values_list("quota", "limit")[:1]
    )


def rules_apply(*, team: Team, user, card_model: CardModel) -> bool:
    """Whether any team quota or member limit covers a request of *user* for *card_model*
    (one statement, built once per process: every request asks)."""
    found = statements.rows(
        "quotas.rules_apply", _rules_found, team=team.pk, user=user.pk, model=card_model.pk
    )
    return bool(found and any(found[0]))


def admission_breaches(ask: Ask) -> list[Breach]:
    """Every team and member limit *ask* would break (empty: it fits)."""
    breaches: list[Breach] = []
    team, user = ask.team, ask.user
    for rule in _team_rules(team.pk, ask.card_model.pk).select_related("card_model"):
        breaches += _check(scope="team", rule=rule, who={"team": team.name}, ask=ask, user_id=None)
    for rule in _member_rules(team.pk, user.pk, ask.card_model.pk).select_related("card_model"):
        # read by the lead who decides, and by the requester
        breaches += _check(
            scope="member", rule=rule, who={"user": user.get_username()}, ask=ask, user_id=user.pk
        )
    return breaches


BUDGET_LEVELS = ((100, "budget_100"), (80, "budget_80"))


def budget_alerts(*, team: Team, card_model_id: int, now: datetime) -> int:
    """Tell the team's leads when a monthly budget (card-hours or money) this request touched
    reaches 80% or 100%: once per rule, month and level (the notification key)."""
    month = month_of(now)
    rules = Quota.objects.filter(team=team).filter(
        Q(card_model__isnull=True) | Q(card_model_id=card_model_id)
    )
    sent = 0
    for rule in rules.select_related("card_model"):
        hours, money = month_usage(team.pk, month, card_model_id=rule.card_model_id)
        for used, limit, unit in (
            (hours, rule.card_hours_per_month, "h"),
            (money, rule.money_per_month, currency()),
        ):
            if not limit:
                continue
            share = used * 100 / limit
            for level, kind in BUDGET_LEVELS:
                if share < level:
                    continue
                params = {
                    "team": team.name,
                    "pct": level,
                    "month": f"{month[0]:%Y-%m}",
                    "model": rule.card_model.name if rule.card_model else "",
                    "used": _hours(used),
                    "limit": _hours(Decimal(limit)),
                    "unit": unit,
                }
                notify_team_leads(
                    team=team,
                    kind=kind,
                    title="",
                    url=f"/teams/{team.slug}/",
                    data={"message": "budget", "params": params},
                    now=now,
                    key=f"budget:{rule.pk}:{unit}:{month[0]:%Y-%m}:{level}",
                    word=lambda lead, params=params: render(
                        "budget", params, language=person_language(lead), zone=holder_zone(lead)
                    ),
                )
                sent += 1
                break  # the highest level reached is the one to tell
    return sent
