"""The queue planner's picture shared between processes (scheduler/plancache.py): each pass
leaves a step (what it changed) or a base (the whole picture) in the cache after its commit;
a process whose own picture is behind, or that has none, replays the steps from it or from
a base and gets exactly the picture the database holds, without reading the queue. A step
that is missing, a walk too long, a cache that fails: the database, as without sharing."""

import pytest
from django.core.cache import cache
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from leasing.models import Lease
from leasing.scheduler import plancache
from leasing.scheduler.refresh import queue_tick
from tests.leasing.conftest import ask, hours


@pytest.fixture
def committed(django_capture_on_commit_callbacks):
    """Run the after-commit work (the picture kept, the step shared) of what is inside."""
    return lambda: django_capture_on_commit_callbacks(execute=True)


@pytest.fixture
def queue(frozen, alice, bob, vision, nlp, a100, small_pool, committed):
    """The pool held for 1 h; leases waiting, each request's pass kept and shared."""
    with committed():
        ask(bob, nlp, a100, count=8, duration=hours(1), same_node=False)
    for n in range(5):
        user, team = (alice, vision) if n % 2 else (bob, nlp)
        with committed():
            ask(user, team, a100, count=1 + n % 4, duration=hours(1 + n))
    return a100


def same(a: plancache.Picture, b: plancache.Picture, now) -> bool:
    """Equal as the planner reads them (periods that ended by *now* are pruned anyway)."""
    a.holders.prune(now)
    b.holders.prune(now)
    busy = [{c: p for c, p in x.holders.busy.items() if p} for x in (a, b)]
    return (a.cards, a.waiting, busy[0]) == (b.cards, b.waiting, busy[1])


def picture_in_process(model, kept: dict):
    """What a process whose own pictures are *kept* gets for *model* now."""
    plancache._kept.clear()
    plancache._kept.update(kept)
    now = timezone.now()
    with transaction.atomic():
        version = plancache.hold(model.pk)
        return plancache.take(model.pk, version, now=now), now


def picture_in_another_process(model):
    """What a process that never planned this model gets."""
    return picture_in_process(model, {})


def test_another_process_replays_the_shared_steps_to_what_the_database_holds(queue):
    picture, now = picture_in_another_process(queue)
    assert picture is not None
    assert same(picture, plancache.load(queue.pk, now=now), now)
    assert [w.request.lease_id for w in picture.waiting]  # a queue, not an empty picture


def test_replaying_reads_nothing_of_the_queue_from_the_database(queue):
    plancache.forget()
    with transaction.atomic(), CaptureQueriesContext(connection) as queries:
        version = plancache.hold(queue.pk)
        assert plancache.take(queue.pk, version, now=timezone.now()) is not None
    assert len(queries) == 1  # the version row alone


def test_a_process_behind_catches_up_from_its_own_picture(queue, alice, vision, committed):
    mine = dict(plancache._kept)  # this process's picture, as the last pass left it
    with committed():
        ask(alice, vision, queue, count=2, duration=hours(3))  # a pass in another process
    picture, now = picture_in_process(queue, mine)
    assert picture is mine[queue.pk]  # brought forward, not read again
    assert same(picture, plancache.load(queue.pk, now=now), now)


def test_a_process_behind_a_newer_base_still_replays_from_its_own_picture(
    queue, alice, vision, committed
):
    mine = dict(plancache._kept)
    with committed():
        ask(alice, vision, queue, count=2, duration=hours(3))
    assert plancache.share(queue.pk)  # the worker's base, newer than this process's picture
    with committed():
        ask(alice, vision, queue, count=1, duration=hours(4))
    picture, now = picture_in_process(queue, mine)
    assert picture is mine[queue.pk]  # two steps past the base, not the base read
    assert same(picture, plancache.load(queue.pk, now=now), now)


def test_a_missing_step_means_the_database(queue, alice, vision, committed):
    with committed():
        ask(alice, vision, queue, count=1, duration=hours(2))
    version = plancache.version_now(queue.pk)
    cache.delete(plancache._key(queue.pk, f"step:{version}"))  # evicted, or its writer died
    picture, _now = picture_in_another_process(queue)
    assert picture is None


def test_a_walk_longer_than_the_limit_means_the_database(queue, monkeypatch):
    monkeypatch.setattr(plancache, "WALK_MAX", 1)  # the fixture's requests left 6 steps
    picture, _now = picture_in_another_process(queue)
    assert picture is None


def test_a_cache_that_fails_means_the_database(queue, monkeypatch):
    def broken(*args, **kwargs):
        raise ConnectionError("cache down")

    monkeypatch.setattr(cache, "get", broken)
    picture, _now = picture_in_another_process(queue)
    assert picture is None
    monkeypatch.setattr(cache, "set", broken)
    with transaction.atomic():  # and a pass whose step cannot be written still commits
        Lease.objects.filter(card_model=queue).update(description="x")
        queue_tick(queue.pk)


def test_nothing_is_shared_before_the_commit_or_after_a_rollback(queue, alice, vision):
    before = plancache.version_now(queue.pk)
    with pytest.raises(RuntimeError), transaction.atomic():
        ask(alice, vision, queue, count=1, duration=hours(2))
        raise RuntimeError("rolled back")
    assert plancache.version_now(queue.pk) == before
    for version in range(before + 1, before + 20):
        for what in ("step", "base"):
            assert cache.get(plancache._key(queue.pk, f"{what}:{version}")) is None


def test_a_pass_that_writes_nothing_leaves_the_version_and_every_picture_current(
    queue, committed, frozen
):
    with committed():
        queue_tick(queue.pk)  # plans the whole queue (no pass on record)
    version = plancache.version_now(queue.pk)
    frozen.shift(1)
    with committed():
        queue_tick(queue.pk)  # only time moved, nothing is due
    assert plancache.version_now(queue.pk) == version


def test_the_worker_leaves_a_fresh_base_every_so_many_steps(queue, monkeypatch, committed):
    sent = []
    monkeypatch.setattr(plancache, "enqueue_after_commit", lambda *a: sent.append(a))
    monkeypatch.setattr(plancache, "BASE_EVERY", 2)
    picture, _now = picture_in_another_process(queue)  # walked from the first base
    for n in range(3):
        with committed():
            ask(queue.leases.first().user, queue.leases.first().team, queue, count=1,
                duration=hours(2 + n))  # fmt: skip
    assert ("leasing.tasks.plan_share", queue.pk) in sent
    old = cache.get(plancache._key(queue.pk, "base"))  # the base the first queued pass left
    assert old is not None
    assert plancache.share(queue.pk)
    version = plancache.version_now(queue.pk)
    assert cache.get(plancache._key(queue.pk, "base")) == version
    assert cache.get(plancache._key(queue.pk, f"base:{version}")) is not None
    assert cache.get(plancache._key(queue.pk, f"base:{old}")) is None  # only the newest is kept
    picture, now = picture_in_another_process(queue)
    assert picture.depth == 0 and same(picture, plancache.load(queue.pk, now=now), now)


def test_sharing_off_keeps_pictures_in_the_process_only(queue, settings, alice, vision, committed):
    settings.CARDPOOL = {**settings.CARDPOOL, "PLAN_SHARING": False}
    with committed():
        ask(alice, vision, queue, count=1, duration=hours(2))
    version = plancache.version_now(queue.pk)
    assert cache.get(plancache._key(queue.pk, f"step:{version}")) is None
    picture, _now = picture_in_another_process(queue)
    assert picture is None
    assert not plancache.share(queue.pk)


def test_a_lease_that_starts_is_in_the_replayed_holders(queue, committed, frozen):
    frozen.shift(61 * 60)  # the holder's hour is over: the tick ends it and starts the queue
    from leasing.lifecycle.tasks import tick

    with committed():
        tick()
    assert Lease.objects.filter(card_model=queue, status="provisioning").exists()
    picture, now = picture_in_another_process(queue)
    assert picture is not None  # the pass after the release read the pool: it left a base
    assert same(picture, plancache.load(queue.pk, now=now), now)


def test_the_task_the_passes_ask_for_is_the_worker_s(queue):
    from portal.celery import app

    task = app.tasks["leasing.tasks.plan_share"]
    assert task.apply(args=[queue.pk]).get() is True
    version = plancache.version_now(queue.pk)
    assert cache.get(plancache._key(queue.pk, "base")) == version


def test_the_keys_carry_the_shape_of_what_is_cached(queue, monkeypatch):
    """After a deploy that changes a cached class, the old entries are under other keys."""
    version = plancache.version_now(queue.pk)
    assert plancache.shape_fingerprint() in plancache._key(queue.pk, f"step:{version}")
    monkeypatch.setattr(plancache, "_SHAPE", "another-shape")
    picture, _now = picture_in_another_process(queue)
    assert picture is None  # nothing of the other shape is read: the database instead


def test_a_step_that_cannot_be_replayed_means_the_database(queue, alice, vision, committed):
    version = plancache.version_now(queue.pk)
    key = plancache._key(queue.pk, f"step:{version}")
    since, added, _applied, then = cache.get(key)
    cache.set(key, (since, added, ("an", "entry", "of", "an", "old", "shape"), then))
    picture, _now = picture_in_another_process(queue)
    assert picture is None
    plancache.forget()
    with committed():  # and a request meeting it is planned from the database
        lease = ask(alice, vision, queue, count=1, duration=hours(2))
    picture, now = picture_in_process(queue, dict(plancache._kept))
    assert lease.pk in [w.request.lease_id for w in picture.waiting]
    assert same(picture, plancache.load(queue.pk, now=now), now)
