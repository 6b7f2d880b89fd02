"""Placement respects the inventory's state: faulty cards, nodes down or draining."""

from datetime import timedelta

from inventory.models import Card, Node
from leasing.choices import LeaseStatus
from tests.factories import make_node
from tests.leasing.conftest import T0, ask, hours


def test_faulty_cards_and_nodes_out_of_service_take_no_lease(frozen, alice, vision, a100):
    good = make_node(a100, cards=2, domains=1, hostname="good")
    for status in (Node.Status.MAINTENANCE, Node.Status.OFFLINE):
        make_node(a100, cards=2, domains=1, hostname=f"n-{status}", status=status)
    Card.objects.filter(node=good, index=1).update(status=Card.Status.FAULTY)
    first = ask(alice, vision, a100)
    assert first.allocations.get().card.node == good
    second = ask(alice, vision, a100)
    assert second.status == LeaseStatus.QUEUED and second.estimated_start == T0 + hours(2)


def test_draining_node_takes_only_leases_that_end_before_the_drain(frozen, alice, vision, a100):
    make_node(
        a100,
        cards=2,
        domains=1,
        hostname="drain",
        status=Node.Status.DRAINING,
        drain_at=T0 + hours(3),
    )
    short = ask(alice, vision, a100, duration=hours(2))
    assert short.status == LeaseStatus.PROVISIONING
    long = ask(alice, vision, a100, duration=hours(4))
    assert long.status == LeaseStatus.QUEUED and long.estimated_start is None


def test_same_node_false_spreads_when_no_node_is_big_enough(
    frozen, alice, vision, a100, small_pool
):
    lease = ask(alice, vision, a100, count=6, same_node=False)
    nodes = {a.card.node_id for a in lease.allocations.select_related("card")}
    assert lease.status == LeaseStatus.PROVISIONING and len(nodes) == 2


def test_multi_card_lease_prefers_one_interconnect_domain(frozen, alice, vision, a100):
    node = make_node(a100, cards=8, domains=2, hostname="hgx")
    ask(alice, vision, a100, count=1)  # domain 0 now has 3 free, domain 1 has 4
    lease = ask(alice, vision, a100, count=4)
    domains = {a.card.interconnect_domain for a in lease.allocations.select_related("card")}
    assert len(domains) == 1 and node.cards.count() == 8
    assert lease.start_at == T0 and lease.end_at - lease.start_at == timedelta(hours=2)
