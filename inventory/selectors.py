"""Reads of the inventory that are more than a ``.get``: counts per row, and what the cards'
telemetry says (utilisation over a window, series for a chart).

What is free now depends on the leases too: those reads live in
``leasing.scheduler.availability``; the filters of each list in ``inventory.filters``.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable
from datetime import datetime, timedelta

from django.db.models import Count, IntegerField, OuterRef, QuerySet, Subquery, Value
from django.db.models.functions import Coalesce

from inventory.models import Card, CardHourly, CardSample

# Two readings further apart than this leave a gap: the agent was silent in between.
DEFAULT_MAX_GAP = timedelta(minutes=5)
HOUR = timedelta(hours=1)


def count_per_row(rows: QuerySet, outer_field: str) -> Coalesce:
    """Count of *rows* whose ``outer_field`` is the outer row, as one correlated subquery."""
    counted = (
        rows.filter(**{outer_field: OuterRef("pk")})
        .order_by()
        .values(outer_field)
        .annotate(n=Count("pk"))
        .values("n")
    )
    return Coalesce(Subquery(counted, output_field=IntegerField()), Value(0))


# --- Reads -----------------------------------------------------------------------------------


def _covered(spans: list[tuple[datetime, datetime]], since, until, max_gap) -> bool:
    cursor = since
    for start, end in sorted(spans):
        if start - cursor > max_gap:
            return False
        cursor = max(cursor, end)
    return bool(spans) and until - cursor <= max_gap


def utilization_stats(
    card_ids: Iterable[int],
    since: datetime,
    until: datetime,
    *,
    max_gap: timedelta = DEFAULT_MAX_GAP,
) -> dict:
    """Utilisation of these cards over [since, until], from raw samples and hourly rows.

    Returns ``{"cards": {card_id: {"samples", "max", "avg", "first_at", "last_at",
    "covered"}}, "samples", "max", "avg", "covered"}``. A card is *covered* when its readings
    leave no gap longer than *max_gap* in the window (an hourly row covers its whole hour);
    the result is covered when every card is. Idle detection should act only on a covered
    window: a silent agent is not an idle card. An hourly row that overlaps the window counts
    whole, so its maximum may come from just outside the window (errs towards "busy").
    Two queries, however many cards.
    """
    ids = sorted(set(card_ids))
    values: dict[int, list[tuple[float, int]]] = defaultdict(list)  # (value, weight)
    maxima: dict[int, list[float]] = defaultdict(list)
    spans: dict[int, list[tuple[datetime, datetime]]] = defaultdict(list)
    raw = CardSample.objects.filter(
        card_id__in=ids, at__gte=since, at__lte=until, utilization_pct__isnull=False
    ).values_list("card_id", "at", "utilization_pct")
    for card_id, at, util in raw:
        values[card_id].append((util, 1))
        maxima[card_id].append(util)
        spans[card_id].append((at, at))
    hourly = CardHourly.objects.filter(
        card_id__in=ids,
        hour__gt=since - HOUR,
        hour__lt=until,
        samples__gt=0,
        utilization_max__isnull=False,
    ).values_list("card_id", "hour", "samples", "utilization_avg", "utilization_max")
    for card_id, hour, n, avg, peak in hourly:
        if avg is not None:
            values[card_id].append((avg * n, n))
        maxima[card_id].append(peak)
        spans[card_id].append((hour, hour + HOUR))
    cards = {}
    for card_id in ids:
        weight = sum(n for _value, n in values[card_id])
        total = sum(value for value, _n in values[card_id])
        card_spans = spans[card_id]
        cards[card_id] = {
            "samples": weight,
            "max": max(maxima[card_id]) if maxima[card_id] else None,
            "avg": total / weight if weight else None,
            "first_at": max(since, min(s for s, _e in card_spans)) if card_spans else None,
            "last_at": min(until, max(e for _s, e in card_spans)) if card_spans else None,
            "covered": _covered(card_spans, since, until, max_gap),
        }
    weight = sum(card["samples"] for card in cards.values())
    weighted = sum(card["avg"] * card["samples"] for card in cards.values() if card["samples"])
    peaks = [card["max"] for card in cards.values() if card["max"] is not None]
    return {
        "since": since,
        "until": until,
        "cards": cards,
        "samples": weight,
        "max": max(peaks) if peaks else None,
        "avg": weighted / weight if weight else None,
        "covered": bool(cards) and all(card["covered"] for card in cards.values()),
    }


def _downsample(points: list[tuple[datetime, float]], most: int) -> list[tuple[datetime, float]]:
    if len(points) <= most:
        return points
    size = math.ceil(len(points) / most)
    return [
        (
            points[i][0],
            sum(value for _at, value in points[i : i + size]) / len(points[i : i + size]),
        )
        for i in range(0, len(points), size)
    ]


# Each reading and the hourly roll-up that stands for it once the raw samples are gone.
HOURLY_OF = {
    "utilization_pct": "utilization_avg",
    "temperature_c": "temperature_max_c",
    "power_w": "power_avg_w",
    "memory_used_mb": "memory_used_max_mb",
}


def latest_readings(card_ids: list[int], since: datetime) -> dict[int, dict]:
    """Each card's latest value of each reading since *since* (one query), and its time."""
    latest: dict[int, dict] = {}
    rows = (
        CardSample.objects.filter(card_id__in=card_ids, at__gte=since)
        .order_by("at")
        .values_list("card_id", "at", *HOURLY_OF)
    )
    for card_id, at, *values in rows:
        seen = latest.setdefault(card_id, {})
        seen["at"] = at
        for key, value in zip(HOURLY_OF, values, strict=True):
            if value is not None:
                seen[key] = value
    return latest


def card_series(
    windows: list[tuple[Card, datetime, datetime]],
    since: datetime,
    until: datetime,
    *,
    max_points: int = 360,
    reading: str = "utilization_pct",
) -> list[dict]:
    """One reading (utilisation by default; ``HOURLY_OF`` lists the others) over time of each
    card in *windows* (card, from, to), for a chart: only what was read inside each card's
    own window (not a previous holder's work).

    ``[{"card_id", "label", "points": [(at, value), …]}]``, one entry per card in
    node/index order; the hourly roll-up (``HOURLY_OF``) where raw samples are gone, raw
    samples otherwise, averaged down to at most *max_points* per card. Two queries.
    """
    return card_series_many(windows, since, until, (reading,), max_points=max_points)[reading]


def card_series_many(
    windows: list[tuple[Card, datetime, datetime]],
    since: datetime,
    until: datetime,
    readings: tuple[str, ...],
    *,
    max_points: int = 360,
) -> dict[str, list[dict]]:
    """``card_series`` for several readings at once: ``{reading: series}``. Two queries in
    all, however many readings."""
    ids = [card.pk for card, _s, _e in windows]
    summaries = [HOURLY_OF[reading] for reading in readings]
    hourly: dict[str, dict[int, list]] = {reading: defaultdict(list) for reading in readings}
    for card_id, hour, *values in CardHourly.objects.filter(
        card_id__in=ids, hour__gt=since - HOUR, hour__lt=until
    ).values_list("card_id", "hour", *summaries):
        for reading, value in zip(readings, values, strict=True):
            if value is not None:
                hourly[reading][card_id].append((hour, value))
    raw: dict[str, dict[int, list]] = {reading: defaultdict(list) for reading in readings}
    for card_id, at, *values in CardSample.objects.filter(
        card_id__in=ids, at__gte=since, at__lte=until
    ).values_list("card_id", "at", *readings):
        for reading, value in zip(readings, values, strict=True):
            if value is not None:
                raw[reading][card_id].append((at, value))
    ordered = sorted(windows, key=lambda w: (w[0].node.hostname, w[0].index))
    out: dict[str, list[dict]] = {}
    for reading in readings:
        series = []
        for card, start, end in ordered:
            # Only what was read inside this window: not a previous holder's work.
            own = [p for p in hourly[reading][card.pk] if start - HOUR < p[0] < end]
            own += [p for p in raw[reading][card.pk] if start <= p[0] <= end]
            series.append(
                {
                    "card_id": card.pk,
                    "label": f"{card.node.hostname}#{card.index}",
                    "points": _downsample(sorted(own), max_points),
                }
            )
        out[reading] = series
    return out
