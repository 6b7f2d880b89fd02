"""How busy a lease's cards have been: the chart and the max / average on the lease page.

The readings are the inventory's (``inventory.telemetry``, per card); which cards a lease
held, and when, is the allocations'.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import plotly.graph_objects as go
from django.utils import timezone
from django.utils.translation import gettext as _

from inventory.charts import readings_charts
from inventory.models import Card
from inventory.selectors import DEFAULT_MAX_GAP, card_series, utilization_stats
from leasing.choices import LeaseStatus
from leasing.models import Allocation, Lease
from portal import charts

CHART_HOURS = 24


def lease_card_windows(
    lease: Lease, since: datetime, until: datetime
) -> list[tuple[Card, datetime, datetime]]:
    """The lease's cards with the part of [since, until] each was allocated to it."""
    allocations = Allocation.objects.filter(
        lease=lease, start_at__lt=until, end_at__gt=since
    ).select_related("card__node")
    return [(a.card, max(since, a.start_at), min(until, a.end_at)) for a in allocations]


def lease_utilization_stats(
    lease: Lease, *, since: datetime, until: datetime, max_gap: timedelta = DEFAULT_MAX_GAP
) -> dict:
    """``utilization_stats`` for the cards the lease held during the window."""
    card_ids = [card.pk for card, _start, _end in lease_card_windows(lease, since, until)]
    return utilization_stats(card_ids, since, until, max_gap=max_gap)


def lease_series(
    lease: Lease, since: datetime, until: datetime | None = None, *, max_points: int = 360
) -> list[dict]:
    """Utilisation over time of each card of the lease (``card_series``). Three queries."""
    until = until or timezone.now()
    windows = lease_card_windows(lease, since, until)
    return card_series(windows, since, until, max_points=max_points)


def utilisation_chart(series: list[dict], since: datetime, until: datetime) -> str:
    """A line per card, utilisation in %, over [since, until] (a silent stretch shows as a
    gap)."""
    fig = go.Figure()
    for card in series:
        fig.add_scatter(
            name=card["label"],
            mode="lines",
            x=[charts.local_time(at, seconds=True) for at, _v in card["points"]],
            y=[round(value, 1) for _at, value in card["points"]],
        )
    fig.update_xaxes(
        range=[charts.local_time(since, seconds=True), charts.local_time(until, seconds=True)]
    )
    fig.update_yaxes(range=[0, 100])
    return charts.render(fig, height=260, y_title=_("utilisation (%)"))


def lease_utilisation_context(lease: Lease, *, now: datetime | None = None) -> dict:
    """What templates/leasing/_utilisation.html shows: the chart of the last CHART_HOURS of
    the lease's holding, and its max / average utilisation."""
    now = now or timezone.now()
    until = min(now, lease.ended_at or lease.end_at)
    since = max(lease.activated_at or lease.start_at, until - timedelta(hours=CHART_HOURS))
    context: dict = {"chart": "", "stats": None, "since": since, "live": False, "readings": []}
    if since >= until:
        return context
    context["live"] = lease.status == LeaseStatus.ACTIVE
    series = lease_series(lease, since, until)
    if any(card["points"] for card in series):
        context["chart"] = utilisation_chart(series, since, until)
        context["stats"] = lease_utilization_stats(lease, since=since, until=until)
    # Temperature, power and memory beside it: a hot or throttling card explains a slow job.
    context["readings"] = readings_charts(lease_card_windows(lease, since, until), since, until)
    return context
