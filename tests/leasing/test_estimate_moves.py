"""Moves are told: a waiting lease's estimate that moves by more than the threshold leaves a
timeline event (old → new, and why), and its holder one notice per hour at most, in their
language, the latest estimate winning (``scheduler.moves``)."""

from datetime import timedelta

import pytest
from django.test import override_settings
from django.utils.dateparse import parse_datetime

from inventory.models import Card
from leasing.choices import LeaseStatus, Priority
from leasing.lifecycle.changes import lease_release
from leasing.lifecycle.maintenance import node_drain
from leasing.models import LeaseEvent, Notification
from leasing.notify.messages import notice_text
from leasing.scheduler import moves
from leasing.scheduler.eta import lease_told_start
from tests.factories import make_node
from tests.leasing.conftest import T0, ask, hours


@pytest.fixture
def two_nodes(a100):
    return [make_node(a100, cards=8, domains=1, hostname=f"n{i}") for i in range(2)]


def _node_of(lease):
    return Card.objects.get(allocations__lease=lease, index=0).node


def _moves(lease):
    return list(LeaseEvent.objects.filter(lease=lease, kind="estimate_moved").order_by("pk"))


def _notices(lease):
    return list(
        Notification.objects.filter(lease=lease, data__message="estimate_moved").order_by("pk")
    )


def test_three_moves_in_an_hour_three_events_one_notice_in_the_holders_language(
    frozen, client, alice, lena, bob, ops, vision, nlp, a100, two_nodes
):
    bob.profile.language = "zh-hans"
    bob.profile.save()
    short = ask(alice, vision, a100, count=8, duration=hours(2))  # one node until 11:00
    long = ask(alice, vision, a100, count=8, duration=hours(4))  # the other until 13:00
    assert short.status == long.status == LeaseStatus.PROVISIONING
    waiting = ask(bob, nlp, a100, count=8, duration=hours(2))
    waiting.refresh_from_db()
    assert waiting.estimated_start == T0 + hours(2)
    # told 13:01: the plan's 11:00 and room for smaller work that may pass (scheduler.eta:
    # 2 h at most, and 1 % of the 2 h wait in whole minutes); moves are measured on the
    # start told
    assert lease_told_start(waiting, now=T0) == T0 + hours(4) + timedelta(minutes=1)

    # 1. a request of higher priority joins ahead of him: 11:00 → 13:00
    frozen.shift(timedelta(minutes=10))
    high = ask(lena, vision, a100, count=8, duration=hours(3), priority=Priority.HIGH)
    assert high.status == LeaseStatus.QUEUED
    waiting.refresh_from_db()
    assert waiting.estimated_start == T0 + hours(4)
    # 2. the node he would start on is drained before he would end: 13:00 → 14:00
    frozen.shift(timedelta(minutes=10))
    node_drain(user=ops, node=_node_of(long), drain_at=T0 + hours(5))
    waiting.refresh_from_db()
    assert waiting.estimated_start == T0 + hours(5)
    # 3. a lease is released early: the high one starts now, he moves up to 11:00
    frozen.shift(timedelta(minutes=10))
    lease_release(lease=long, user=alice)
    waiting.refresh_from_db()
    assert waiting.estimated_start == T0 + hours(2)

    events = _moves(waiting)
    assert [(e.data["from"][11:16], e.data["to"][11:16], e.data["why"]) for e in events] == [
        ("05:01", "07:02", "higher_priority"),
        ("07:02", "08:02", "drain"),
        ("08:02", "05:00", "released"),
    ]  # UTC, told in Shanghai: 13:01 → 15:02, 15:02 → 16:02, 16:02 → 13:00 (each with 1 %
    # of its wait from the moment it moved, in whole minutes rounded down)
    told = _notices(waiting)
    assert len(told) == 1 and told[0].user == bob
    assert "预计开始时间" in told[0].title  # worded in bob's language when sent
    # the timeline says old → new and why, in the reader's language
    client.force_login(bob)
    page = client.get(f"/leases/{waiting.pk}/").content.decode()
    assert page.count('data-kind="estimate_moved"') == 3
    assert "12-01 13:01 → 12-01 15:02" in page

    # after the hour, the moves left untold are told once, with the latest estimate
    assert moves.estimate_notices_due(now=T0 + timedelta(minutes=40)) == 0
    frozen.shift(timedelta(minutes=55))
    assert moves.estimate_notices_due(now=T0 + timedelta(minutes=85)) == 1
    latest = _notices(waiting)
    assert len(latest) == 2
    # from what the first move told him (15:02) to the latest estimate (13:00)
    assert latest[-1].data["params"]["from"] == events[0].data["to"]
    assert latest[-1].data["params"]["to"] == events[-1].data["to"]
    assert moves.estimate_notices_due(now=T0 + timedelta(minutes=86)) == 0  # told once


def test_a_move_under_the_threshold_is_not_told(frozen, alice, bob, vision, nlp, a100, two_nodes):
    ask(alice, vision, a100, count=8, duration=hours(2))
    ask(alice, vision, a100, count=8, duration=hours(4))
    waiting = ask(bob, nlp, a100, count=8, duration=hours(2))
    with override_settings(CARDPOOL={**_cardpool(), "ESTIMATE_MOVE_MINUTES": 180}):
        ask(bob, nlp, a100, count=8, duration=hours(1), priority=Priority.NORMAL)
        told = lease_told_start(waiting, now=T0)
        moved = moves.estimates_moved(
            [(waiting.pk, told, told + hours(2), None)], now=T0
        )  # two hours: under a three-hour threshold
    assert moved == [] and _moves(waiting) == []


def test_the_notice_reads_in_english_for_an_english_reader(
    frozen, bob, nlp, alice, vision, a100, two_nodes
):
    ask(alice, vision, a100, count=8, duration=hours(2))
    ask(alice, vision, a100, count=8, duration=hours(4))
    waiting = ask(bob, nlp, a100, count=8, duration=hours(2))
    with moves.because("drain", node="n1"):
        moves.estimates_moved([(waiting.pk, T0 + hours(2), T0 + hours(5), None)], now=T0)
    from django.utils import translation

    with translation.override("en"):
        title, body = notice_text(_notices(waiting)[0])
    assert "estimated start moved" in title
    assert "because node n1 is being drained" in body


def _cardpool():
    from django.conf import settings

    return dict(settings.CARDPOOL)


def test_a_pass_that_moves_many_tells_a_few_and_the_tick_the_rest(
    frozen, monkeypatch, alice, bob, vision, nlp, a100, two_nodes
):
    ask(alice, vision, a100, count=8, duration=hours(2))
    ask(alice, vision, a100, count=8, duration=hours(4))
    waiting = [ask(bob, nlp, a100, count=8, duration=hours(2)) for _ in range(3)]
    monkeypatch.setattr(moves, "INLINE_NOTICES", 1)
    told = moves.estimates_moved(
        [(w.pk, T0 + hours(2), T0 + hours(12), None) for w in waiting], now=T0
    )
    assert len(told) == 1
    assert moves.estimate_notices_due(now=T0 + timedelta(minutes=1)) == 2
    assert sum(len(_notices(w)) for w in waiting) == 3
    assert moves.estimate_notices_due(now=T0 + timedelta(minutes=2)) == 0


def test_small_steps_add_up_to_a_move(frozen, alice, bob, vision, nlp, a100, two_nodes):
    """Measured from what the timeline last recorded (the estimate given at queueing), not
    from the last pass: three 10-minute steps are told at the second."""
    ask(alice, vision, a100, count=8, duration=hours(2))
    ask(alice, vision, a100, count=8, duration=hours(4))
    waiting = ask(bob, nlp, a100, count=8, duration=hours(2))
    given = lease_told_start(waiting, now=T0)  # what the queued event recorded
    step = timedelta(minutes=10)
    assert moves.estimates_moved([(waiting.pk, given, given + step, None)], now=T0) == []
    told = moves.estimates_moved([(waiting.pk, given + step, given + 2 * step, None)], now=T0)
    assert told == [waiting.pk]
    (event,) = _moves(waiting)
    assert [parse_datetime(event.data[k]) for k in ("from", "to")] == [given, given + 2 * step]
    # the next step is measured from that move: 10 minutes, not told
    assert (
        moves.estimates_moved([(waiting.pk, given + 2 * step, given + 3 * step, None)], now=T0)
        == []
    )


def test_time_running_out_on_the_room_for_passing_work_is_no_move(
    frozen, alice, bob, vision, nlp, lena, a100
):
    """The start told leaves room for work that may still pass (``scheduler.eta``: twice the
    time left, and 1 % of the wait) until the virtual submit time; after it the room is gone.
    A later small move is measured from what the first start told says *now*, not from the
    room it had then: a 10-minute move is no move, however long the wait."""
    make_node(a100, cards=8, domains=1, hostname="w1")
    ask(alice, vision, a100, count=8, duration=hours(48))  # the pool, two days
    waiting = ask(bob, nlp, a100, count=1, duration=timedelta(minutes=28))  # 7 min of slack
    waiting.refresh_from_db()
    assert waiting.estimated_start == T0 + hours(48)
    # told: 48 h + 14 min of room for passing work + 28 min (1 % of the wait)
    assert lease_told_start(waiting, now=T0) == T0 + hours(48) + timedelta(minutes=42)
    frozen.shift(timedelta(minutes=10))  # past its virtual submit time: told = the plan
    high = ask(lena, vision, a100, count=8, duration=timedelta(minutes=10), priority=Priority.HIGH)
    assert high.status == LeaseStatus.QUEUED
    waiting.refresh_from_db()
    assert waiting.estimated_start == T0 + hours(48) + timedelta(minutes=10)  # a real 10 min
    assert _moves(waiting) == [] and _notices(waiting) == []
    # a real move past the threshold is still told, from what the first start says now
    frozen.shift(timedelta(minutes=1))
    ask(lena, vision, a100, count=8, duration=timedelta(minutes=20), priority=Priority.HIGH)
    (event,) = _moves(waiting)
    assert parse_datetime(event.data["from"]) == T0 + hours(48)
    assert parse_datetime(event.data["to"]) == T0 + hours(48) + timedelta(minutes=30)
