"""Operators drain nodes and mark cards faulty through the API and the admin."""

from datetime import timedelta

import pytest
from django.utils import timezone

from inventory.models import Card, Node
from leasing.lifecycle import provisioning
from leasing.lifecycle import requests as lease_requests
from tests.factories import CardModelFactory, make_node


@pytest.fixture
def pool(db):
    model = CardModelFactory(slug="maint-a100")
    return model, make_node(model, cards=2, domains=1, hostname="maint01")


def test_operator_drains_a_node_and_holders_are_counted(api, alice, ops, vision, pool):
    model, node = pool
    lease = lease_requests.lease_request(
        user=alice, team=vision, card_model=model, count=1, duration=timedelta(hours=5)
    )
    provisioning.provision_step(lease_id=lease.pk)
    api.force_authenticate(ops)
    at = (timezone.now() + timedelta(hours=1)).isoformat()
    response = api.post("/api/v1/nodes/maint01/drain/", {"drain_at": at}, format="json")
    assert response.status_code == 200 and response.json() == {"warned": 1}
    node.refresh_from_db()
    assert node.status == Node.Status.DRAINING
    past = api.post(
        "/api/v1/nodes/maint01/drain/", {"drain_at": "2020-01-01T00:00:00Z"}, format="json"
    )
    assert past.status_code == 400


def test_members_cannot_drain_or_mark_faulty(api, alice, pool):
    api.force_authenticate(alice)
    at = (timezone.now() + timedelta(hours=1)).isoformat()
    assert (
        api.post("/api/v1/nodes/maint01/drain/", {"drain_at": at}, format="json").status_code == 403
    )
    assert api.post("/api/v1/cards/maint01-0/faulty/", {}, format="json").status_code == 403
    assert Node.objects.get().status == Node.Status.ACTIVE
    assert not Card.objects.filter(status=Card.Status.FAULTY).exists()


def test_operator_marks_a_held_card_faulty_and_the_lease_moves(api, alice, ops, vision, pool):
    model, node = pool
    lease = lease_requests.lease_request(
        user=alice, team=vision, card_model=model, count=1, duration=timedelta(hours=5)
    )
    provisioning.provision_step(lease_id=lease.pk)
    held = lease.allocations.get().card
    api.force_authenticate(ops)
    response = api.post(f"/api/v1/cards/{held.uuid}/faulty/", {"note": "XID 79"}, format="json")
    assert response.status_code == 200 and response.json() == {"lease": "moved"}
    held.refresh_from_db()
    assert held.status == Card.Status.FAULTY and held.health_note == "XID 79"


def test_admin_actions(client, ops, pool):
    ops.is_staff = ops.is_superuser = True
    ops.save()
    model, node = pool
    client.force_login(ops)
    client.post(
        "/admin/inventory/node/", {"action": "drain_in_one_hour", "_selected_action": [node.pk]}
    )
    node.refresh_from_db()
    assert node.status == Node.Status.DRAINING
    card = node.cards.first()
    client.post("/admin/inventory/card/", {"action": "mark_faulty", "_selected_action": [card.pk]})
    card.refresh_from_db()
    assert card.status == Card.Status.FAULTY
