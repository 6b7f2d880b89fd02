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

from inventory.models import Card, CardModel
from leasing.lifecycle.selectors import leases_visible_to
from leasing.scheduler import picture as picture_kinds
from leasing.scheduler.picture import Booking, Picture, model_picture
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
    """Rows (the model's cards in service, by node and index; ``NODES_PER_PAGE`` nodes from
    *page* on), and over [start, end) the bars of the model's one picture of the future
    (``scheduler.picture``): held and reserved (``booked``), planned for a waiting request
    (``planned``), maintenance or unhealthy (``unavailable``), and the free stretches between
    them (``free``). A free stretch starts on the hour (or now), so the form gets a time a
    person would type; leases the plan has not put on cards yet are ``re_estimating``."""
    hostnames = sorted(
        set(
            Card.objects.in_service()
            .filter(card_model=card_model)
            .values_list("node__hostname", flat=True)
        )
    )
    pages = max(1, -(-len(hostnames) // NODES_PER_PAGE))
    page = min(max(page, 1), pages)
    shown = hostnames[(page - 1) * NODES_PER_PAGE : page * NODES_PER_PAGE]
    now = timezone.now()
    picture = model_picture(
        card_model.pk, start=start, end=end, now=max(now, start), hostnames=shown
    )
    rows = [_row(c.hostname, c.index) for c in picture.cards]
    row_of = {c.card_id: _row(c.hostname, c.index) for c in picture.cards}
    seen = seen_leases(user, picture)
    booked: list[Bar] = []
    planned: list[Bar] = []
    unavailable: list[Bar] = []
    for card_id, bookings in picture.bookings.items():
        for b in bookings:
            bar = Bar(row_of[card_id], b.start, b.end, *_label(b, seen))
            if b.kind in (picture_kinds.HELD, picture_kinds.RESERVED):
                booked.append(bar)
            elif b.kind == picture_kinds.PLANNED:
                planned.append(bar)
            else:
                unavailable.append(bar)
    free: list[Bar] = []
    for card in picture.cards:
        for gap_start, gap_end in picture.free_stretches(card.card_id):
            gap_start = gap_start if gap_start <= start else _next_hour(gap_start)
            if gap_end - gap_start >= SHORTEST_FREE:
                free.append(
                    Bar(
                        row_of[card.card_id],
                        gap_start,
                        gap_end,
                        _("free: click to reserve"),
                        _reserve_url(card_model, gap_start, start),
                    )
                )
    return {
        "rows": rows,
        "booked": booked,
        "planned": planned,
        "unavailable": unavailable,
        "free": free,
        "re_estimating": picture.re_estimating,
        "start": start,
        "end": end,
        "page": page,
        "pages": pages,
        "nodes": len(hostnames),
    }


def seen_leases(user, picture: Picture) -> dict[int, tuple[str, str]]:
    """The leases of *picture* the user may see (their own; a lead, the team's; finance and
    operators, all): lease id → (holder's username, status). One query."""
    ids = {b.lease_id for bs in picture.bookings.values() for b in bs if b.lease_id}
    ids |= {r.lease_id for r in picture.re_estimating}
    if not ids:
        return {}
    return {
        pk: (username, status)
        for pk, username, status in leases_visible_to(user)
        .filter(pk__in=ids)
        .values_list("pk", "user__username", "status")
    }


def _label(b: Booking, seen: dict[int, tuple[str, str]]) -> tuple[str, str]:
    """A bar's label and link for its reader: the lease and holder only where they may see it."""
    if b.kind == picture_kinds.MAINTENANCE:
        return _("maintenance or drain"), ""
    if b.kind == picture_kinds.UNHEALTHY:
        return _("unhealthy: kept out of placement"), ""
    if b.lease_id not in seen:
        if b.kind == picture_kinds.PLANNED:
            return _("planned for a waiting request"), ""
        return _("booked"), ""
    user, _status = seen[b.lease_id]
    url = reverse("leasing:detail", args=[b.lease_id])
    if b.kind == picture_kinds.PLANNED:
        return _("planned for waiting lease %(id)s · %(user)s") % {
            "id": b.lease_id,
            "user": user,
        }, url
    label = _("lease %(id)s · %(user)s") % {"id": b.lease_id, "user": user}
    if b.kind == picture_kinds.RESERVED:
        label += " · " + _("reserved")
    return label, url


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
    # after the two always there (booked, free), and only when there are any
    if timeline["planned"]:
        _trace(fig, timeline["planned"], name=_("planned for a waiting request"), colour="#f59e0b")
    if timeline["unavailable"]:
        _trace(fig, timeline["unavailable"], name=_("maintenance or unhealthy"), colour="#9ca3af")
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
