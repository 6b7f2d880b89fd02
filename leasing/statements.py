"""Statements the ORM builds once per process, then reused with each call's parameters.

Building a statement through the ORM (resolving lookups, joins, subqueries, compiling)
costs more than PostgreSQL takes to run a small one: 1-3 ms of CPU against 0.2-0.5. For the
few statements every request runs, ``reused`` builds the statement twice with marker values,
checks that the text is the same and that every parameter is either one of the call's values
or a constant, and from then on only fills in the values. The queryset stays the one
definition of the statement (one rule, one place); a statement whose text depends on the
values (a list whose length varies, a value the ORM turns into something else) is built
every time, as without this. ``tests/leasing/test_statements.py`` holds each one to what
building it gives.

A template keeps for the life of the process every constant its build put in the text, so
building one must read nothing that can change: a build that runs a query (a value looked up
in the database at first use) raises ``BuildQueried`` instead of being kept, and a value that
differs between the two builds (the clock) makes the statement one that is built every time.
Settings are read once per process anyway.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from django.core.exceptions import EmptyResultSet
from django.db import connection
from django.db.models import QuerySet

_templates: dict[tuple[str, str], tuple[str, tuple] | None] = {}


class BuildQueried(RuntimeError):
    """Building a reused statement ran a query: its template would keep what it read."""


def _no_query(name: str):
    def refuse(execute, sql, params, many, context):
        raise BuildQueried(
            f"building the statement {name!r} ran a query ({sql[:80]}): a reused statement "
            "may keep nothing read from the database; pass the value in, or build it every time"
        )

    return connection.execute_wrapper(refuse)


def _marks(values: dict, n: int) -> dict:
    """Marker values of the same types as *values*, different for each name and for *n*."""
    base = datetime(2001, 1, 1, tzinfo=UTC)
    marks = {}
    for i, (name, value) in enumerate(sorted(values.items())):
        if isinstance(value, datetime):
            marks[name] = base + timedelta(days=3 * i + n, hours=n)
        elif isinstance(value, int) and not isinstance(value, bool):
            marks[name] = -7001 - 97 * i - n
        else:
            raise TypeError(f"reused: {name} must be an int or a datetime")
    return marks


def _template(name: str, build: Callable[..., QuerySet], values: dict) -> tuple[str, tuple] | None:
    marks = (_marks(values, 0), _marks(values, 1))
    try:
        with _no_query(name):
            built = [build(**m).query.sql_with_params() for m in marks]
    except EmptyResultSet:
        return None
    (sql_a, params_a), (sql_b, params_b) = built
    if sql_a != sql_b or len(params_a) != len(params_b):
        return None
    slots: list = []
    adapt = connection.ops.adapt_datetimefield_value  # SQLite: datetimes become text
    forms = [
        {(k, False): v for k, v in m.items()}
        | {(k, True): adapt(v) for k, v in m.items() if isinstance(v, datetime)}
        for m in marks
    ]
    for a, b in zip(params_a, params_b, strict=True):
        slot = next((k for k in forms[0] if a == forms[0][k] and b == forms[1][k]), None)
        if slot is not None:
            slots.append(slot)
        elif a == b and not any(a == m for f in forms for m in f.values()):
            slots.append((a,))
        else:
            return None
    return sql_a, tuple(slots)


def reused(name: str, build: Callable[..., QuerySet], **values) -> tuple[str, tuple]:
    """The SQL and parameters of ``build(**values)`` (int and datetime values only), from
    the text built once per process and database vendor under *name*."""
    key = (name, connection.vendor)
    if key not in _templates:
        _templates[key] = _template(name, build, values)
    template = _templates[key]
    if template is None:
        return build(**values).query.sql_with_params()
    sql, slots = template
    adapt = connection.ops.adapt_datetimefield_value
    return sql, tuple(
        slot[0] if len(slot) == 1 else adapt(values[slot[0]]) if slot[1] else values[slot[0]]
        for slot in slots
    )


def rows(name: str, build: Callable[..., QuerySet], **values) -> list[tuple]:
    """The rows of ``build(**values)`` (a ``values_list`` queryset) on a plain cursor: no
    ORM converters (JSON as text or parsed, booleans on SQLite as 0/1)."""
    try:
        sql, params = reused(name, build, **values)
    except EmptyResultSet:
        return []
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchall()


def forget() -> None:
    _templates.clear()
