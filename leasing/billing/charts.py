"""Plotly figures for the reports page: card-hours by team per day, top users; recorded
usage and the usage accrued by running leases, named apart."""

from __future__ import annotations

from datetime import date, timedelta
from decimal import Decimal
from html import escape  # plotly renders a little HTML in labels; names are user data

import plotly.graph_objects as go
from django.db.models import F, Sum
from django.db.models.functions import TruncDay
from django.utils.translation import gettext as _

from leasing.billing import accrued, prices, reports
from leasing.periods import local_date, site_tz
from portal import charts

TOP_USERS = 10


def team_days(f: reports.ReportFilter, pieces: list | None = None) -> str:
    """Stacked bars: card-hours per day (the day a record starts), one colour per team; the
    accrued usage of running leases (*pieces*, from ``accrued.accrued_pieces``) stacked on
    top in hatched bars of its own, named as such."""
    rows = (
        reports.records(f)
        .values(day=TruncDay("start_at", tzinfo=site_tz()), key=F("team_id"))
        .annotate(card_minutes=Sum("card_minutes"))
        .order_by("day", "key")
    )
    series: dict[tuple[str, int], dict[date, float]] = {}
    for row in rows:
        per_day = series.setdefault((accrued.RECORDED, row["key"]), {})
        per_day[local_date(row["day"])] = float(reports.hours(row["card_minutes"]))
    minutes: dict[tuple[int, date], int] = {}
    for piece in pieces or []:
        day = accrued.period_of(piece, "day")
        minutes[(piece.team_id, day)] = minutes.get((piece.team_id, day), 0) + piece.card_minutes
    for (team, day), m in minutes.items():
        series.setdefault((accrued.ACCRUED, team), {})[day] = float(reports.hours(m))
    if not series:
        return ""
    names = reports.labels("team", {team for _kind, team in series})
    days = [f.start + timedelta(days=i) for i in range((f.end - f.start).days + 1)]
    x = [d.isoformat() for d in days]
    bars = []
    for (kind, key), per_day in sorted(
        series.items(), key=lambda kv: (kv[0][0] == accrued.ACCRUED, str(names.get(kv[0][1])))
    ):
        name = escape(names.get(key, str(key)))
        if kind == accrued.ACCRUED:
            name = f"{name} · {escape(str(accrued.USAGE_LABELS[kind]))}"
        bars.append(
            {
                "type": "bar",
                "name": name,
                "x": x,
                "y": [per_day.get(d, 0) for d in days],
                "marker": {"pattern": {"shape": "/" if kind == accrued.ACCRUED else ""}},
            }
        )
    # The bars handed over as one list: add_bar builds and checks each trace twice, which
    # with a bar per team and kind (120 for 60 teams) was most of the chart's time.
    fig = go.Figure(data=bars)
    fig.update_xaxes(type="category")
    return charts.render(fig, height=320, y_title=_("card-hours"), stack=True)


def top_users(f: reports.ReportFilter, pieces: list | None = None) -> str:
    """Horizontal bars: the users with the most card-hours in the filter, recorded and
    accrued (running leases) stacked and named apart."""
    totals: dict[int, dict[str, list]] = {}
    for row in (
        reports.records(f)
        .values(key=F("user_id"))
        .annotate(card_minutes=Sum("card_minutes"), cost=Sum("cost"))
        .order_by("-card_minutes", "key")
    ):
        totals[row["key"]] = {accrued.RECORDED: [row["card_minutes"], row["cost"]]}
    for piece in pieces or []:
        kinds = totals.setdefault(piece.user_id, {})
        acc = kinds.setdefault(accrued.ACCRUED, [0, Decimal(0)])
        acc[0] += piece.card_minutes
        acc[1] += piece.cost
    if not totals:
        return ""
    top = sorted(totals, key=lambda u: (-sum(v[0] for v in totals[u].values()), u))[:TOP_USERS]
    names = reports.labels("user", top)
    top.reverse()  # largest on top
    fig = go.Figure()
    for kind in (accrued.RECORDED, accrued.ACCRUED):
        values = [totals[u].get(kind, [0, 0]) for u in top]
        if not any(v[0] for v in values):
            continue
        fig.add_bar(
            orientation="h",
            x=[float(reports.hours(v[0])) for v in values],
            y=[escape(names.get(u, str(u))) for u in top],
            customdata=[float(v[1]) for v in values],
            hovertemplate="%{y}: %{x} "
            + _("card-hours")
            + f" · {escape(prices.currency())} %{{customdata:,.2f}}<extra></extra>",
            name=escape(str(accrued.USAGE_LABELS[kind])),
            marker_pattern_shape="/" if kind == accrued.ACCRUED else "",
        )
    fig.update_xaxes(gridcolor=charts.GRID, title=_("card-hours"))
    return charts.render(fig, height=max(200, 40 + 28 * len(top)), stack=True)
