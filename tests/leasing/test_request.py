"""Asking for cards: placement, the queue, estimated starts, and bad input."""

from datetime import timedelta

import pytest
from django.core.exceptions import PermissionDenied, ValidationError

from leasing.choices import LeaseStatus, Priority
from leasing.lifecycle.selectors import queue_position
from leasing.models import Allocation
from tests.factories import make_node
from tests.leasing.conftest import T0, ask, hours


def test_free_cards_are_placed_at_once_on_one_domain(frozen, alice, vision, a100, small_pool):
    lease = ask(alice, vision, a100, count=2)
    assert lease.status == LeaseStatus.PROVISIONING
    assert lease.start_at == T0 and lease.end_at == T0 + hours(2)
    cards = [a.card for a in lease.allocations.select_related("card")]
    assert len(cards) == 2
    assert len({(c.node_id, c.interconnect_domain) for c in cards}) == 1
    kinds = list(lease.events.values_list("kind", flat=True))
    assert kinds == ["requested", "placed"]


def test_second_request_fills_the_partly_used_node_first(frozen, alice, vision, a100, small_pool):
    first = ask(alice, vision, a100, count=1)
    second = ask(alice, vision, a100, count=1)
    node_of = lambda lease: lease.allocations.get().card.node_id  # noqa: E731
    assert node_of(first) == node_of(second)


def test_request_beyond_free_cards_is_queued_with_estimated_start(
    frozen, alice, bob, vision, nlp, a100, small_pool
):
    ask(alice, vision, a100, count=4, duration=hours(3))
    ask(alice, vision, a100, count=4, duration=hours(1))
    waiting = ask(bob, nlp, a100, count=4, duration=hours(1))
    assert waiting.status == LeaseStatus.QUEUED
    assert waiting.estimated_start == T0 + hours(1)
    assert not waiting.allocations.exists()
    assert list(waiting.events.values_list("kind", flat=True)) == ["requested", "queued"]


def test_estimated_start_counts_everyone_ahead(frozen, alice, bob, vision, nlp, a100, small_pool):
    ask(alice, vision, a100, count=8, duration=hours(1), same_node=False)
    first = ask(bob, nlp, a100, count=8, duration=hours(2), same_node=False)
    second = ask(bob, nlp, a100, count=8, duration=hours(2), same_node=False)
    assert first.estimated_start == T0 + hours(1)
    second.refresh_from_db()
    assert second.estimated_start == T0 + hours(3)


def test_short_request_is_served_before_a_long_one_submitted_just_before(
    frozen, alice, bob, vision, nlp, a100, small_pool
):
    """The queue order (scheduler.queueplan.service_key): inside a class, the virtual submit
    time is the submit time plus a slack that grows with the card-hours asked."""
    ask(alice, vision, a100, count=8, duration=hours(1), same_node=False)
    long = ask(bob, nlp, a100, count=8, duration=hours(2), same_node=False)
    short = ask(bob, nlp, a100, count=8, duration=hours(1), same_node=False)
    long.refresh_from_db()
    assert short.estimated_start == T0 + hours(1)
    assert long.estimated_start == T0 + hours(2)
    assert queue_position(short) == 1 and queue_position(long) == 2


def test_backfill_small_later_lease_starts_when_it_delays_nobody(
    frozen, alice, bob, vision, nlp, a100, small_pool
):
    ask(alice, vision, a100, count=4, duration=hours(2))  # node A full for 2 h
    ask(alice, vision, a100, count=2, duration=hours(4))  # node B half full for 4 h
    head = ask(bob, nlp, a100, count=4, duration=hours(1))  # needs a whole node: waits 2 h
    assert head.status == LeaseStatus.QUEUED and head.estimated_start == T0 + hours(2)
    short = ask(bob, nlp, a100, count=2, duration=hours(1))  # fits node B now, touches nobody
    assert short.status == LeaseStatus.PROVISIONING
    head.refresh_from_db()
    assert head.estimated_start == T0 + hours(2)


def test_backfill_refused_when_it_would_delay_the_head(frozen, alice, bob, vision, nlp, a100):
    node = make_node(a100, cards=2, domains=1, hostname="solo")
    ask(alice, vision, a100, count=1, duration=hours(2))
    head = ask(bob, nlp, a100, count=2, duration=hours(1))
    assert head.estimated_start == T0 + hours(2)
    greedy = ask(
        bob, nlp, a100, count=1, duration=hours(5)
    )  # the free card, but past the head's start
    assert greedy.status == LeaseStatus.QUEUED
    assert greedy.estimated_start == T0 + hours(3)
    assert node.cards.count() == 2


def test_higher_priority_goes_ahead_in_the_queue(frozen, alice, lena, bob, vision, nlp, a100):
    make_node(a100, cards=1, domains=1, hostname="one")
    ask(alice, vision, a100, duration=hours(1))
    normal = ask(bob, nlp, a100, duration=hours(1))
    high = ask(lena, vision, a100, duration=hours(1), priority=Priority.HIGH)
    normal.refresh_from_db()
    assert high.estimated_start == T0 + hours(1)
    assert normal.estimated_start == T0 + hours(2)


def test_advance_reservation_books_cards_now(frozen, alice, vision, a100, small_pool):
    start = T0 + timedelta(days=1)
    lease = ask(alice, vision, a100, count=4, start_at=start)
    assert lease.status == LeaseStatus.SCHEDULED
    assert set(lease.allocations.values_list("start_at", flat=True)) == {start}
    # The booked window is taken: an overlapping request for the whole pool must wait.
    other = ask(alice, vision, a100, count=8, duration=timedelta(days=2), same_node=False)
    assert other.status == LeaseStatus.QUEUED


@pytest.mark.parametrize(
    ("kwargs", "field", "words"),
    [
        ({"count": 0}, "count", "at least one"),
        ({"count": 9}, "count", "only 8"),
        ({"count": 5}, "count", "No node has 5"),
        ({"duration": timedelta(0)}, "duration_minutes", "longer than zero"),
        ({"duration": timedelta(days=400)}, "duration_minutes", "longest lease"),
        ({"start_at": T0 - hours(1)}, "start_at", "in the past"),
        ({"start_at": T0 + timedelta(days=365)}, "start_at", "days ahead"),
        ({"purpose": "mining"}, "purpose", "Unknown purpose"),
    ],
)
def test_bad_requests_say_what_to_change_and_write_nothing(
    frozen, alice, vision, a100, small_pool, kwargs, field, words
):
    params = {"count": 1, "duration": hours(1)} | kwargs
    with pytest.raises(ValidationError) as caught:
        ask(alice, vision, a100, **params)
    assert words in " ".join(caught.value.message_dict[field])
    assert not Allocation.objects.exists()
    assert not alice.leases.exists()


def test_team_you_are_not_in_is_refused(frozen, alice, nlp, a100, small_pool):
    with pytest.raises(PermissionDenied):
        ask(alice, nlp, a100)


def test_members_cannot_ask_for_critical_priority(frozen, alice, vision, a100, small_pool):
    with pytest.raises(PermissionDenied):
        ask(alice, vision, a100, priority=Priority.CRITICAL)


def test_model_without_cards_says_so(frozen, alice, vision):
    from tests.factories import CardModelFactory

    empty = CardModelFactory(slug="no-cards-yet", name="Empty Model")
    with pytest.raises(ValidationError, match="no Empty Model cards yet"):
        ask(alice, vision, empty)
