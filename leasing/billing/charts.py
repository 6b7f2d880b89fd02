"""Plotly figures for the reports page: card-hours by team per day, top users."""

from __future__ import annotations

from datetime import date, timedelta
from html import escape  # plotly renders a little HTML in labels; names are user data

import plotly.graph_objects as go
from django.db.models import F, Sum
from django.db.models.functions import TruncDay
from django.utils.translation import gettext as _

from leasing.billing import reports
from leasing.periods import local_date, site_tz
from portal import charts

TOP_USERS = 10


def team_days(f: reports.ReportFilter) -> str:
    """Stacked bars: card-hours per day (the day a record starts), one colour per team."""
    rows = (
        reports.records(f)
        .values(day=TruncDay("start_at", tzinfo=site_tz()), key=F("team_id"))
        .annotate(card_minutes=Sum("card_minutes"))
        .order_by("day", "key")
    )
    per_team: dict[int, dict[date, float]] = {}
    for row in rows:
        day = local_date(row["day"])
        per_team.setdefault(row["key"], {})[day] = float(reports.hours(row["card_minutes"]))
    if not per_team:
        return ""
    names = reports.labels("team", per_team)
    days = [f.start + timedelta(days=i) for i in range((f.end - f.start).days + 1)]
    fig = go.Figure()
    for key, per_day in sorted(per_team.items(), key=lambda kv: str(names.get(kv[0]))):
        fig.add_bar(
            name=escape(names.get(key, str(key))),
            x=[d.isoformat() for d in days],
            y=[per_day.get(d, 0) for d in days],
        )
    fig.update_xaxes(type="category")
    return charts.render(fig, height=320, y_title=_("card-hours"), stack=True)


def top_users(f: reports.ReportFilter) -> str:
    """Horizontal bars: the users with the most card-hours in the filter."""
    rows = list(
        reports.records(f)
        .values(key=F("user_id"))
        .annotate(card_minutes=Sum("card_minutes"), cost=Sum("cost"))
        .order_by("-card_minutes", "key")[:TOP_USERS]
    )
    if not rows:
        return ""
    names = reports.labels("user", [r["key"] for r in rows])
    rows.reverse()  # largest on top
    fig = go.Figure()
    fig.add_bar(
        orientation="h",
        x=[float(reports.hours(r["card_minutes"])) for r in rows],
        y=[escape(names.get(r["key"], str(r["key"]))) for r in rows],
        customdata=[float(r["cost"]) for r in rows],
        hovertemplate="%{y}: %{x} " + _("card-hours") + " · ¥%{customdata:,.2f}<extra></extra>",
        name=_("card-hours"),
    )
    fig.update_xaxes(gridcolor=charts.GRID, title=_("card-hours"))
    fig.update_layout(showlegend=False)
    return charts.render(fig, height=max(200, 40 + 28 * len(rows)))
