"""A request that joins a queue is planned exactly against the leases ahead of it and
answered at once; those behind it are left stale (``QueueMark``) until the refresh plans
them. Random queues on a full pool: every answer that claims to be exact (planned cards
stored) is what the full planner gives that lease, an answer behind a stale stretch is an
estimate only, and after the refresh the stored plan is exactly the full planner's."""

import random
from datetime import timedelta

import pytest
from django.utils import timezone

from inventory.models import Card
from leasing.choices import LeaseStatus
from leasing.lifecycle.changes import lease_release
from leasing.models import Lease, QueueMark
from leasing.scheduler import joining, plancache, planner, refresh
from leasing.scheduler.snapshot import card_slots, queued_requests, timeline_for, waiting_for
from tests.leasing.conftest import ask, hours
from tests.leasing.passes import queue_advance


def stored(model):
    return {
        pk: (eta, tuple(cards) if cards else None)
        for pk, eta, cards in Lease.objects.filter(
            card_model=model, status=LeaseStatus.QUEUED
        ).values_list("pk", "estimated_start", "planned_cards")
    }


def full_plan(model):
    """What the full planner decides for every waiting lease now, without writing."""
    now = timezone.now()
    queue = queued_requests(model.pk, now=now)
    decisions = planner.plan_queue(
        card_slots(model.pk, now=now), timeline_for(model.pk, now=now), queue
    )
    return {d.lease_id: d for d in decisions}


def refresh_all(model, committed=None):
    """The refresh task's loop, each slice its own transaction (committed, when given)."""
    for _slice in range(200):
        if committed is None:
            more = refresh.queue_refresh(model.pk)
        else:
            with committed():
                more = refresh.queue_refresh(model.pk)
        if not more:
            return
    raise AssertionError("the refresh did not end in 200 slices")


@pytest.mark.parametrize("seed", range(16))
def test_answers_are_exact_or_marked_and_the_refresh_makes_the_plan_exact(
    seed, frozen, alice, bob, vision, nlp, a100, small_pool, monkeypatch,
    django_capture_on_commit_callbacks,
):  # fmt: skip
    rng = random.Random(seed)
    kept = seed % 4 >= 2  # half the seeds commit, so each pass keeps its picture for the next
    # and half of those serve each step from one of two processes at random: each keeps its
    # own picture, and catches up with the other's passes through the shared steps
    processes = [{}, {}] if kept and seed >= 8 else None
    hits = []
    real_take = plancache.take
    monkeypatch.setattr(
        plancache, "take", lambda *a, **k: (p := real_take(*a, **k)) and hits.append(1) or p
    )

    def committed():
        return django_capture_on_commit_callbacks(execute=kept)

    # a request plans 1-3 leases itself (8 cards each), the rest is left to the refresh
    monkeypatch.setattr(joining, "JOIN_BUDGET", 8 * (1 + seed % 3))
    if seed % 2:
        monkeypatch.setattr(refresh, "REFRESH_BUDGET", 0)  # one lease per slice
    holder = ask(bob, nlp, a100, count=8, duration=hours(1), same_node=False)  # the pool, 1 h
    exact = estimates = 0
    for i in range(12):
        if processes:
            monkeypatch.setattr(plancache, "_kept", rng.choice(processes))
        if i == 6 and seed % 3 == 0:  # the pool frees up early: some start, in the picture
            with committed():
                lease_release(lease=holder, user=bob)
            assert Lease.objects.filter(status=LeaseStatus.PROVISIONING).exists()
        user, team = (alice, vision) if i % 2 else (bob, nlp)
        with committed():
            lease = ask(
                user, team, a100, count=rng.randint(1, 4),
                duration=timedelta(minutes=30 * rng.randint(1, 16)),
            )  # fmt: skip
        if lease.status != LeaseStatus.QUEUED:
            assert lease.status == LeaseStatus.PROVISIONING  # the pool had room: at once
            continue
        lease.refresh_from_db()
        mark = QueueMark.objects.filter(card_model=a100).first()
        key = next(
            w.key
            for w in waiting_for(a100.pk, now=timezone.now())
            if w.request.lease_id == lease.pk
        )
        want = full_plan(a100)[lease.pk]
        if mark is None or key <= mark.key:  # nothing stale ahead of it: exact
            exact += 1
            planned = tuple(lease.planned_cards or ())
            assert (lease.estimated_start, planned) == (want.start, want.card_ids)
        else:  # behind a stale stretch: an estimate, and no cards kept for it
            estimates += 1
            assert lease.planned_cards is None
        if rng.random() < 0.3:  # the refresh sometimes runs between requests
            refresh_all(a100, committed)
        if rng.random() < 0.2:  # time moves on
            frozen.shift(rng.randint(1, 120))  # the holder still holds
        if rng.random() < 0.1:  # a card's readings change (no pass of its own) ...
            Card.objects.filter(card_model=a100, index=rng.randint(0, 3)).update(
                health=rng.choice([Card.Health.OK, Card.Health.HOT])
            )
            with committed():
                queue_advance(card_model_ids=[a100.pk])  # ... which the tick notices
    assert exact > 0
    assert bool(hits) == kept  # passes used the picture the last one kept, when it was kept
    refresh_all(a100, committed)
    assert not QueueMark.objects.filter(card_model=a100).exists()
    refreshed = stored(a100)
    want = full_plan(a100)
    assert refreshed == {pk: (d.start, d.card_ids or None) for pk, d in want.items()}
    queue_advance(card_model_ids=[a100.pk])  # and a full pass changes nothing
    assert stored(a100) == refreshed


def test_a_newcomer_ahead_of_the_stale_stretch_moves_the_mark_forward(
    frozen, alice, bob, vision, nlp, a100, small_pool, monkeypatch
):
    monkeypatch.setattr(joining, "JOIN_BUDGET", 8)  # each request plans only itself
    ask(bob, nlp, a100, count=8, duration=hours(1), same_node=False)
    long = ask(bob, nlp, a100, count=4, duration=hours(8))
    assert not QueueMark.objects.exists()  # nobody behind it
    short = ask(alice, vision, a100, count=4, duration=hours(1))  # served before the long one
    mark = QueueMark.objects.get(card_model=a100)
    assert mark.lease_id_after == short.pk
    shorter = ask(alice, vision, a100, count=1, duration=hours(0.5))
    mark.refresh_from_db()
    assert mark.lease_id_after == shorter.pk
    refresh_all(a100)
    long.refresh_from_db()
    assert long.estimated_start == full_plan(a100)[long.pk].start


def test_a_short_queue_is_exact_at_once(frozen, alice, bob, vision, nlp, a100, small_pool):
    ask(bob, nlp, a100, count=8, duration=hours(1), same_node=False)
    for n in range(6):
        ask(bob, nlp, a100, count=1 + n % 4, duration=hours(8 - n))  # each ahead of the last
    assert not QueueMark.objects.exists()
    assert stored(a100) == {pk: (d.start, d.card_ids or None) for pk, d in full_plan(a100).items()}


def test_a_stale_lease_that_fits_now_is_started_by_the_refresh(
    frozen, alice, bob, vision, nlp, a100, small_pool, monkeypatch
):
    """Found by the random test above: cards freed, the pass after it (bounded) planned only
    the head, and the lease behind it that fits now was left stale; the refresh handed it to
    another bounded pass, which left it stale again, for ever."""
    ask(bob, nlp, a100, count=6, duration=hours(1), same_node=False)
    freed = ask(bob, nlp, a100, count=2, duration=hours(1))
    head = ask(alice, vision, a100, count=4, duration=hours(2))  # a whole node, in 1 h
    behind = ask(alice, vision, a100, count=2, duration=hours(8))
    assert (head.status, behind.status) == (LeaseStatus.QUEUED, LeaseStatus.QUEUED)
    monkeypatch.setattr(joining, "JOIN_BUDGET", 8)  # a pass plans one lease of this pool
    lease_release(lease=freed, user=bob)
    assert QueueMark.objects.filter(card_model=a100).exists()  # the head planned, not behind
    refresh_all(a100)
    behind.refresh_from_db()
    assert behind.status == LeaseStatus.PROVISIONING  # on the two cards freed, at once
    assert stored(a100) == {pk: (d.start, d.card_ids or None) for pk, d in full_plan(a100).items()}


def test_a_queue_that_drains_starts_in_few_slices_not_one_lease_each(
    frozen, alice, bob, vision, nlp, a100, small_pool, monkeypatch
):
    """The whole pool freed at once, seven one-card leases waiting and the pass bounded to
    one: the refresh starts the rest in one slice (nobody waits ahead of them) and, where
    they outnumber its starts (``REFRESH_STARTS``), in a slice per that many; before, each
    slice ended at the first lease that started, and a 1,600-card drain took 1,599 slices
    (bench/queue_drain.py)."""
    holder = ask(bob, nlp, a100, count=8, duration=hours(4), same_node=False)
    waiting = [ask(alice, vision, a100, count=1, duration=hours(1 + n % 3)) for n in range(7)]
    assert {w.status for w in waiting} == {LeaseStatus.QUEUED}
    monkeypatch.setattr(joining, "JOIN_BUDGET", 8)  # the release's pass plans one lease
    monkeypatch.setattr(refresh, "REFRESH_STARTS", 4)
    monkeypatch.setattr(refresh, "REFRESH_PLAN_SECONDS", 60.0)  # the count alone bounds it
    lease_release(lease=holder, user=bob)
    assert QueueMark.objects.filter(card_model=a100).exists()
    ids = [w.pk for w in waiting]
    started = Lease.objects.filter(pk__in=ids, status=LeaseStatus.PROVISIONING)
    assert started.count() == 1
    assert refresh.queue_refresh(a100.pk)  # four more start; a slice is left
    assert started.count() == 5
    assert not refresh.queue_refresh(a100.pk)  # the last two: nothing is left
    statuses = Lease.objects.filter(pk__in=ids).values_list("status", flat=True)
    assert set(statuses) == {LeaseStatus.PROVISIONING}
    assert not QueueMark.objects.filter(card_model=a100).exists()


def test_a_lease_behind_one_that_waits_still_ends_the_slice_when_it_starts(
    frozen, alice, bob, vision, nlp, a100, small_pool, monkeypatch
):
    """Where a lease ahead waits, one that starts now from behind it ends the slice: the
    ones ahead are planned again around the cards it holds (``QueuePlan.advance``), and the
    plan the refresh leaves is the full planner's."""
    ask(bob, nlp, a100, count=6, duration=hours(1), same_node=False)
    freed = ask(bob, nlp, a100, count=2, duration=hours(1))
    ask(alice, vision, a100, count=4, duration=hours(2))  # waits for a whole node
    for n in range(3):
        ask(alice, vision, a100, count=1, duration=hours(1 + n))
    monkeypatch.setattr(joining, "JOIN_BUDGET", 8)
    lease_release(lease=freed, user=bob)
    refresh_all(a100)
    assert stored(a100) == {pk: (d.start, d.card_ids or None) for pk, d in full_plan(a100).items()}
