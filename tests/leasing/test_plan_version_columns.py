"""The triggers of migration leasing/0025 move ``PlanVersion`` when a column the planner's
picture is read from changes; the kept picture (``plancache``) is trusted while the version
stands still. So every column ``snapshot.py`` reads must be one whose change moves it: a
column added to a snapshot query and not to the triggers would leave kept pictures stale
without any test of behaviour noticing."""

import importlib
import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from leasing.scheduler import snapshot
from tests.leasing.conftest import ask, hours

triggers = importlib.import_module("leasing.migrations.0025_plan_version")

# What an UPDATE of each table moves the version for: every column ("*"), or these.
WATCHED = {
    "leasing_allocation": {"*"},  # its triggers have no column condition
    "leasing_queuemark": {"*"},
    "leasing_lease": {c.strip('"') for c in triggers.LEASE_COLUMNS},
    "inventory_card": {c.strip('"') for c in triggers.CARD_COLUMNS},
    "inventory_node": {c.strip('"') for c in triggers.NODE_COLUMNS},
}
# Columns read that never change after the row is written (a key, the row's own id).
FIXED = {"id", "lease_id", "card_id"}
# Columns read whose every change that matters comes with a watched one: the cards of a
# failed release are held back (``Allocation.objects.held_back``: an ending status and a
# failure reason) and a lease's end moves with its allocations' ``end_at`` (watched).
WITH_A_WATCHED_ONE = {
    ("leasing_lease", "failure_reason"): "set and cleared with the status (release_failed, ended)",
    ("leasing_lease", "ended_at"): "set with the status (ended)",
    ("leasing_lease", "end_at"): "changed with its allocations' end_at (extend, resize)",
}
# A queued lease's every change moves the version (the lease triggers' status condition),
# so the columns read of the queue itself need not be listed.
QUEUE_ONLY = "leasing_lease"

_ALIAS = re.compile(r'"(\w+)"\s+(?:AS\s+)?"?([A-Z]\d+)"?\b')
_COLUMN = re.compile(r'(?:"(\w+)"|\b([A-Z]\d+))\."(\w+)"')


def columns_read(sql: str) -> set[tuple[str, str]]:
    """(table, column) pairs one statement names, through Django's subquery aliases; not
    those it only sorts by (a node's hostname orders rows, the picture is the same)."""
    sql = re.sub(r" ORDER BY [^()]*$", "", sql)
    aliases = {alias: table for table, alias in _ALIAS.findall(sql)}
    return {
        (table or aliases.get(alias, alias), column)
        for table, alias, column in _COLUMN.findall(sql)
    }


def read_by(fn) -> list[str]:
    with CaptureQueriesContext(connection) as queries:
        fn()
    return [q["sql"] for q in queries]


@pytest.fixture
def picture_source(frozen, alice, bob, vision, nlp, a100, small_pool):
    ask(bob, nlp, a100, count=8, duration=hours(1), same_node=False)  # the pool held
    ask(alice, vision, a100, count=2, duration=hours(2))  # and a queue
    return a100


def test_every_column_the_picture_is_read_from_moves_the_plan_version(picture_source):
    model, now = picture_source.pk, timezone.now()
    unwatched = set()
    for name, fn in [
        ("card_slots", lambda: snapshot.card_slots(model, now=now)),
        ("timeline_for", lambda: snapshot.timeline_for(model, now=now)),
    ]:
        for sql in read_by(fn):
            for table, column in columns_read(sql):
                watched = WATCHED.get(table)
                assert watched is not None, f"{name} reads {table}, which no trigger watches"
                if "*" in watched or column in watched or column in FIXED:
                    continue
                if (table, column) in WITH_A_WATCHED_ONE:
                    continue
                unwatched.add((name, table, column))
    assert not unwatched, f"columns read but not in migration 0025's triggers: {unwatched}"


def test_the_queue_is_read_only_while_queued(picture_source):
    """Any change of a queued lease moves the version: so waiting_for may read any column
    of the queue, as long as it reads queued leases only."""
    sqls = read_by(lambda: snapshot.waiting_for(picture_source.pk, now=timezone.now()))
    lease_reads = [s for s in sqls if '"leasing_lease"' in s]
    assert lease_reads
    for sql in lease_reads:
        assert """"leasing_lease"."status" = 'queued'""" in sql, sql
