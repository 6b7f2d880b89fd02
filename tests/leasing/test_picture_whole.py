"""Queues planned whole on every pass (guaranteed shares, off-peak policies) store their
planned cards like any other, so the one picture (scheduler.picture) shows them; a lease
whose off-peak policy just moved its start is re-estimated, and placed again within one
tick of the queue (``picture.re_estimated_within``)."""

from leasing.choices import LeaseStatus, StartPolicy
from leasing.lifecycle import provisioning
from leasing.scheduler.picture import PLANNED, RESERVED, model_picture
from leasing.scheduler.refresh import queue_tick
from leasing.teams.services import share_set
from tests.factories import make_node
from tests.leasing.conftest import T0, ask, hours
from tests.leasing.test_offpeak import nights as nights_fixture
from tests.leasing.test_offpeak import sh

nights = nights_fixture


def active(lease):
    provisioning.provision_step(lease_id=lease.pk)
    lease.refresh_from_db()
    return lease


def _booked(model, lease, *, now, kinds=(PLANNED, RESERVED)):
    picture = model_picture(model.pk, start=now, end=now + hours(24 * 10), now=now)
    cards = {
        c for c, bookings in picture.bookings.items()
        for b in bookings if b.kind in kinds and b.lease_id == lease.pk
    }  # fmt: skip
    return cards, [r.lease_id for r in picture.re_estimating]


def test_a_queue_with_a_guaranteed_share_stores_its_planned_cards(
    frozen, ops, lena, bob, vision, nlp, a100
):
    make_node(a100, cards=8, domains=1, hostname="s8")
    share_set(user=ops, team=vision, card_model=a100, cards=2, within_minutes=5)
    active(ask(lena, vision, a100, count=2, duration=hours(8)))
    active(ask(bob, nlp, a100, count=6, duration=hours(8)))
    more = ask(lena, vision, a100, count=2, duration=hours(1))
    assert more.status == LeaseStatus.QUEUED
    more.refresh_from_db()
    assert more.estimated_start == T0 + hours(8) and len(more.planned_cards) == 2
    cards, re_estimating = _booked(a100, more, now=T0, kinds=(PLANNED,))
    assert cards == set(more.planned_cards) and re_estimating == []
    queue_tick(a100.pk)  # the tick plans it whole again: the same cards
    more.refresh_from_db()
    assert set(more.planned_cards) == cards


def test_an_off_peak_lease_is_placed_within_one_tick_of_its_start_moving(
    nights, frozen, alice, bob, vision, nlp, a100
):
    make_node(a100, cards=2, domains=1, hostname="o2")
    busy = ask(alice, vision, a100, count=2, duration=sh(2, 3) - T0)
    assert busy.status == LeaseStatus.PROVISIONING
    night = ask(bob, nlp, a100, count=2, duration=hours(4), start_policy=StartPolicy.OFF_PEAK_ONLY)
    night.refresh_from_db()
    assert night.start_at == sh(8, 22)  # its policy moved it to next week's night
    # the pass that moved it has no cards for it there yet: re-estimated, until the next
    # tick places it (planned there, or booked: it fits when it asks to start)
    assert night.planned_cards is None
    assert _booked(a100, night, now=T0) == (set(), [night.pk])
    queue_tick(a100.pk)
    night.refresh_from_db()
    cards, re_estimating = _booked(a100, night, now=T0)
    assert len(cards) == 2 and re_estimating == []
    if night.status == LeaseStatus.QUEUED:
        assert set(night.planned_cards) == cards
    # a lease behind it that only asked for the next window: on the cards from 03:00
    later = ask(bob, nlp, a100, count=1, duration=hours(1), start_policy=StartPolicy.NEXT_OFF_PEAK)
    later.refresh_from_db()
    assert later.estimated_start == sh(2, 3) and len(later.planned_cards) == 1


def test_one_tick_places_a_whole_stale_queue(frozen, alice, bob, vision, nlp, a100):
    """The bound stated (``picture.re_estimated_within``: one tick): a queue whose stored plan
    is stale from its first lease on is on the cards again after one tick of the queue."""
    from leasing.models import QueueMark

    make_node(a100, cards=4, domains=1, hostname="st4")
    active(ask(alice, vision, a100, count=4, duration=hours(2)))
    waiting = [ask(bob, nlp, a100, count=1, duration=hours(1 + n % 3)) for n in range(24)]
    assert all(w.status == LeaseStatus.QUEUED for w in waiting)
    QueueMark.objects.create(
        card_model_id=a100.pk, rank=30000, virtual_at=T0, lease_id_after=0, since=T0
    )  # stale before everyone: as if a request of a class above all had joined
    _cards, re_estimating = _booked(a100, waiting[0], now=T0)
    assert sorted(re_estimating) == sorted(w.pk for w in waiting)
    queue_tick(a100.pk)
    assert not QueueMark.objects.filter(card_model_id=a100.pk).exists()
    _cards, re_estimating = _booked(a100, waiting[0], now=T0)
    assert re_estimating == []
