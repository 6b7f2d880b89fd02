"""The utilisation chart of a lease (an htmx partial on the lease page)."""

from __future__ import annotations

from datetime import datetime, timedelta

import plotly.graph_objects as go
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone
from django.utils.translation import gettext as _

from inventory import telemetry
from leasing.choices import LeaseStatus
from leasing.lifecycle import selectors as lease_selectors
from leasing.models import Lease

CHART_HOURS = 24


def _local(at: datetime) -> str:
    # plotly.js has no time zones: give it wall-clock times in the viewer's zone.
    return timezone.localtime(at).strftime("%Y-%m-%d %H:%M:%S")


def utilisation_chart(series: list[dict], since: datetime, until: datetime) -> str:
    """A line per card, utilisation in %, over [since, until] (a silent stretch shows as a
    gap). Needs plotly.js (static vendor/plotly.min.js) loaded before it."""
    fig = go.Figure()
    for card in series:
        fig.add_scatter(
            name=card["label"],
            mode="lines",
            x=[_local(at) for at, _v in card["points"]],
            y=[round(value, 1) for _at, value in card["points"]],
        )
    fig.update_layout(
        margin={"l": 40, "r": 10, "t": 10, "b": 40},
        height=260,
        legend={"orientation": "h", "y": -0.25},
        plot_bgcolor="white",
        paper_bgcolor="white",
        font={"family": "PingFang SC, Microsoft YaHei, Noto Sans CJK SC, sans-serif"},
    )
    fig.update_xaxes(range=[_local(since), _local(until)])
    fig.update_yaxes(range=[0, 100], gridcolor="#e5e7eb", title=_("utilisation (%)"))
    return fig.to_html(
        full_html=False, include_plotlyjs=False, config={"displaylogo": False, "responsive": True}
    )


def lease_utilisation_context(lease: Lease, *, now: datetime | None = None) -> dict:
    """What templates/leasing/_utilisation.html shows: the chart of the last CHART_HOURS of
    the lease's holding, and its max / average utilisation."""
    now = now or timezone.now()
    until = min(now, lease.ended_at or lease.end_at)
    since = max(lease.activated_at or lease.start_at, until - timedelta(hours=CHART_HOURS))
    context: dict = {"chart": "", "stats": None, "since": since, "live": False}
    if since >= until:
        return context
    context["live"] = lease.status == LeaseStatus.ACTIVE
    series = telemetry.lease_series(lease, since, until)
    if any(card["points"] for card in series):
        context["chart"] = utilisation_chart(series, since, until)
        context["stats"] = telemetry.lease_utilization_stats(lease, since=since, until=until)
    return context


@login_required
def lease_utilisation(request: HttpRequest, pk: int) -> HttpResponse:
    lease = lease_selectors.lease_detail(pk, request.user)
    if lease is None:
        raise Http404
    context = {"lease": lease, "utilisation": lease_utilisation_context(lease)}
    return render(request, "leasing/_utilisation.html", context)
