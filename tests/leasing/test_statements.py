"""Statements built once per process and reused with each call's values (leasing.statements)
give exactly the SQL and parameters that building them gives, on either database."""

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from leasing import statements
from leasing.lifecycle import validation
from leasing.models import Lease
from leasing.scheduler import fastpath, joining, preemption, shares, snapshot
from leasing.teams import quotas
from tests.leasing.conftest import T0


def free(model, start, end):
    return fastpath.free_cards(model, start=start, end=end, nodes=None).values_list("id")


CASES = [
    ("quotas.rules_apply", quotas._rules_found, [
        {"team": 3, "user": 5, "model": 7}, {"team": 11, "user": 2, "model": 1}]),
    ("shares.covering", shares._covering, [{"model": 4}, {"model": 9}]),
    ("preemption.any", preemption._any_preemptible, [{"model": 4}, {"model": 2}]),
    ("snapshot.waiting_one", snapshot._waiting_one, [
        {"model": 4, "lease": 8}, {"model": 1, "lease": 30}]),
    ("joining.mark", joining._mark, [{"model": 4}, {"model": 6}]),
    ("validation.any_card", validation._any_card, [{"model": 4}, {"model": 6}]),
    ("test.free", free, [
        {"model": 4, "start": T0, "end": T0 + timedelta(hours=1)},
        {"model": 2, "start": T0 + timedelta(days=2), "end": T0 + timedelta(days=9)}]),
]  # fmt: skip


@pytest.mark.parametrize(("name", "build", "calls"), CASES, ids=[c[0] for c in CASES])
def test_a_reused_statement_is_what_building_it_gives(db, name, build, calls):
    statements.forget()
    for values in calls:
        assert statements.reused(name, build, **values) == build(**values).query.sql_with_params()
    assert statements._templates[(name, connection.vendor)] is not None  # reused, not rebuilt


def test_a_statement_whose_text_depends_on_the_values_is_built_every_time(db):
    def build(n):
        return Lease.objects.filter(pk__in=range(abs(n) % 5 + 1)).values_list("pk")

    statements.forget()
    for n in (1, 3):
        assert statements.reused("test.varies", build, n=n) == build(n).query.sql_with_params()
    assert statements._templates[("test.varies", connection.vendor)] is None


def test_only_ints_and_datetimes_are_values(db):
    with pytest.raises(TypeError):
        statements.reused("test.text", lambda name: Lease.objects.filter(purpose=name), name="x")


def test_building_a_reused_statement_runs_no_query(db):
    """A value read from the database while building would be kept for the process's life."""

    def build(model):
        newest = Lease.objects.order_by("-pk").values_list("pk", flat=True).first() or 0
        return Lease.objects.filter(card_model_id=model, pk__gt=newest).values_list("pk")

    statements.forget()
    with pytest.raises(statements.BuildQueried):
        statements.reused("test.queries", build, model=3)
    assert ("test.queries", connection.vendor) not in statements._templates


@pytest.mark.parametrize(("name", "build", "calls"), CASES, ids=[c[0] for c in CASES])
def test_the_project_s_statements_build_without_a_query(db, name, build, calls):
    statements.forget()
    with CaptureQueriesContext(connection) as queries:
        statements.reused(name, build, **calls[0])
    assert len(queries) == 0
