"""The tick leaves a stored plan alone when only time moved and nothing is due, and plans
the whole queue when a planned start has come, when the usable cards changed, when a stale
stretch waits, and at least every FULL_PASS_EVERY once anything the planner reads was
written since the plan it kept."""

import pytest
from django.core.cache import cache

from inventory.models import Card
from leasing.choices import LeaseStatus
from leasing.models import Lease, QueueMark
from leasing.scheduler import joining, plancache, refresh
from tests.leasing.conftest import T0, ask, hours


@pytest.fixture
def tick(django_capture_on_commit_callbacks):
    """The tick for one model, its after-commit work run (it records the pass)."""

    def run_tick(model):
        with django_capture_on_commit_callbacks(execute=True):
            refresh.queue_tick(model.pk)

    return run_tick


@pytest.fixture
def passes(monkeypatch):
    """Counts the whole-queue passes."""
    cache.clear()
    calls = []
    real = refresh.schedule_card_model
    monkeypatch.setattr(
        refresh, "schedule_card_model", lambda *a, **k: calls.append(1) or real(*a, **k)
    )
    return calls


@pytest.fixture
def queue(frozen, alice, bob, vision, nlp, a100, small_pool):
    """The pool held for 1 h; three leases waiting."""
    ask(bob, nlp, a100, count=8, duration=hours(1), same_node=False)
    return [ask(alice, vision, a100, count=c, duration=hours(2)) for c in (4, 2, 4)]


def estimates(model):
    return dict(
        Lease.objects.filter(card_model=model, status=LeaseStatus.QUEUED).values_list(
            "pk", "estimated_start"
        )
    )


def test_only_time_moved_and_nothing_is_due_the_plan_stands(queue, a100, frozen, passes, tick):
    tick(a100)  # the first tick plans the whole queue (no pass on record)
    assert len(passes) == 1
    before = estimates(a100)
    frozen.shift(30)
    tick(a100)
    tick(a100)
    assert len(passes) == 1 and estimates(a100) == before


def test_a_planned_start_that_has_come_plans_the_queue_and_starts_it(
    queue, a100, frozen, passes, tick
):
    tick(a100)
    first = queue[0]
    assert estimates(a100)[first.pk] == T0 + hours(1)
    # the holder ends on time, but (as if its release were lost) nothing re-planned
    Lease.objects.filter(status=LeaseStatus.PROVISIONING).update(end_at=T0 + hours(1))
    from leasing.models import Allocation

    Allocation.objects.filter(lease__status=LeaseStatus.PROVISIONING).update(end_at=T0 + hours(1))
    frozen.move_to(T0 + hours(1))
    tick(a100)
    assert len(passes) == 2
    first.refresh_from_db()
    assert first.status == LeaseStatus.PROVISIONING


def test_cards_coming_back_plan_the_queue(queue, a100, frozen, passes, tick, small_pool):
    Card.objects.filter(card_model=a100).update(health=Card.Health.HOT)  # nobody's usable
    tick(a100)
    assert all(eta is None for eta in estimates(a100).values())
    Card.objects.filter(card_model=a100).update(health=Card.Health.OK)  # no re-plan by itself
    frozen.shift(2)
    tick(a100)
    assert len(passes) == 2
    assert all(eta is not None for eta in estimates(a100).values())


def test_the_whole_queue_is_planned_at_least_every_minute_once_anything_was_written(
    queue, a100, frozen, passes, tick
):
    tick(a100)
    frozen.shift(refresh.FULL_PASS_EVERY.total_seconds() - 1)
    tick(a100)
    assert len(passes) == 1
    frozen.shift(2)
    tick(a100)  # nothing written since the plan the last tick kept: planning again is moot
    assert len(passes) == 1
    # a write the planner reads, with no pass of its own (the model's version moves)
    Lease.objects.filter(pk=queue[0].pk).update(description="touched")
    tick(a100)
    assert len(passes) == 2


def test_a_whole_pass_by_the_tick_plans_from_the_picture_it_took(
    queue, a100, frozen, passes, tick, monkeypatch
):
    """The tick took this process's picture under the lock; when it plans the whole queue
    (here: no pass on record) the pass plans from that picture, not from the whole queue
    read again under the lock, and decides what a pass from the database decides."""
    tick(a100)  # plans the whole queue and keeps the picture
    before = estimates(a100)
    loads = []
    real = plancache.load
    monkeypatch.setattr(plancache, "load", lambda *a, **k: loads.append(1) or real(*a, **k))
    cache.clear()  # no pass on record: the tick plans the whole queue
    frozen.shift(2)
    tick(a100)
    assert len(passes) == 2 and loads == []
    assert estimates(a100) == before
    plancache.forget()
    cache.clear()
    tick(a100)  # no picture in this process: read from the database
    assert len(passes) == 3 and loads and estimates(a100) == before


def test_a_stale_stretch_is_refreshed_by_the_tick(
    frozen, alice, bob, vision, nlp, a100, small_pool, monkeypatch, tick
):
    monkeypatch.setattr(joining, "JOIN_BUDGET", 8)
    ask(bob, nlp, a100, count=8, duration=hours(1), same_node=False)
    ask(bob, nlp, a100, count=4, duration=hours(8))
    ask(alice, vision, a100, count=4, duration=hours(1))  # ahead of the long one
    assert QueueMark.objects.exists()
    monkeypatch.setattr(joining, "JOIN_BUDGET", 1_000)  # the tick's own pass plans all
    slices = []
    real = refresh.queue_refresh
    monkeypatch.setattr(refresh, "queue_refresh", lambda *a, **k: slices.append(1) or real(*a, **k))
    tick(a100)
    assert slices and not QueueMark.objects.exists()


def test_a_cache_that_cannot_be_read_means_the_whole_queue_every_tick(
    queue, a100, frozen, passes, tick, monkeypatch
):
    def broken(*args, **kwargs):
        raise ConnectionError("cache down")

    monkeypatch.setattr(refresh.cache, "get", broken)
    monkeypatch.setattr(refresh.cache, "set", broken)
    tick(a100)
    frozen.shift(2)
    tick(a100)
    assert len(passes) == 2  # no record of the last pass: nothing is trusted, nothing fails


def test_the_refresh_task_plans_the_stale_stretch_to_the_end(
    frozen, alice, bob, vision, nlp, a100, small_pool, monkeypatch
):
    from leasing.lifecycle.tasks import queue_refresh as refresh_task

    monkeypatch.setattr(joining, "JOIN_BUDGET", 8)
    monkeypatch.setattr(refresh, "REFRESH_BUDGET", 0)  # one lease per slice
    ask(bob, nlp, a100, count=8, duration=hours(1), same_node=False)
    for n in range(4):
        ask(bob, nlp, a100, count=2, duration=hours(8 - n))  # each ahead of the last
    assert QueueMark.objects.exists()
    assert refresh_task(a100.pk) > 1  # several slices, in one task
    assert not QueueMark.objects.exists()


@pytest.fixture
def loads_under_lock(monkeypatch):
    """Whether each read of a whole picture from the database happened while this process
    held the model's lock (taken in the transaction, released at its end)."""
    from django.db import connection, transaction

    if connection.vendor != "postgresql":
        pytest.skip("the picture is read outside the lock on PostgreSQL only (SQLite: one writer)")
    held = []
    real_lock = refresh.lock_card_models

    def lock(ids):
        held.append(True)
        transaction.on_commit(held.clear)
        return real_lock(ids)

    monkeypatch.setattr(refresh, "lock_card_models", lock)
    seen = []
    real_load = plancache.load
    monkeypatch.setattr(
        plancache, "load", lambda *a, **k: seen.append(bool(held)) or real_load(*a, **k)
    )
    return seen


def test_a_cold_process_reads_its_picture_before_it_takes_the_lock(
    transactional_db, queue, a100, frozen, passes, tick, loads_under_lock
):
    """A tick in a process with no picture reads the model in a snapshot of its own before it
    takes the lock (plancache.warm), and plans from that picture under the lock: it decides
    what a pass that read under the lock decides."""
    tick(a100)
    before = estimates(a100)
    plancache.forget()
    cache.clear()  # no picture here, none shared, no pass on record: a whole pass
    loads_under_lock.clear()
    frozen.shift(2)
    tick(a100)
    assert len(passes) == 2 and loads_under_lock == [False]
    assert estimates(a100) == before


def test_a_write_between_the_read_and_the_lock_means_reading_again_under_it(
    transactional_db, queue, a100, frozen, passes, tick, loads_under_lock, monkeypatch
):
    """Something the planner reads is written after the picture was read outside the lock:
    its version is not the one under the lock, so the tick does not plan from it (it reads
    the model again, under the lock) and the plan counts what was written."""
    tick(a100)
    plancache.forget()
    cache.clear()
    loads_under_lock.clear()
    gone = queue[0]
    real_warm = plancache.warm

    def warm_then_cancel(model_id, *, now):
        read = real_warm(model_id, now=now)
        Lease.objects.filter(pk=gone.pk).update(status=LeaseStatus.CANCELLED)  # moves the version
        return read

    monkeypatch.setattr(plancache, "warm", warm_then_cancel)
    frozen.shift(2)
    tick(a100)
    assert loads_under_lock == [False, True]
    assert gone.pk not in estimates(a100)
    assert estimates(a100)[queue[1].pk] is not None
