"""Plotly figures rendered into pages (plotly.js itself is served locally: vendor/plotly.min.js)."""

from __future__ import annotations

from datetime import date
from decimal import Decimal
from html import escape  # plotly renders a little HTML in labels; names are user data

import plotly.graph_objects as go
from django.utils.translation import gettext as _


def _html(fig: go.Figure) -> str:
    fig.update_layout(
        margin={"l": 40, "r": 10, "t": 10, "b": 40},
        height=280,
        barmode="stack",
        legend={"orientation": "h", "y": -0.2},
        showlegend=True,
        plot_bgcolor="white",
        paper_bgcolor="white",
        font={"family": "PingFang SC, Microsoft YaHei, Noto Sans CJK SC, sans-serif"},
    )
    fig.update_yaxes(gridcolor="#e5e7eb", title=_("card-hours"))
    fig.update_xaxes(type="category")  # whole days, never zoomed into milliseconds
    return fig.to_html(
        full_html=False, include_plotlyjs=False, config={"displaylogo": False, "responsive": True}
    )


def daily_card_hours(daily: dict[str, dict[date, Decimal]], days: list[date]) -> str:
    """Stacked bars: card-hours per day, one colour per card model."""
    fig = go.Figure()
    for name, per_day in sorted(daily.items()):
        fig.add_bar(
            name=escape(name),
            x=[d.isoformat() for d in days],
            y=[float(per_day.get(d, 0)) for d in days],
        )
    return _html(fig)
