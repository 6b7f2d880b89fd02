"""Fixtures for the whole suite: the named users (alice, lena, bob, fin, ops) and their teams."""

from __future__ import annotations

import os
from dataclasses import dataclass

import pytest
from celery import Task
from hypothesis import settings as hypothesis_settings
from rest_framework.test import APIClient

from portal.models import Membership
from tests.factories import MembershipFactory, TeamFactory, UserFactory

# No deadline on any Hypothesis example: how long one takes depends on what else the machine
# is doing (CI shares two cores), and a test must fail on what the code does, never on time
# (numbers go in bench/). Examples and health checks stay as each test sets them.
hypothesis_settings.register_profile("cardpool", deadline=None)
hypothesis_settings.load_profile("cardpool")


def _is_postgres() -> bool:
    return os.environ.get("DATABASE_URL", "").startswith(("postgres://", "postgresql://"))


@pytest.fixture
def vision(db):
    return TeamFactory(slug="vision", name="Vision")


@pytest.fixture
def nlp(db):
    return TeamFactory(slug="nlp", name="NLP")


@pytest.fixture
def alice(vision):
    """A member of team vision."""
    user = UserFactory(username="alice")
    MembershipFactory(user=user, team=vision, role=Membership.Role.MEMBER)
    return user


@pytest.fixture
def lena(vision):
    """The lead of team vision."""
    user = UserFactory(username="lena")
    MembershipFactory(user=user, team=vision, role=Membership.Role.LEAD)
    return user


@pytest.fixture
def bob(nlp):
    """A member of team nlp."""
    user = UserFactory(username="bob")
    MembershipFactory(user=user, team=nlp, role=Membership.Role.MEMBER)
    return user


@pytest.fixture
def fin(db):
    """The finance user (site role)."""
    return UserFactory(username="fin", profile__is_finance=True)


@pytest.fixture
def ops(db):
    """The operator (site role)."""
    return UserFactory(username="ops", profile__is_operator=True)


@pytest.fixture(autouse=True)
def _fresh_rate_limits():
    """Rate limits live in the cache (in memory under test): none carries over between tests."""
    from django.core.cache import cache

    cache.clear()


@pytest.fixture(autouse=True)
def _no_kept_queue_pictures():
    """The planner's pictures kept in the process (scheduler/plancache.py) name a version
    of a database that each test rolls back: none carries over between tests (the shared
    steps live in the cache, cleared by ``_fresh_rate_limits``)."""
    from leasing.scheduler import plancache

    plancache.forget()
    yield
    plancache.forget()


def _transactional(request) -> bool:
    """Whether the test runs on a real transaction (its data flushed at its end)."""
    names = request.fixturenames
    if "transactional_db" in names or "live_server" in names:
        return True
    marker = request.node.get_closest_marker("django_db")
    return bool(marker and marker.kwargs.get("transaction"))


# Recreated by Django's post_migrate at every flush (under new ids): never put back.
_REMADE_AT_FLUSH = ("contenttypes.contenttype", "auth.permission")


@pytest.fixture(scope="session")
def _migration_data(django_db_setup, django_db_blocker) -> str:
    """What the migrations wrote (the card catalogue, the default policies), serialized."""
    from django.apps import apps
    from django.core import serializers

    rows = []
    with django_db_blocker.unblock():
        for model in apps.get_models():
            meta = model._meta
            if meta.proxy or not meta.managed or meta.label_lower in _REMADE_AT_FLUSH:
                continue
            rows.extend(model._base_manager.order_by("pk"))
        return serializers.serialize("json", rows)


@pytest.fixture(autouse=True)
def _migration_data_kept(request):
    """A test on a real transaction ends with every table flushed, the migrations' data
    included; the next test on the same database (under pytest-xdist, any test the worker
    runs after it) would find no card catalogue. Such a test takes the migrations' data here
    (read once, before any flush); ``pytest_runtest_teardown`` puts it back after the flush."""
    if _transactional(request):
        request.node.migration_data = request.getfixturevalue("_migration_data")
        request.node.db_blocker = request.getfixturevalue("django_db_blocker")
    yield


_restorable: dict[type, list] = {}  # the serialized data, deserialized once: model -> rows


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item, nextitem):
    """After every fixture of a test on a real transaction is torn down (its database
    flushed): the migrations' rows back, into each table the flush left empty. Not after the
    session's last test: its teardown also drops the test database, and the connection is
    back on the database the settings name (which the tests must not write)."""
    yield
    data = getattr(item, "migration_data", None)
    if data is None or nextitem is None:
        return
    from django.core import serializers
    from django.db import transaction

    if not _restorable:
        for row in serializers.deserialize("json", data):
            _restorable.setdefault(type(row.object), []).append(row)
    with item.db_blocker.unblock(), transaction.atomic():
        for model, rows in _restorable.items():
            if not model._base_manager.exists():
                for row in rows:
                    row.save()


@pytest.fixture
def api():
    return APIClient()


# Tests that use something the whole machine has only one of (the Slurm lab, its users and
# nodes; X displays numbered by session; the podman stack; the process table that the fence and
# session tests read; PostgreSQL's 100 connections, which the many-threaded races each take
# most of) or that time a real worker, browser or agent: under pytest-xdist
# (README's test command) they all run on one worker, in turn, beside the
# in-process tests.
ONE_MACHINE = (
    "tests/deploy/",
    "tests/e2e/",
    "tests/inventory/test_fence.py",
    "tests/leasing/test_concurrency.py",
    "tests/leasing/test_session_offers.py",
    "tests/leasing/test_slurm_backend.py",
    "tests/leasing/test_slurm_live.py",
    "tests/leasing/test_workbench.py",
    "tests/portal/test_embedded_broker.py",
)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """Under pytest-xdist: every test is its own unit of work, except the ``ONE_MACHINE`` ones,
    which go together to one worker and run there in turn."""
    from xdist.scheduler import LoadScopeScheduling

    class OneMachine(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return "one-machine" if nodeid.startswith(ONE_MACHINE) else nodeid

    return OneMachine(config, log)


def pytest_collection_modifyitems(config, items):
    """Refuse tests that share an id (pytest-xdist would run one of them and say nothing); skip
    tests that need the real services when they are not configured, with the reason."""
    seen: set[str] = set()
    twice = sorted({i.nodeid for i in items if i.nodeid in seen or seen.add(i.nodeid)})
    if twice:
        raise pytest.UsageError(f"tests that share an id (give each its own): {twice[:5]}")
    if not _is_postgres():
        skip = pytest.mark.skip(
            reason="needs PostgreSQL: set DATABASE_URL=postgres://... (CI does)"
        )
        for item in items:
            if "postgres" in item.keywords:
                item.add_marker(skip)
    if not os.environ.get("CELERY_BROKER_URL", "").startswith("redis://"):
        skip = pytest.mark.skip(reason="needs Redis: set CELERY_BROKER_URL=redis://... (CI does)")
        for item in items:
            if "broker" in item.keywords:
                item.add_marker(skip)


@dataclass(frozen=True)
class SentTask:
    name: str
    args: tuple
    options: dict


@pytest.fixture
def sent_tasks(monkeypatch) -> list[SentTask]:
    """Every task the code sends, recorded instead of published: (name, args, options).

    Hooked on Celery's own ``Task.apply_async``, so it sees every send however the sender
    reached the task (by name through ``leasing.enqueue`` or otherwise), and no test depends
    on which module imported what.
    """
    sent: list[SentTask] = []

    def record(self, args=None, kwargs=None, **options):
        sent.append(SentTask(self.name, tuple(args or ()), options))

    monkeypatch.setattr(Task, "apply_async", record)
    return sent
