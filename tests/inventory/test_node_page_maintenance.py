"""Operators drain (at a chosen time), undrain and mark cards faulty from the node page, which
shows who holds which card; the admin's action messages and model names are translated."""

from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
import time_machine
from django.contrib.admin.sites import site
from django.utils import translation

from inventory.models import Card, Node
from leasing.lifecycle import provisioning
from leasing.lifecycle import requests as lease_requests
from leasing.models import Delivery, Lease, LeaseWarning
from portal.models import AuditEntry
from tests.factories import CardModelFactory, make_node

SHANGHAI = ZoneInfo("Asia/Shanghai")
T0 = datetime(2026, 12, 1, 9, 0, tzinfo=SHANGHAI)


@pytest.fixture
def frozen():
    with time_machine.travel(T0, tick=False) as traveller:
        yield traveller


@pytest.fixture
def held(db, frozen, alice, vision):
    model = CardModelFactory(slug="page-a100", name="Page A100")
    node = make_node(model, cards=2, domains=1, hostname="bj-a100-01")
    lease = lease_requests.lease_request(
        user=alice, team=vision, card_model=model, count=1, duration=timedelta(hours=5)
    )
    provisioning.provision_step(lease_id=lease.pk)
    return node, lease


def _as(client, user, language="en"):
    client.force_login(user)
    client.cookies["django_language"] = language
    return client


def test_node_page_shows_holders_to_operators_and_own_leases_to_holders(
    client, held, ops, alice, bob
):
    node, lease = held
    card = lease.allocations.get().card
    page = _as(client, ops).get("/inventory/nodes/bj-a100-01/").content.decode()
    assert f'data-holder="{card.index}"' in page
    assert f"alice · Vision · #{lease.pk}" in page
    assert 'id="drain-form"' in page and "data-card-faulty" in page
    page = _as(client, alice).get("/inventory/nodes/bj-a100-01/").content.decode()
    assert f"your lease {lease.pk}" in page and 'id="drain-form"' not in page
    page = _as(client, bob).get("/inventory/nodes/bj-a100-01/").content.decode()
    assert "data-holder" not in page and "alice" not in page


def test_operator_drains_at_a_chosen_time_in_their_zone_then_undrains(client, held, ops):
    node, lease = held
    ops.profile.timezone = "Europe/Berlin"
    ops.profile.save()
    _as(client, ops)
    # 10:00 in Berlin is 17:00 in Shanghai: before the lease's end (14:00 Shanghai)? No — after
    # it; so pick 05:00 Berlin = 12:00 Shanghai, inside the lease.
    response = client.post(
        "/inventory/nodes/bj-a100-01/drain/", {"drain_at": "2026-12-01T05:00"}, follow=True
    )
    assert "Node bj-a100-01 drains at 2026-12-01 05:00; 1 holder warned." in (
        response.content.decode()
    )
    node.refresh_from_db()
    assert node.status == Node.Status.DRAINING
    assert node.drain_at == datetime(2026, 12, 1, 12, 0, tzinfo=SHANGHAI)
    assert LeaseWarning.objects.filter(lease=lease).exists()
    assert AuditEntry.objects.filter(action="node_drain", target="bj-a100-01").exists()
    # The form shows the drain that is set (in the operator's zone), not an hour from now.
    page = client.get("/inventory/nodes/bj-a100-01/").content.decode()
    assert 'value="2026-12-01T05:00"' in page

    past = client.post(
        "/inventory/nodes/bj-a100-01/drain/", {"drain_at": "2026-11-30T05:00"}, follow=True
    )
    assert "The drain time is in the past" in past.content.decode()
    bad = client.post("/inventory/nodes/bj-a100-01/drain/", {"drain_at": "soon"}, follow=True)
    assert bad.status_code == 200 and "Enter a valid date/time." in bad.content.decode()

    response = client.post("/inventory/nodes/bj-a100-01/undrain/", follow=True)
    assert "Node bj-a100-01 takes leases again." in response.content.decode()
    node.refresh_from_db()
    assert (node.status, node.drain_at) == (Node.Status.ACTIVE, None)
    assert AuditEntry.objects.filter(action="node_undrain", target="bj-a100-01").exists()
    again = client.post("/inventory/nodes/bj-a100-01/undrain/", follow=True)
    assert "neither draining nor in maintenance" in again.content.decode()


def test_operator_marks_a_held_card_faulty_and_the_lease_moves(client, held, ops):
    node, lease = held
    card = lease.allocations.get().card
    response = _as(client, ops).post(
        f"/inventory/nodes/bj-a100-01/cards/{card.index}/faulty/",
        {"note": "ECC errors"},
        follow=True,
    )
    assert f"Card {card} is faulty: its lease moved to a spare card." in (response.content.decode())
    card.refresh_from_db()
    assert (card.status, card.health_note) == (Card.Status.FAULTY, "ECC errors")
    assert [a.card_id for a in Lease.objects.get(pk=lease.pk).cards_held] != [card.pk]


def test_members_cannot_use_the_maintenance_forms(client, held, alice):
    node, lease = held
    _as(client, alice)
    response = client.post(
        "/inventory/nodes/bj-a100-01/drain/", {"drain_at": "2026-12-01T12:00"}, follow=True
    )
    assert "Only operators drain nodes." in response.content.decode()
    client.post("/inventory/nodes/bj-a100-01/cards/0/faulty/", {})
    node.refresh_from_db()
    assert node.status == Node.Status.ACTIVE
    assert not Card.objects.filter(node=node, status=Card.Status.FAULTY).exists()


def test_admin_action_messages_are_translated_and_start_with_a_word(client, held, ops):
    node, lease = held
    ops.is_staff = ops.is_superuser = True
    ops.save()
    _as(client, ops, "zh-hans")
    response = client.post(
        "/admin/inventory/node/",
        {"action": "drain_in_one_hour", "_selected_action": [node.pk]},
        follow=True,
    )
    page = response.content.decode()
    assert "节点 bj-a100-01" in page and "Bj-a100-01" not in page


def test_every_admin_model_has_a_translated_plural():
    with translation.override("zh-hans"):
        for model in site._registry:
            plural = str(model._meta.verbose_name_plural)
            assert not plural.endswith("ys"), model
            assert plural != model._meta.object_name.lower() + "s", model
    with translation.override("en"):
        assert str(Delivery._meta.verbose_name_plural) == "deliveries"


def test_a_held_card_on_a_draining_node_shows_the_drain_as_its_end(client, held, ops):
    """The lease ends at the drain (no lease runs past it): the card says so, not its booked
    end; a drain after the booked end changes nothing."""
    from leasing.lifecycle import maintenance

    node, lease = held
    maintenance.node_drain(user=ops, node=node, drain_at=T0 + timedelta(hours=2))
    page = _as(client, ops).get("/inventory/nodes/bj-a100-01/").content.decode()
    assert 'data-busy-until="drain"' in page and "12-01 11:00" in page
    assert "12-01 14:00" not in page  # the booked end
    maintenance.node_undrain(user=ops, node=node)
    maintenance.node_drain(user=ops, node=node, drain_at=T0 + timedelta(hours=8))
    page = _as(client, ops).get("/inventory/nodes/bj-a100-01/").content.decode()
    assert 'data-busy-until="drain"' not in page and "12-01 14:00" in page
