"""The one way a plotly figure becomes part of a page (plotly.js is served locally:
static/vendor/plotly.min.js, loaded only by pages that draw a chart). A leaf: imports only
plotly and Django, so every app's pages can use it.
"""

from __future__ import annotations

import json
import re
import zlib
from collections.abc import Iterable
from datetime import date, datetime
from decimal import Decimal
from html import escape  # plotly renders a little HTML in labels; names are user data

import plotly.graph_objects as go
from django.utils import timezone
from django.utils.html import format_html
from django.utils.translation import gettext as _

FONT = "PingFang SC, Microsoft YaHei, Noto Sans CJK SC, sans-serif"
GRID = "#e5e7eb"
CONFIG = {"displaylogo": False, "responsive": True}

# One colour per card model, on every chart (``inventory.charts.model_colours``): Tableau's
# ten (chosen to be told apart) and six dark ones told apart from them by lightness.
PALETTE = (
    "#4e79a7",  # blue
    "#f28e2b",  # orange
    "#e15759",  # red
    "#76b7b2",  # teal
    "#59a14f",  # green
    "#edc948",  # yellow
    "#b07aa1",  # purple
    "#ff9da7",  # pink
    "#9c755f",  # brown
    "#bab0ac",  # grey
    "#1e3a8a",  # navy
    "#14532d",  # dark green
    "#7f1d1d",  # dark red
    "#4c1d95",  # dark violet
    "#854d0e",  # dark ochre
    "#111827",  # near black
)


def colours(keys: Iterable[str]) -> dict[str, str]:
    """A colour per key, the same whatever chart or range asks: each key takes the palette
    slot its name hashes to (crc32, the same in every process), or the next free one when a
    key before it in *keys* took that slot. Keys share a colour only when there are more
    keys than colours; give the same keys in the same order for the same answer."""
    out: dict[str, str] = {}
    taken: set[int] = set()
    for key in keys:
        slot = zlib.crc32(key.encode()) % len(PALETTE)
        for step in range(len(PALETTE)):
            if (slot + step) % len(PALETTE) not in taken:
                slot = (slot + step) % len(PALETTE)
                break
        taken.add(slot)
        out[key] = PALETTE[slot]
    return out


def render(
    fig: go.Figure,
    *,
    height: int = 280,
    y_title: str | None = None,
    stack: bool = False,
    titled: bool = False,
    y_from_zero: bool = False,
) -> str:
    """The figure as an HTML fragment in the portal's look: white, a CJK-capable font, the
    legend under the plot, light grid lines. *titled* leaves room for a figure title."""
    fig.update_layout(
        margin={"l": 50, "r": 10, "t": 30 if titled else 10, "b": 40},
        height=height,
        legend={"orientation": "h", "y": -0.25},
        plot_bgcolor="white",
        paper_bgcolor="white",
        font={"family": FONT},
    )
    _numeric_time_axes(fig)
    if stack:
        fig.update_layout(barmode="stack")
    if y_title is not None:
        fig.update_yaxes(gridcolor=GRID, title=y_title)
    if y_from_zero:
        fig.update_yaxes(rangemode="tozero")
    # Data, not a script: static/js/charts.js draws every such div (the CSP allows no inline
    # script). conditional_escape makes the JSON safe inside the attribute.
    return format_html(
        '<div class="plotly-chart" data-figure="{}" data-config="{}"></div>',
        fig.to_json(),
        json.dumps(CONFIG),
    )


TIME_VALUE = re.compile(r"^\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}")


def _numeric_time_axes(fig: go.Figure) -> None:
    """A time axis writes its ticks in numbers (09:00 / 12-01) in every language: plotly.js
    would write "Dec 1, 2026" — or "十二 1, 2026" with its zh-CN locale — on its own. Axes
    that already say how to write their ticks keep it."""
    for trace in fig.data:
        values = getattr(trace, "x", None)
        first = next((v for v in (values or ()) if v is not None), None)
        is_time = isinstance(first, datetime) or (
            isinstance(first, str) and TIME_VALUE.match(first)
        )
        if not is_time:
            continue
        axis = fig.layout[f"xaxis{(getattr(trace, 'xaxis', None) or 'x')[1:]}"]
        if axis.type in (None, "-", "date") and not axis.tickformat:
            axis.update(tickformat="%H:%M<br>%m-%d", hoverformat="%Y-%m-%d %H:%M")


def local_time(at: datetime, *, seconds: bool = False) -> str:
    """Wall-clock time in the viewer's zone (plotly.js has no time zones)."""
    return timezone.localtime(at).strftime("%Y-%m-%d %H:%M:%S" if seconds else "%Y-%m-%d %H:%M")


def daily_card_hours(
    daily: dict[str, dict[date, Decimal]],
    days: list[date],
    colour_of: dict[str, str] | None = None,
) -> str:
    """Stacked bars: card-hours per day, one colour per series (card model, team…): the
    series' colour in *colour_of* where it has one."""
    fig = go.Figure()
    for name, per_day in sorted(daily.items()):
        fig.add_bar(
            name=escape(name),
            x=[d.isoformat() for d in days],
            y=[float(per_day.get(d, 0)) for d in days],
            marker_color=(colour_of or {}).get(name),
        )
    fig.update_xaxes(type="category")  # whole days, never zoomed into milliseconds
    fig.update_layout(showlegend=True)  # name the series even when there is only one
    return render(fig, y_title=_("card-hours"), stack=True)
