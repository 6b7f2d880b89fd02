"""A request that joins a queue is planned exactly against the leases ahead of it and
answered at once; those behind it are left stale (``QueueMark``) until the refresh plans
them. Random queues on a full pool: every answer that claims to be exact (planned cards
stored) is what the full planner gives that lease, an answer behind a stale stretch is an
estimate only, and after the refresh the stored plan is exactly the full planner's."""

import random
from datetime import timedelta

import pytest

from leasing.choices import LeaseStatus
from leasing.models import Lease, QueueMark
from leasing.scheduler import joining, planner, refresh
from leasing.scheduler.run import queue_advance
from leasing.scheduler.snapshot import card_slots, queued_requests, timeline_for, waiting_for
from tests.leasing.conftest import T0, ask, hours


def stored(model):
    return {
        pk: (eta, tuple(cards) if cards else None)
        for pk, eta, cards in Lease.objects.filter(
            card_model=model, status=LeaseStatus.QUEUED
        ).values_list("pk", "estimated_start", "planned_cards")
    }


def full_plan(model):
    """What the full planner decides for every waiting lease now, without writing."""
    queue = queued_requests(model.pk, now=T0)
    decisions = planner.plan_queue(
        card_slots(model.pk, now=T0), timeline_for(model.pk, now=T0), queue
    )
    return {d.lease_id: d for d in decisions}


@pytest.mark.parametrize("seed", range(10))
def test_answers_are_exact_or_marked_and_the_refresh_makes_the_plan_exact(
    seed, frozen, alice, bob, vision, nlp, a100, small_pool, monkeypatch
):
    rng = random.Random(seed)
    # a request plans 1-3 leases itself (8 cards each), the rest is left to the refresh
    monkeypatch.setattr(joining, "JOIN_BUDGET", 8 * (1 + seed % 3))
    if seed % 2:
        monkeypatch.setattr(refresh, "REFRESH_BUDGET", 0)  # one lease per slice
    ask(bob, nlp, a100, count=8, duration=hours(1), same_node=False)  # the pool, for 1 h
    exact = estimates = 0
    for i in range(12):
        user, team = (alice, vision) if i % 2 else (bob, nlp)
        lease = ask(
            user, team, a100, count=rng.randint(1, 4),
            duration=timedelta(minutes=30 * rng.randint(1, 16)),
        )  # fmt: skip
        assert lease.status == LeaseStatus.QUEUED
        lease.refresh_from_db()
        mark = QueueMark.objects.filter(card_model=a100).first()
        key = next(w.key for w in waiting_for(a100.pk, now=T0) if w.request.lease_id == lease.pk)
        want = full_plan(a100)[lease.pk]
        if lease.planned_cards is not None:
            exact += 1
            assert (lease.estimated_start, tuple(lease.planned_cards)) == (
                want.start, want.card_ids,
            )  # fmt: skip
        else:
            estimates += 1
            assert mark is not None and key > mark.key  # only behind a stale stretch
            assert lease.estimated_start is not None
        if rng.random() < 0.3:  # the refresh sometimes runs between requests
            while refresh.queue_refresh(a100.pk):
                pass
    assert exact > 0
    slices = 1
    while refresh.queue_refresh(a100.pk):
        slices += 1
    assert not QueueMark.objects.filter(card_model=a100).exists()
    refreshed = stored(a100)
    want = full_plan(a100)
    assert refreshed == {pk: (d.start, d.card_ids) for pk, d in want.items()}
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
    while refresh.queue_refresh(a100.pk):
        pass
    long.refresh_from_db()
    assert long.estimated_start == full_plan(a100)[long.pk].start


def test_a_short_queue_is_exact_at_once(frozen, alice, bob, vision, nlp, a100, small_pool):
    ask(bob, nlp, a100, count=8, duration=hours(1), same_node=False)
    for n in range(6):
        ask(bob, nlp, a100, count=1 + n % 4, duration=hours(8 - n))  # each ahead of the last
    assert not QueueMark.objects.exists()
    assert stored(a100) == {pk: (d.start, d.card_ids) for pk, d in full_plan(a100).items()}
