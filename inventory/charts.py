"""Charts of the cards' readings (utilisation, temperature, power, memory) for the lease and
node pages: one line per card, through the one plotly helper (``portal.charts``); and the
one colour of each card model, which every chart with a series per model uses."""

from __future__ import annotations

from datetime import datetime

import plotly.graph_objects as go
from django.utils.translation import gettext as _

from inventory.models import Card, CardModel
from inventory.selectors import card_series_many
from portal import charts


def model_colours() -> dict[int, str]:
    """Each card model's colour, by id: the same on every chart and over every range
    (``portal.charts.colours`` over the slugs of the models with cards, oldest first, so
    that no two models of the pool share one while the pool has no more models than the
    palette has colours). One query."""
    return {pk: colour for pk, _name, colour in _coloured()}


def model_colours_by_name() -> dict[str, str]:
    """The same colours, by the model's name (the key of charts drawn by name)."""
    return {name: colour for _pk, name, colour in _coloured()}


def _coloured() -> list[tuple[int, str, str]]:
    rows = list(
        CardModel.objects.filter(cards__isnull=False)
        .distinct()
        .order_by("pk")
        .values_list("pk", "slug", "name")
    )
    by_slug = charts.colours(slug for _pk, slug, _name in rows)
    return [(pk, name, by_slug[slug]) for pk, slug, name in rows]


def reading_titles() -> dict[str, str]:
    """Each reading's axis title, in the active language."""
    return {
        "utilization_pct": _("utilisation (%)"),
        "temperature_c": _("temperature (°C)"),
        "power_w": _("power (W)"),
        "memory_used_mb": _("memory used (MiB)"),
    }


def series_chart(series: list[dict], since: datetime, until: datetime, reading: str) -> str:
    """A line per card over [since, until] (a silent stretch shows as a gap)."""
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
    if reading == "utilization_pct":
        fig.update_yaxes(range=[0, 100])
    return charts.render(
        fig, height=240, y_title=reading_titles()[reading], y_from_zero=reading != "temperature_c"
    )


def readings_charts(
    windows: list[tuple[Card, datetime, datetime]],
    since: datetime,
    until: datetime,
    readings: tuple[str, ...] = ("temperature_c", "power_w", "memory_used_mb"),
) -> list[dict]:
    """``[{"reading", "title", "chart"}]`` for each reading some card reported (two queries
    in all)."""
    out = []
    titles = reading_titles()
    every = card_series_many(windows, since, until, readings)
    for reading in readings:
        series = every[reading]
        if any(card["points"] for card in series):
            out.append(
                {
                    "reading": reading,
                    "title": titles[reading],
                    "chart": series_chart(series, since, until, reading),
                }
            )
    return out
