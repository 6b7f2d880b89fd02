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
