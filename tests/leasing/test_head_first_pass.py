"""The queue pass backfills around the head alone where one team waits (scheduler.headfirst):
a lease of that team that fits now on cards free until the head's start starts now, though
it passes one of its own team's waiting leases, which is planned again behind it; with two
teams waiting it waits its turn. The preview says what the pass does."""

import pytest
from django.core.cache import cache

from leasing.choices import LeaseStatus
from leasing.models import Lease, LeaseEvent, QueueMark
from leasing.notify.messages import estimate_why
from leasing.scheduler import joining, refresh
from leasing.scheduler.preview import lease_preview
from leasing.teams import services as team_services
from tests.leasing.conftest import T0, ask, hours
from tests.leasing.passes import queue_advance


def _queue(alice, vision, a100):
    """gpu0 held for 2 h, two cards of gpu1 for 1 h; the head needs all eight cards for 15 min
    from T0 + 2 h; four cards of one node for 30 min are planned on gpu1 from T0 + 1 h."""
    held = [ask(alice, vision, a100, count=n, duration=hours(h)) for n, h in ((4, 2), (2, 1))]
    head = ask(alice, vision, a100, count=8, duration=hours(0.25), same_node=False)
    hole = ask(alice, vision, a100, count=4, duration=hours(0.5))
    assert [lease.status for lease in held] == [LeaseStatus.PROVISIONING] * 2
    assert [head.estimated_start, hole.estimated_start] == [T0 + hours(2), T0 + hours(1)]
    return head, hole


def test_one_team_waiting_a_lease_that_fits_before_the_head_starts_now(
    frozen, alice, vision, a100, small_pool
):
    head, hole = _queue(alice, vision, a100)
    # 90 min on gpu1's two free cards: it ends before the head starts, but runs into the
    # 30-min lease's reservation
    said = lease_preview(card_model=a100, count=2, duration=hours(1.5), team_id=vision.pk)
    assert said == T0
    passer = ask(alice, vision, a100, count=2, duration=hours(1.5))
    assert passer.status == LeaseStatus.PROVISIONING
    head.refresh_from_db()
    hole.refresh_from_db()
    assert head.estimated_start == T0 + hours(2)  # never delayed
    assert hole.estimated_start == T0 + hours(1.5)  # behind the one that passed it
    moved = LeaseEvent.objects.filter(lease=hole, kind="estimate_moved").get()
    assert (moved.data["why"], moved.data["lease"]) == ("team_passed", passer.pk)
    assert estimate_why("team_passed", moved.data).startswith("a later request of its team")
    # what a full pass decides
    stored = {pk: (eta, cards) for pk, eta, cards in _plans(a100)}
    queue_advance(card_model_ids=[a100.pk])
    assert {pk: (eta, cards) for pk, eta, cards in _plans(a100)} == stored


def test_two_teams_waiting_every_reservation_holds(
    frozen, alice, bob, vision, nlp, a100, small_pool
):
    head, hole = _queue(alice, vision, a100)
    said = lease_preview(card_model=a100, count=2, duration=hours(1.5), team_id=nlp.pk)
    assert said == T0 + hours(2.25)
    other = ask(bob, nlp, a100, count=2, duration=hours(1.5))
    assert other.status == LeaseStatus.QUEUED
    assert other.estimated_start == said
    hole.refresh_from_db()
    assert hole.estimated_start == T0 + hours(1)


def _plans(model):
    return Lease.objects.filter(card_model=model, status=LeaseStatus.QUEUED).values_list(
        "pk", "estimated_start", "planned_cards"
    )


def test_a_queue_left_stale_by_a_request_is_settled_by_the_refresh(
    frozen, alice, vision, a100, small_pool, monkeypatch
):
    monkeypatch.setattr(joining, "JOIN_BUDGET", 8)  # a request plans only itself
    head, hole = _queue(alice, vision, a100)
    ask(alice, vision, a100, count=1, duration=hours(10))  # behind the passer, once it asks
    passer = ask(alice, vision, a100, count=2, duration=hours(1.5))
    # those behind it are stale: nothing passes anyone until the whole queue is planned
    assert passer.status == LeaseStatus.QUEUED
    assert QueueMark.objects.filter(card_model=a100).exists()
    while refresh.queue_refresh(a100.pk):
        pass
    passer.refresh_from_db()
    hole.refresh_from_db()
    head.refresh_from_db()
    assert passer.status == LeaseStatus.PROVISIONING
    assert (head.estimated_start, hole.estimated_start) == (T0 + hours(2), T0 + hours(1.5))
    stored = {pk: (eta, cards) for pk, eta, cards in _plans(a100)}
    queue_advance(card_model_ids=[a100.pk])
    assert {pk: (eta, cards) for pk, eta, cards in _plans(a100)} == stored


@pytest.mark.parametrize("whole_pass", [False, True])
def test_the_tick_starts_what_a_pass_starts_when_a_requested_start_comes(
    frozen, alice, vision, a100, small_pool, django_capture_on_commit_callbacks, whole_pass
):
    # only time moves, no planned start comes: the kept plan is trusted unless a lease whose
    # requested start came now fits around the head (two cards of gpu1, 90 min from +15 min)
    cache.clear()

    def tick():
        with django_capture_on_commit_callbacks(execute=True):
            refresh.queue_tick(a100.pk)

    _queue(alice, vision, a100)
    later = ask(alice, vision, a100, count=2, duration=hours(1.5), start_at=T0 + hours(0.25))
    assert later.status == LeaseStatus.QUEUED
    tick()  # a whole pass on record
    frozen.move_to(T0 + hours(0.25) - hours(1 / 120))
    tick()  # trusted: the plan kept on the picture
    frozen.move_to(T0 + hours(0.25))
    if whole_pass:
        queue_advance(card_model_ids=[a100.pk])
    else:
        tick()
    later.refresh_from_db()
    assert later.status == LeaseStatus.PROVISIONING


def test_a_model_with_a_guaranteed_share_keeps_every_reservation_and_the_preview_says_so(
    frozen, ops, alice, vision, nlp, a100, small_pool
):
    # a share plans the whole queue on every pass, in its own order: no backfill around the head
    team_services.share_set(user=ops, team=nlp, card_model=a100, cards=1, within_minutes=60)
    _queue(alice, vision, a100)
    said = lease_preview(card_model=a100, count=2, duration=hours(1.5), team_id=vision.pk)
    passer = ask(alice, vision, a100, count=2, duration=hours(1.5))
    assert said > T0
    assert passer.status == LeaseStatus.QUEUED


def test_the_preview_protects_the_real_head_when_a_start_has_come(
    frozen, alice, vision, a100, small_pool
):
    ask(alice, vision, a100, count=4, duration=hours(1))  # gpu0 for 1 h
    ask(alice, vision, a100, count=4, duration=hours(2))  # gpu1 for 2 h
    ask(alice, vision, a100, count=2, duration=hours(1))
    ask(alice, vision, a100, count=4, duration=hours(1))
    frozen.move_to(T0 + hours(1))  # the first holder's end: nobody has processed it yet
    said = lease_preview(card_model=a100, count=2, duration=hours(2), team_id=vision.pk)
    asked = ask(alice, vision, a100, count=2, duration=hours(2))
    if asked.status == LeaseStatus.PROVISIONING:
        assert said == T0 + hours(1)
    else:
        assert said == asked.estimated_start
