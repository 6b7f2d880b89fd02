"""The pool's timeline (a Gantt chart, as OpenStack Horizon + Blazar show hosts' leases): one
row per card of a model, its bookings over the next days as bars, and the free stretches
between them as bars that open the request form for a reservation from that moment.

The viewer sees the lease number and holder of the leases they may see (their own; a lead,
the team's; finance and operators, all) and only "booked" for the others.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from html import escape  # plotly renders a little HTML in hover text; names are user data
from urllib.parse import urlencode

import plotly.graph_objects as go
from django.urls import reverse
from django.utils import timezone
from django.utils.translation import gettext as _

from inventory.models import CardModel
from leasing.choices import RUNNING_STATES
from leasing.lifecycle.selectors import leases_visible_to
from leasing.models import Allocation
from leasing.scheduler.availability import usable_cards
from portal import charts

# A free stretch shorter than this is not worth offering as a reservation.
SHORTEST_FREE = timedelta(hours=1)
HOUR = timedelta(hours=1)


@dataclass(frozen=True)
class Bar:
    """One bar: a card's row, a period, what it is, and the page a click opens ("" none)."""

    row: str
    start: datetime
    end: datetime
    label: str
    url: str = ""


def _row(hostname: str, index: int) -> str:
    return f"{hostname} #{index}"


def _reserve_url(card_model: CardModel, start: datetime, now: datetime) -> str:
    query = {"card_model": card_model.slug}
    if start > now + timedelta(minutes=1):
        query |= {
            "start": "later",
            "start_at": timezone.localtime(start).strftime("%Y-%m-%dT%H:%M"),
        }
    return f"{reverse('leasing:new')}?{urlencode(query)}"


# A compute centre has hundreds of nodes of a model: the chart shows this many at a time.
NODES_PER_PAGE = 8


def pool_timeline(
    card_model: CardModel, *, user, start: datetime, end: datetime, page: int = 1
) -> dict:
    """Rows (cards that can take a lease, by node and index; ``NODES_PER_PAGE`` nodes from
    *page* on), booked bars and free bars over [start, end). A free stretch starts on the hour
    (or now), so the form gets a time a person would type."""
    usable = usable_cards(start).filter(card_model=card_model)
    hostnames = sorted(set(usable.values_list("node__hostname", flat=True)))
    pages = max(1, -(-len(hostnames) // NODES_PER_PAGE))
    page = min(max(page, 1), pages)
    shown = hostnames[(page - 1) * NODES_PER_PAGE : page * NODES_PER_PAGE]
    cards = list(
        usable.filter(node__hostname__in=shown)
        .select_related("node")
        .order_by("node__hostname", "index")
    )
    rows = [_row(c.node.hostname, c.index) for c in cards]
    row_of = {c.pk: _row(c.node.hostname, c.index) for c in cards}
    allocations = (
        Allocation.objects.filter(card_id__in=row_of, end_at__gt=start, start_at__lt=end)
        .select_related("lease__user")
        .order_by("card_id", "start_at")
    )
    visible = set(
        leases_visible_to(user)
        .filter(card_model=card_model, allocations__end_at__gt=start)
        .values_list("pk", flat=True)
    )
    booked: list[Bar] = []
    busy: dict[int, list[tuple[datetime, datetime]]] = {c.pk: [] for c in cards}
    for a in allocations:
        lease = a.lease
        if lease.pk in visible:
            label = _("lease %(id)s · %(user)s") % {"id": lease.pk, "user": lease.user.username}
            url = reverse("leasing:detail", args=[lease.pk])
        else:
            label, url = _("booked"), ""
        if lease.status not in RUNNING_STATES and lease.pk in visible:
            label += " · " + _("reserved")
        booked.append(
            Bar(row_of[a.card_id], max(a.start_at, start), min(a.end_at, end), label, url)
        )
        busy[a.card_id].append((a.start_at, a.end_at))
    free: list[Bar] = []
    for card in cards:
        until = card.node.drain_at if card.node.drain_at else end
        t = start
        for b_start, b_end in [*sorted(busy[card.pk]), (min(until, end), end)]:
            gap_start = t if t <= start else _next_hour(t)
            if b_start - gap_start >= SHORTEST_FREE:
                free.append(
                    Bar(
                        row_of[card.pk],
                        gap_start,
                        b_start,
                        _("free: click to reserve"),
                        _reserve_url(card_model, gap_start, start),
                    )
                )
            t = max(t, b_end)
    return {
        "rows": rows,
        "booked": booked,
        "free": free,
        "start": start,
        "end": end,
        "page": page,
        "pages": pages,
        "nodes": len(hostnames),
    }


def _next_hour(t: datetime) -> datetime:
    local = timezone.localtime(t)
    whole = local.replace(minute=0, second=0, microsecond=0)
    return whole if whole == local else whole + HOUR


def _trace(fig: go.Figure, bars: list[Bar], *, name: str, colour: str) -> None:
    fig.add_bar(
        name=name,
        orientation="h",
        y=[b.row for b in bars],
        base=[charts.local_time(b.start) for b in bars],
        x=[(b.end - b.start) / timedelta(milliseconds=1) for b in bars],
        hovertext=[
            f"{escape(b.label)}<br>{charts.local_time(b.start)} → {charts.local_time(b.end)}"
            for b in bars
        ],
        hoverinfo="text",
        customdata=[b.url for b in bars],
        marker={"color": colour},
    )


def timeline_chart(timeline: dict) -> str:
    """The timeline as a plotly figure (horizontal bars on a time axis, cards top to bottom)."""
    fig = go.Figure()
    _trace(fig, timeline["booked"], name=_("booked"), colour="#2563eb")
    _trace(fig, timeline["free"], name=_("free: click to reserve"), colour="#bbf7d0")
    fig.update_xaxes(
        type="date",
        range=[charts.local_time(timeline["start"]), charts.local_time(timeline["end"])],
        tickformat="%H:%M<br>%m-%d",  # the same in every language
        gridcolor=charts.GRID,
    )
    fig.update_yaxes(
        type="category",
        categoryorder="array",
        categoryarray=timeline["rows"],
        autorange="reversed",
    )
    fig.update_layout(barmode="overlay", bargap=0.25)
    return charts.render(fig, height=max(220, 26 * len(timeline["rows"]) + 90))
