"""Reading the planner's rows fast: times as whole microseconds, no per-row ORM work.

A request that meets a queue reads the model's cards, every open allocation and every
waiting lease (``snapshot``). Through the ORM, most of that time went to turning text into
``datetime`` objects and to the ORM's per-row converters: about 3 of every 4 ms per 1,000
rows (bench/queue_length.py). Here the queryset still says *what* is read (the filters are
the ORM's, so the one "usable card" rule and the rest stay in one place); only the reading
differs: the compiled statement runs on a plain cursor, and timestamps and durations come
back as integers (``EpochMicros``), which Python turns into ``datetime``/``timedelta`` in a
fraction of the time. ``tests/leasing/test_snapshot_rows.py`` holds the result to the ORM's.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

from django.core.exceptions import EmptyResultSet
from django.db import connection
from django.db.models import BigIntegerField, Func, QuerySet

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


class EpochMicros(Func):
    """A timestamp as microseconds since 1970-01-01 UTC (``duration=True``: an interval as
    microseconds), exact, as a plain integer column."""

    output_field = BigIntegerField()

    def __init__(self, expression, *, duration: bool = False, **extra):
        self.duration = duration
        super().__init__(expression, **extra)

    def as_postgresql(self, compiler, connection, **extra):
        # EXTRACT returns numeric (exact) since PostgreSQL 14; the product is whole.
        template = "(EXTRACT(EPOCH FROM %(expressions)s) * 1000000)::bigint"
        return self.as_sql(compiler, connection, template=template, **extra)

    def as_sqlite(self, compiler, connection, **extra):
        if self.duration:
            return compiler.compile(self.source_expressions[0])  # stored as microseconds
        # Stored as 'YYYY-MM-DD HH:MM:SS[.ffffff]' in UTC: whole seconds from julianday
        # (rounded: the double is off by far less than half a second), the fraction as text.
        template = (
            "(CAST(ROUND((JULIANDAY(SUBSTR(%(expressions)s, 1, 19)) - 2440587.5) * 86400)"
            " AS INTEGER) * 1000000"
            " + CAST(SUBSTR(%(expressions)s || '.000000', 21, 6) AS INTEGER))"
        )
        return self.as_sql(compiler, connection, template=template, **extra)


def fetch(queryset: QuerySet) -> list[tuple]:
    """The rows of a ``values_list`` queryset, read with a plain cursor (no ORM converters:
    JSON columns come back as text or as parsed values, booleans on SQLite as 0/1)."""
    try:
        sql, params = queryset.query.sql_with_params()
    except EmptyResultSet:  # a filter that can match nothing (``__in=[]``): no statement
        return []
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchall()


def micros(moment: datetime) -> int:
    """*moment* (aware) as microseconds since the epoch, as ``EpochMicros`` reads it."""
    return (moment - EPOCH) // timedelta(microseconds=1)


def at(micros: int | None) -> datetime | None:
    return None if micros is None else EPOCH + timedelta(microseconds=micros)


def json_value(value):
    """A JSON column as read by ``fetch``: text on some drivers, already parsed on others."""
    return json.loads(value) if isinstance(value, str | bytes) else value
