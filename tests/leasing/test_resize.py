"""Resize within a family: more or fewer cards in place, or another model — new cards first."""

import pytest
from django.core.exceptions import ValidationError

from leasing.choices import LeaseStatus
from leasing.lifecycle import provisioning, resize
from leasing.teams import services as team_services
from tests.factories import CardModelFactory, make_node
from tests.leasing.conftest import T0, ask, hours


def active(lease):
    provisioning.provision_step(lease_id=lease.pk)
    lease.refresh_from_db()
    return lease


def test_grow_in_place_on_the_same_node(frozen, alice, vision, a100, small_pool):
    lease = active(ask(alice, vision, a100, count=2, duration=hours(4)))
    node = lease.allocations.first().card.node_id
    frozen.shift(hours(1))
    grown = resize.lease_resize(lease=lease, user=alice, count=4)
    assert grown.pk == lease.pk and grown.count == 4
    current = grown.allocations.filter(end_at__gt=T0 + hours(1)).select_related("card")
    assert current.count() == 4 and {a.card.node_id for a in current} == {node}
    assert provisioning.change_step(lease_id=grown.pk)  # the backend answers the new access
    grown.refresh_from_db()
    assert len(grown.access["nodes"][0]["devices"]) == 4


def test_shrink_frees_cards_at_once(frozen, alice, bob, vision, nlp, a100):
    make_node(a100, cards=4, domains=1, hostname="s")
    lease = active(ask(alice, vision, a100, count=4, duration=hours(4)))
    waiting = ask(bob, nlp, a100, count=2)
    frozen.shift(hours(1))
    resize.lease_resize(lease=lease, user=alice, count=2)
    waiting.refresh_from_db()
    assert waiting.status == LeaseStatus.PROVISIONING


def test_grow_refused_when_cards_are_not_free(frozen, alice, bob, vision, nlp, a100):
    make_node(a100, cards=4, domains=1, hostname="g")
    lease = active(ask(alice, vision, a100, count=2))
    ask(bob, nlp, a100, count=2)
    with pytest.raises(ValidationError, match="not free"):
        resize.lease_resize(lease=lease, user=alice, count=3)
    lease.refresh_from_db()
    assert lease.count == 2


def test_move_to_another_model_of_the_family_keeps_old_cards_until_new_are_held(
    frozen, alice, vision, a100, small_pool
):
    bigger = CardModelFactory(slug="a100-bigger", family=a100.family)
    make_node(bigger, cards=4, domains=1, hostname="big")
    lease = active(ask(alice, vision, a100, count=2, duration=hours(6)))
    frozen.shift(hours(2))
    new = resize.lease_resize(lease=lease, user=alice, card_model=bigger)
    lease.refresh_from_db()
    assert (
        new.status == LeaseStatus.PROVISIONING
        and new.replaces == lease
        and new.end_at == lease.end_at
    )
    assert lease.status == LeaseStatus.ACTIVE  # still holding its cards
    provisioning.provision_step(lease_id=new.pk)
    lease.refresh_from_db()
    assert lease.status == LeaseStatus.RELEASING  # released only once the new cards are held


def test_move_outside_the_family_is_refused(frozen, alice, vision, a100, small_pool):
    other = CardModelFactory(slug="other-fam", family="another")
    make_node(other, cards=2, domains=1, hostname="o")
    lease = active(ask(alice, vision, a100))
    with pytest.raises(ValidationError, match="same family"):
        resize.lease_resize(lease=lease, user=alice, card_model=other)


def test_resize_respects_the_team_quota(frozen, alice, ops, vision, a100, small_pool):
    team_services.quota_set(user=ops, team=vision, card_model=a100, max_concurrent_cards=3)
    lease = active(ask(alice, vision, a100, count=2))
    with pytest.raises(ValidationError, match="at most 3 cards"):
        resize.lease_resize(lease=lease, user=alice, count=4)


def test_api_resize(api, frozen, alice, vision, a100, small_pool):
    lease = active(ask(alice, vision, a100, count=1))
    api.force_authenticate(alice)
    api.credentials(HTTP_ACCEPT_LANGUAGE="en")
    response = api.post(f"/api/v1/leases/{lease.pk}/resize/", {"count": 2}, format="json")
    assert response.status_code == 200 and response.json()["count"] == 2
    bad = api.post(f"/api/v1/leases/{lease.pk}/resize/", {"card_model": "nope"}, format="json")
    assert bad.status_code == 400


def test_resize_from_the_lease_page(client, frozen, alice, vision, a100, small_pool):
    lease = active(ask(alice, vision, a100, count=1))
    client.force_login(alice)
    client.cookies["django_language"] = "en"
    page = client.get(f"/leases/{lease.pk}/").content.decode()
    assert 'id="resize"' in page
    client.post(f"/leases/{lease.pk}/resize/", {"count": "3", "card_model": a100.slug})
    lease.refresh_from_db()
    assert lease.count == 3
    bad = client.post(f"/leases/{lease.pk}/resize/", {"count": "many"}, follow=True)
    assert "whole number" in bad.content.decode()
