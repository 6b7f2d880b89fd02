"""The SQL fast path (scheduler/fastpath.py) chooses exactly the cards the planner would."""

from __future__ import annotations

import random
from datetime import timedelta

import pytest

from inventory.models import Card, Node
from leasing.choices import LeaseStatus
from leasing.models import Lease
from leasing.scheduler import fastpath, planner
from leasing.scheduler.snapshot import card_slots, timeline_for
from tests.factories import make_node
from tests.leasing.conftest import T0, ask, hours


def _random_pool(rng: random.Random, model) -> None:
    for i in range(rng.randint(3, 7)):
        status = rng.choice([Node.Status.ACTIVE] * 4 + [Node.Status.DRAINING, Node.Status.OFFLINE])
        make_node(
            model,
            cards=rng.choice([2, 4, 8]),
            domains=rng.choice([1, 2, 4]),
            hostname=f"n{i}",
            status=status,
            drain_at=T0 + hours(rng.choice([1, 3, 6])) if status == Node.Status.DRAINING else None,
        )
    cards = list(Card.objects.filter(card_model=model).values_list("pk", flat=True))
    faulty = rng.sample(cards, k=len(cards) // 8)
    Card.objects.filter(pk__in=faulty).update(status=Card.Status.FAULTY)
    # Cards the pool-health rules keep out (hot, or on a silent node): one rule for both ways.
    unhealthy = rng.sample(cards, k=len(cards) // 8)
    for pk in unhealthy:
        health = rng.choice([Card.Health.HOT, Card.Health.UNKNOWN])
        Card.objects.filter(pk=pk).update(health=health)


@pytest.mark.parametrize("seed", range(10))
def test_place_now_chooses_what_the_planner_chooses(frozen, alice, vision, a100, seed):
    rng = random.Random(seed)
    _random_pool(rng, a100)
    # Busy periods made by the real request path: now, later (reservations), all sizes.
    for _ in range(rng.randint(2, 12)):
        later = rng.choice([None, None, T0 + hours(rng.choice([1, 2, 5]))])
        ask(
            alice,
            vision,
            a100,
            count=rng.choice([1, 1, 2, 3, 4]),
            duration=hours(rng.choice([1, 2, 4, 8])),
            start_at=later,
            same_node=rng.random() < 0.8,
        )
    # Some holders are being preempted: their cards are busy only until preempt_at.
    running = list(
        Lease.objects.filter(status=LeaseStatus.PROVISIONING).values_list("pk", flat=True)
    )
    for pk in rng.sample(running, k=len(running) // 3):
        at = T0 + timedelta(minutes=rng.choice([-5, 0, 10, 90]))
        Lease.objects.filter(pk=pk).update(preempt_at=at)

    where = {c.card_id: (c.node_id, c.domain) for c in card_slots(a100.pk, now=T0)}
    compared = 0
    for count in (1, 2, 3, 4, 6, 8):
        for minutes in (30, 120, 300, 600):
            end = T0 + timedelta(minutes=minutes)
            expected = planner.place(
                card_slots(a100.pk, now=T0),
                timeline_for(a100.pk, now=T0),
                count,
                T0,
                end,
                same_node=True,
            )
            got = fastpath.place_now(a100.pk, count=count, start=T0, end=end)
            if got is not None:
                assert got == expected, (count, minutes)
                assert not Card.objects.filter(pk__in=got).exclude(health=Card.Health.OK).exists()
                compared += 1
            else:
                # Only what needs more than one interconnect domain goes to the full pass.
                assert expected is None or len({where[c] for c in expected}) > 1, (count, minutes)
    assert compared > 0


def test_a_request_meeting_no_queue_is_placed_with_the_same_record(frozen, alice, vision, a100):
    make_node(a100, cards=8, domains=2, hostname="a")
    make_node(a100, cards=4, domains=1, hostname="b")
    lease = ask(alice, vision, a100, count=3)
    assert lease.status == LeaseStatus.PROVISIONING
    # Best fit: the 4-card node, not a 4-card island of the 8-card node.
    assert {a.card.node.hostname for a in lease.allocations.all()} == {"b"}
    assert [(e.kind, e.from_status, e.to_status) for e in lease.events.all()] == [
        ("requested", "", ""),
        ("placed", LeaseStatus.QUEUED, LeaseStatus.PROVISIONING),
    ]
    assert lease.start_at == T0 and lease.end_at == T0 + hours(2)


def test_a_waiting_lease_is_not_overtaken_by_the_fast_path(frozen, alice, vision, a100):
    """With a queue, a new request goes through the full pass, which keeps the order."""
    make_node(a100, cards=4, domains=1, hostname="a")
    ask(alice, vision, a100, count=3, duration=hours(1))
    big = ask(alice, vision, a100, count=4)  # waits for the 3 to end
    assert big.status == LeaseStatus.QUEUED and big.estimated_start == T0 + hours(1)
    # 10 card-hours: behind the waiting 8 card-hours in the queue order (queueplan.slack)
    small = ask(alice, vision, a100, count=1, duration=hours(10))
    # One card is free now, but taking it for 10 h would delay the waiting lease: backfill
    # may only use it if it ends before the waiting lease's reservation.
    assert small.status == LeaseStatus.QUEUED
    short = ask(alice, vision, a100, count=1, duration=timedelta(minutes=30))
    assert short.status == LeaseStatus.PROVISIONING


@pytest.mark.parametrize("seed", range(5))
def test_place_now_on_allowed_nodes_chooses_what_the_planner_chooses(
    frozen, alice, vision, a100, seed
):
    """A lease's node requirements (region, network, stack version) narrow both alike."""
    rng = random.Random(seed)
    _random_pool(rng, a100)
    for _ in range(rng.randint(2, 8)):
        ask(alice, vision, a100, count=rng.choice([1, 2, 3]), duration=hours(rng.choice([1, 4])))
    nodes = list(Node.objects.values_list("pk", flat=True))
    allowed = frozenset(rng.sample(nodes, k=max(1, len(nodes) // 2)))
    where = {c.card_id: (c.node_id, c.domain) for c in card_slots(a100.pk, now=T0)}
    for count in (1, 2, 4):
        end = T0 + hours(2)
        request = planner.Request(0, count, hours(2), T0, True, allowed)
        expected = planner.place(
            planner.cards_for(card_slots(a100.pk, now=T0), request),
            timeline_for(a100.pk, now=T0),
            count,
            T0,
            end,
            same_node=True,
        )
        got = fastpath.place_now(a100.pk, count=count, start=T0, end=end, nodes=allowed)
        if got is not None:
            assert got == expected
            assert {where[c][0] for c in got} <= allowed
        else:  # only what needs more than one interconnect domain goes to the full pass
            assert expected is None or len({where[c] for c in expected}) > 1
    no_node = fastpath.place_now(a100.pk, count=1, start=T0, end=T0 + hours(1), nodes=frozenset())
    assert no_node is None
