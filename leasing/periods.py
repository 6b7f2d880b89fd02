"""Calendar helpers in the site's time zone: months, overlaps, whole minutes. Imports only Django."""

from __future__ import annotations

import zoneinfo
from datetime import date, datetime, timedelta
from decimal import Decimal

from django.conf import settings


def site_tz() -> zoneinfo.ZoneInfo:
    return zoneinfo.ZoneInfo(settings.TIME_ZONE)


def month_of(t: datetime) -> tuple[datetime, datetime]:
    """The calendar month (site time zone) holding *t*, as [start, end)."""
    local = t.astimezone(site_tz())
    start = local.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    end = (start + timedelta(days=32)).replace(day=1)
    return start, end


def months_between(start: datetime, end: datetime) -> list[tuple[datetime, datetime]]:
    months = []
    m_start, m_end = month_of(start)
    while m_start < end:
        months.append((m_start, m_end))
        m_start, m_end = month_of(m_end)
    return months


def overlap_hours(start: datetime, end: datetime, lo: datetime, hi: datetime) -> Decimal:
    seconds = (min(end, hi) - max(start, lo)).total_seconds()
    return Decimal(max(seconds, 0)) / Decimal(3600)


def floor_minute(t: datetime) -> datetime:
    return t.replace(second=0, microsecond=0)


def local_date(value) -> date:
    """A database's truncated day as a date in the site time zone (SQLite hands back text for
    some expressions, PostgreSQL an aware datetime)."""
    if isinstance(value, datetime):
        return value.astimezone(site_tz()).date()
    if isinstance(value, str):
        return date.fromisoformat(value[:10])
    return value


# --- off-peak windows ---------------------------------------------------------------------
# A window is (weekday 0=Monday, start hour, end hour (24 = midnight), price factor), in the
# site time zone: ``leasing.models.OffPeakWindow.spans()`` reads them. The helpers below are
# pure so billing, the scheduler and previews share them.

Span = tuple[int, int, int, Decimal]


def offpeak_intervals(
    lo: datetime, hi: datetime, spans: list[Span]
) -> list[tuple[datetime, datetime, Decimal]]:
    """The off-peak periods meeting [lo, hi) as (start, end, factor), in time order, adjacent
    windows kept apart (each has its own factor)."""
    if not spans or hi <= lo:
        return []
    tz = site_tz()
    day = lo.astimezone(tz).date() - timedelta(days=1)
    last = hi.astimezone(tz).date()
    out = []
    while day <= last:
        for weekday, start_hour, end_hour, factor in spans:
            if day.weekday() != weekday:
                continue
            s = datetime(day.year, day.month, day.day, start_hour, tzinfo=tz)
            end_day = day + timedelta(days=end_hour // 24)
            e = datetime(end_day.year, end_day.month, end_day.day, end_hour % 24, tzinfo=tz)
            if s < hi and e > lo:
                out.append((s, e, Decimal(factor)))
        day += timedelta(days=1)
    return sorted(out)


def offpeak_factor(t: datetime, spans: list[Span]) -> Decimal | None:
    """The tariff in force at *t*: the factor of the off-peak window holding it, else None
    (peak time)."""
    for s, e, factor in offpeak_intervals(t, t + timedelta(seconds=1), spans):
        if s <= t < e:
            return factor
    return None


def offpeak_cuts(lo: datetime, hi: datetime, spans: list[Span]) -> list[datetime]:
    """Every start and end of an off-peak window strictly inside (lo, hi): where a price by
    time of day changes."""
    cuts = set()
    for s, e, _factor in offpeak_intervals(lo, hi, spans):
        cuts.update(t for t in (s, e) if lo < t < hi)
    return sorted(cuts)


def offpeak_start(
    t: datetime, spans: list[Span], *, fits: timedelta | None = None, days: int = 15
) -> datetime | None:
    """The earliest moment from *t* on that is off-peak (*t* itself inside a window); with
    *fits*, the earliest from which *fits* of off-peak time follow without a break (back to
    back windows join). None when there is no such moment in the next *days* days."""
    merged: list[list[datetime]] = []
    for s, e, _factor in offpeak_intervals(t, t + timedelta(days=days), spans):
        if merged and s <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], e)
        else:
            merged.append([s, e])
    for s, e in merged:
        start = max(s, t)
        if e > start and (fits is None or e - start >= fits):
            return start
    return None
