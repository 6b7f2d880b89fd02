"""A request that joins a queue is planned into the plan the last pass stored
(Lease.planned_cards) instead of re-planning everyone, and gets exactly what a full pass
gives."""

from datetime import timedelta

from leasing.choices import LeaseStatus
from leasing.models import Lease, QueueMark
from leasing.scheduler import joining, refresh, run
from tests.leasing.conftest import T0, ask, hours
from tests.leasing.passes import queue_advance


def plans(model):
    return {
        pk: (eta, tuple(cards) if cards else cards)
        for pk, eta, cards in Lease.objects.filter(
            card_model=model, status=LeaseStatus.QUEUED
        ).values_list("pk", "estimated_start", "planned_cards")
    }


def test_joining_the_queue_reuses_the_stored_plan_and_matches_a_full_pass(
    frozen, alice, bob, vision, nlp, a100, small_pool, monkeypatch
):
    monkeypatch.setattr(joining, "JOIN_BUDGET", 8)  # each request plans only itself
    ask(alice, vision, a100, count=4, duration=hours(1))
    ask(alice, vision, a100, count=2, duration=hours(3))
    ask(alice, vision, a100, count=2, duration=hours(2))
    rebuilds = []
    real = run.plan_in_order
    monkeypatch.setattr(
        run, "plan_in_order", lambda plan, waiting: rebuilds.append(1) or real(plan, waiting)
    )
    shapes = [(4, 2), (1, 1), (2, 5), (1, 0.5), (3, 1), (1, 8), (2, 2)]
    for count, h in shapes:
        lease = ask(bob, nlp, a100, count=count, duration=timedelta(hours=h))
        assert lease.status in (LeaseStatus.QUEUED, LeaseStatus.PROVISIONING)
    assert rebuilds == []  # everyone joined the stored plan; nobody planned the queue again
    assert len(plans(a100)) >= 5
    assert all(eta is not None and eta >= T0 for eta, _cards in plans(a100).values())
    # those behind a newcomer were left stale; the refresh (a task after the commit) plans
    # them, still without planning the queue again
    assert QueueMark.objects.filter(card_model=a100).exists()
    while refresh.queue_refresh(a100.pk):
        pass
    assert rebuilds == [] and not QueueMark.objects.exists()
    joined = plans(a100)
    queue_advance(card_model_ids=[a100.pk])  # the whole queue planned again
    assert plans(a100) == joined


def test_a_stale_stored_plan_is_not_trusted(frozen, alice, bob, vision, nlp, a100, small_pool):
    ask(alice, vision, a100, count=8, duration=hours(1), same_node=False)
    waiting = ask(bob, nlp, a100, count=4, duration=hours(2))
    assert waiting.planned_cards and waiting.estimated_start == T0 + hours(1)
    # someone (not the queue pass) wrote a plan that cannot hold: cards of another model
    Lease.objects.filter(pk=waiting.pk).update(planned_cards=[999_999, 1, 2, 3])
    newcomer = ask(bob, nlp, a100, count=4, duration=hours(2))
    waiting.refresh_from_db()
    assert waiting.estimated_start == T0 + hours(1) and 999_999 not in waiting.planned_cards
    assert newcomer.estimated_start == T0 + hours(1)
    assert not set(waiting.planned_cards) & set(newcomer.planned_cards)


def test_with_a_guaranteed_share_every_join_plans_the_whole_queue(
    frozen, ops, alice, bob, vision, nlp, a100, small_pool, monkeypatch
):
    """A team within its share is served before the rest (``shares.entitled_first``), which
    the stored plan's order does not know: the pass plans the whole queue (storing its cards
    for the picture only), and the share's team comes first though it asked last."""
    from leasing.teams.services import share_set

    share_set(user=ops, team=vision, card_model=a100, cards=2, within_minutes=60)
    joins = []
    monkeypatch.setattr(run, "join_plan", lambda *a: joins.append(a) or None)
    ask(bob, nlp, a100, count=8, duration=hours(1), same_node=False)  # the pool, for 1 h
    first = ask(bob, nlp, a100, count=8, duration=hours(1), same_node=False)
    owed = ask(alice, vision, a100, count=2, duration=hours(1))
    assert joins == []
    first.refresh_from_db()
    owed.refresh_from_db()
    assert (first.status, owed.status) == (LeaseStatus.QUEUED, LeaseStatus.QUEUED)
    assert len(first.planned_cards) == 8 and len(owed.planned_cards) == 2
    assert owed.estimated_start < first.estimated_start
