"""Drains end on time and say so (issue #32): the tick (every 2 s, like expiry) ends the leases
on a drained node, with end reason ``drain`` (a failed card's end is ``faulty``), billed to the
drain time; the lease page's "cost to the end" prices to the drain-moved end; operators undo a
drain through the API as from the node page."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest

from inventory.models import Node
from leasing.billing import accrued
from leasing.choices import EndReason, LeaseStatus
from leasing.lifecycle import maintenance, provisioning
from leasing.lifecycle import tasks as lease_tasks
from leasing.lifecycle.selectors import lease_truth
from leasing.models import Lease
from tests.factories import make_node
from tests.leasing.conftest import T0, ask, hours


@pytest.fixture
def node(a100):
    return make_node(a100, cards=2, domains=1, hostname="d1")


def _running(lease):
    provisioning.provision_step(lease_id=lease.pk)
    lease.refresh_from_db()
    return lease


def test_the_tick_ends_drained_leases_at_the_drain_time_with_reason_drain(
    frozen, alice, vision, a100, node, ops
):
    lease = _running(ask(alice, vision, a100, duration=hours(5)))
    maintenance.node_drain(user=ops, node=node, drain_at=T0 + hours(1))
    frozen.move_to(T0 + hours(1) + timedelta(seconds=1))
    # The tick alone (not the 15 s sweep) ends it.
    assert lease_tasks.tick()["drained"] == 1
    lease.refresh_from_db()
    assert lease.status == LeaseStatus.RELEASING
    assert lease.end_reason == EndReason.DRAIN
    assert lease.ended_at == T0 + hours(1)  # billed to the drain time, not the tick's
    assert lease.events.filter(kind="drain").exists()
    assert Node.objects.get(pk=node.pk).status == Node.Status.MAINTENANCE


def test_a_failed_card_ends_its_lease_with_reason_faulty(frozen, alice, vision, a100, ops):
    make_node(a100, cards=1, domains=1, hostname="f1")
    lease = _running(ask(alice, vision, a100))
    card = lease.allocations.get().card
    assert maintenance.card_mark_faulty(user=ops, card=card) == "ended"
    lease.refresh_from_db()
    assert lease.end_reason == EndReason.FAULTY


def test_cost_to_the_end_stops_at_the_drain(frozen, alice, vision, a100, node, ops):
    lease = _running(ask(alice, vision, a100, duration=hours(5)))
    before = accrued.lease_cost(lease, now=T0)["to_end"]
    maintenance.node_drain(user=ops, node=node, drain_at=T0 + hours(1))
    lease = Lease.objects.get(pk=lease.pk)
    after = accrued.lease_cost(lease, now=T0, until=lease_truth(lease, now=T0).end)["to_end"]
    assert before > 0 and after * 5 == before
    assert after == Decimal(a100.price_per_hour)


def test_operators_undrain_through_the_api(api, frozen, alice, vision, a100, node, ops):
    lease = _running(ask(alice, vision, a100, duration=hours(5)))
    maintenance.node_drain(user=ops, node=node, drain_at=T0 + hours(1))
    api.force_authenticate(alice)
    assert api.post("/api/v1/nodes/d1/undrain/", {}, format="json").status_code == 403
    api.force_authenticate(ops)
    bad = api.post("/api/v1/nodes/d1/undrain/", {"when": "now"}, format="json")
    assert bad.status_code == 400 and "when" in bad.content.decode()
    assert Node.objects.get(pk=node.pk).status == Node.Status.DRAINING
    answer = api.post("/api/v1/nodes/d1/undrain/", {}, format="json")
    assert answer.status_code == 200
    assert answer.json()["status"] == "active" and answer.json()["drain_at"] is None
    again = api.post("/api/v1/nodes/d1/undrain/", {}, format="json")
    assert again.status_code == 400  # nothing to undrain, said so
    frozen.move_to(T0 + hours(2))
    lease_tasks.tick()
    lease.refresh_from_db()
    assert lease.status == LeaseStatus.ACTIVE
