"""The refresh and the tick plan a bounded number of leases while they hold the model's lock,
whatever the queue's length: a refresh slice at most ``REFRESH_BUDGET`` (leases times cards,
at least one lease, fewer once ``REFRESH_PLAN_SECONDS`` have passed), the tick's own pass at
most ``JOIN_BUDGET``; counted in leases planned. Whatever the budgets, the stored plan ends as
the full planner's."""

import random
from datetime import timedelta

import pytest

from leasing.models import QueueMark
from leasing.scheduler import joining, refresh
from leasing.scheduler.queueplan import QueuePlan
from tests.leasing.conftest import ask, hours
from tests.leasing.test_queue_stale import full_plan, stored

CARDS = 8  # small_pool


@pytest.fixture
def holds(monkeypatch):
    """Leases planned (``QueuePlan.append``: one search over the pool each) per hold of the
    model's lock by the refresh and the tick, one count per hold."""
    counts: list[int] = []
    real_lock, real_append = refresh.lock_card_models, QueuePlan.append

    def lock(ids):
        counts.append(0)
        return real_lock(ids)

    def append(self, key, request):
        if counts:
            counts[-1] += 1
        return real_append(self, key, request)

    monkeypatch.setattr(refresh, "lock_card_models", lock)
    monkeypatch.setattr(QueuePlan, "append", append)
    return counts


@pytest.mark.parametrize("seed", range(4))
def test_each_hold_plans_at_most_its_budget(
    seed, frozen, alice, bob, vision, nlp, a100, small_pool, monkeypatch, holds
):
    rng = random.Random(seed)
    per_slice, per_pass = 1 + seed % 3, 1 + seed // 2
    monkeypatch.setattr(joining, "JOIN_BUDGET", CARDS * per_pass)
    monkeypatch.setattr(refresh, "REFRESH_BUDGET", CARDS * per_slice)
    monkeypatch.setattr(refresh, "TICK_REFRESH_SLICES", 2)  # the tick leaves some to the task
    ask(bob, nlp, a100, count=8, duration=hours(1), same_node=False)  # the pool, for 1 h
    for _ in range(24):  # each request plans itself; most of those behind it are left stale
        ask(alice, vision, a100, count=rng.randint(1, 4),
            duration=timedelta(minutes=30 * rng.randint(1, 16)))  # fmt: skip
    assert QueueMark.objects.filter(card_model=a100).exists()
    holds.clear()
    refresh.queue_tick(a100.pk)  # two slices, then its own pass
    ticked = len(holds)
    while refresh.queue_refresh(a100.pk):
        pass
    assert not QueueMark.objects.filter(card_model=a100).exists()
    assert len(holds) > 4  # the stretch took several holds, each within its budget
    assert max(holds[:ticked]) <= max(per_slice, per_pass)
    assert max(holds[ticked:]) <= per_slice
    assert stored(a100) == {pk: (d.start, d.card_ids or None) for pk, d in full_plan(a100).items()}


@pytest.mark.parametrize("bound", ["count", "time"])
def test_a_slice_plans_one_lease_when_its_count_or_its_time_allows_no_more(
    bound, frozen, alice, bob, vision, nlp, a100, small_pool, monkeypatch, holds
):
    """A budget below one lease still plans one; however much the count allows, a slice that
    has held the lock for ``REFRESH_PLAN_SECONDS`` (here none) begins no further lease; and
    the stored plan still ends as the full planner's."""
    monkeypatch.setattr(joining, "JOIN_BUDGET", CARDS)
    if bound == "count":
        monkeypatch.setattr(refresh, "REFRESH_BUDGET", 0)
    else:
        monkeypatch.setattr(refresh, "REFRESH_BUDGET", 10**9)
        monkeypatch.setattr(refresh, "REFRESH_PLAN_SECONDS", 0.0)
    ask(bob, nlp, a100, count=8, duration=hours(1), same_node=False)
    for n in range(4):
        ask(bob, nlp, a100, count=2, duration=hours(8 - n))  # each ahead of the last
    holds.clear()
    while refresh.queue_refresh(a100.pk):
        pass
    assert len(holds) > 2 and set(holds[:-1]) == {1}
    assert stored(a100) == {pk: (d.start, d.card_ids or None) for pk, d in full_plan(a100).items()}


def test_a_slice_goes_on_from_the_last_slice_s_plan_when_nothing_changed(
    frozen, alice, bob, vision, nlp, a100, small_pool, monkeypatch,
    django_capture_on_commit_callbacks,
):  # fmt: skip
    """Committed slices keep their picture, and the next slice takes the plan up to the mark
    from it instead of taking back the stored plan of everyone ahead (``restore``, a walk over
    the queue); a request in between (the version moves) means the stored plan again."""
    rng = random.Random(7)
    monkeypatch.setattr(joining, "JOIN_BUDGET", CARDS)
    monkeypatch.setattr(refresh, "REFRESH_BUDGET", 0)  # one lease per slice
    restores = []
    real_restore = QueuePlan.restore
    monkeypatch.setattr(
        QueuePlan, "restore", lambda self, stored: restores.append(1) or real_restore(self, stored)
    )

    def committed_ask(**kw):
        with django_capture_on_commit_callbacks(execute=True):
            return ask(alice, vision, a100, **kw)

    with django_capture_on_commit_callbacks(execute=True):
        ask(bob, nlp, a100, count=8, duration=hours(1), same_node=False)
    for _ in range(12):
        committed_ask(count=rng.randint(1, 4), duration=timedelta(minutes=30 * rng.randint(1, 16)))
    slices = 0
    more = True
    while more:
        if slices == 3:
            committed_ask(count=1, duration=hours(1))  # a newcomer between two slices
        restores.clear()
        with django_capture_on_commit_callbacks(execute=True):
            more = refresh.queue_refresh(a100.pk)
        slices += 1
        if slices not in (1, 4):  # the first slice, and the one after the newcomer, restore
            assert not restores
    assert slices > 5
    assert stored(a100) == {pk: (d.start, d.card_ids or None) for pk, d in full_plan(a100).items()}


def _synchronous_commit() -> str:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SHOW synchronous_commit")
        return cursor.fetchone()[0]


def test_a_slice_that_only_re_estimates_does_not_wait_for_the_disk(
    frozen, alice, bob, vision, nlp, a100, small_pool, monkeypatch
):
    """Its COMMIT returns before the flush (the setting holds for its transaction only: the
    test's transaction here); a crash loses its estimates and mark together."""
    monkeypatch.setattr(joining, "JOIN_BUDGET", CARDS)  # a request plans itself, no more
    ask(bob, nlp, a100, count=8, duration=hours(1), same_node=False)
    for n in range(4):
        ask(bob, nlp, a100, count=2, duration=hours(8 - n))  # each ahead of the last
    assert QueueMark.objects.filter(card_model=a100).exists()
    assert _synchronous_commit() == "on"
    refresh.queue_refresh(a100.pk)
    assert _synchronous_commit() == "off"


def test_a_slice_that_starts_a_lease_waits_for_the_disk(
    frozen, alice, bob, vision, nlp, a100, small_pool, monkeypatch
):
    """A lease started is recorded as started only once it is on disk."""
    from leasing.choices import LeaseStatus
    from leasing.lifecycle.changes import lease_release

    ask(bob, nlp, a100, count=6, duration=hours(1), same_node=False)
    freed = ask(bob, nlp, a100, count=2, duration=hours(1))
    ask(alice, vision, a100, count=4, duration=hours(2))  # a whole node, in 1 h
    behind = ask(alice, vision, a100, count=2, duration=hours(8))
    monkeypatch.setattr(joining, "JOIN_BUDGET", 8)  # a pass plans one lease of this pool
    lease_release(lease=freed, user=bob)
    assert QueueMark.objects.filter(card_model=a100).exists()
    refresh.queue_refresh(a100.pk)
    behind.refresh_from_db()
    assert behind.status == LeaseStatus.PROVISIONING  # started by the slice
    assert _synchronous_commit() == "on"


def test_a_slice_that_tells_a_holder_of_a_move_waits_for_the_disk(
    frozen, alice, bob, lena, vision, nlp, a100, small_pool, monkeypatch
):
    """A notice leaves only from a commit on disk: a slice whose re-estimate moves a start
    told past the threshold (a higher class took the pool ahead for 10 h) keeps the flush."""
    from leasing.choices import Priority
    from leasing.models import LeaseEvent

    monkeypatch.setattr(joining, "JOIN_BUDGET", CARDS)  # a request plans itself, no more
    ask(bob, nlp, a100, count=8, duration=hours(1), same_node=False)
    behind = [ask(alice, vision, a100, count=2, duration=hours(2)) for _ in range(3)]
    ask(lena, vision, a100, count=8, duration=hours(10), same_node=False, priority=Priority.HIGH)
    assert QueueMark.objects.filter(card_model=a100).exists()
    assert _synchronous_commit() == "on"
    while refresh.queue_refresh(a100.pk):
        pass
    assert LeaseEvent.objects.filter(lease__in=behind, kind="estimate_moved").exists()
    assert _synchronous_commit() == "on"
