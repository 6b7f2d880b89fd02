"""Inventory REST API: card models with what is free now, nodes, cards and their filters."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
import time_machine

from inventory.models import Card, InterconnectKind, Node, Vendor
from leasing.choices import LeaseStatus
from leasing.models import Allocation, Lease
from tests.factories import CardModelFactory, RegionFactory, make_node

NOW = datetime(2026, 3, 2, 8, 0, tzinfo=UTC)


@pytest.fixture(autouse=True)
def frozen():
    with time_machine.travel(NOW, tick=False):
        yield


@pytest.fixture
def pool(db):
    nv = CardModelFactory(slug="t-nv80", vendor=Vendor.NVIDIA, memory_gb=Decimal("80"))
    asc = CardModelFactory(
        slug="t-asc64",
        vendor=Vendor.HUAWEI,
        memory_gb=Decimal("64"),
        fp8_tflops=Decimal("700"),
        interconnect_kind=InterconnectKind.HCCS,
    )
    bj = RegionFactory(slug="t-bj")
    sh = RegionFactory(slug="t-sh")
    make_node(nv, cards=8, domains=2, hostname="gpu-01.bj.example.org", region=bj)
    make_node(asc, cards=4, hostname="npu-01.sh.example.org", region=sh)
    return nv, asc


@pytest.fixture
def user_api(api, alice):
    api.force_authenticate(alice)
    return api


def hold(card: Card, user, team, *, start: datetime, end: datetime) -> Allocation:
    lease = Lease.objects.create(
        user=user,
        team=team,
        card_model=card.card_model,
        count=1,
        duration=end - start,
        start_at=start,
        end_at=end,
        status=LeaseStatus.ACTIVE,
        submitted_at=start,
    )
    return Allocation.objects.create(card=card, lease=lease, start_at=start, end_at=end)


def counts(api, slug: str) -> tuple[int, int]:
    body = api.get(f"/api/v1/card-models/{slug}/").json()
    return body["total"], body["available"]


def results(response) -> list[dict]:
    assert response.status_code == 200, response.content
    return response.json()["results"]


# --- Access -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        "/api/v1/card-models/",
        "/api/v1/card-models/t-nv80/",
        "/api/v1/nodes/",
        "/api/v1/nodes/gpu-01.bj.example.org/",
        "/api/v1/cards/",
    ],
)
def test_anonymous_gets_401(api, pool, url):
    assert api.get(url).status_code == 401


@pytest.mark.parametrize("method", ["post", "put", "patch", "delete"])
def test_read_only_even_for_operators(api, ops, pool, method):
    api.force_authenticate(ops)
    url = "/api/v1/nodes/" if method == "post" else "/api/v1/nodes/gpu-01.bj.example.org/"
    assert getattr(api, method)(url, {}, format="json").status_code == 405


# --- Card models and availability -------------------------------------------------------


def test_card_model_by_slug_has_numbers_and_counts(user_api, pool):
    body = user_api.get("/api/v1/card-models/t-asc64/").json()
    assert body["vendor"] == "huawei"
    assert body["memory_gb"] == 64
    assert body["fp8_tflops"] == 700
    assert body["interconnect_kind"] == "hccs"
    assert (body["total"], body["available"]) == (4, 4)


def test_available_drops_while_an_allocation_covers_now(user_api, alice, vision, pool):
    nv, _ = pool
    cards = list(Card.objects.filter(card_model=nv).order_by("index"))
    hold(cards[0], alice, vision, start=NOW - timedelta(hours=1), end=NOW + timedelta(hours=1))
    hold(cards[1], alice, vision, start=NOW, end=NOW + timedelta(minutes=5))  # starts right now
    hold(cards[2], alice, vision, start=NOW - timedelta(hours=2), end=NOW)  # ended right now
    hold(cards[3], alice, vision, start=NOW + timedelta(hours=1), end=NOW + timedelta(hours=2))
    assert counts(user_api, "t-nv80") == (8, 6)
    with time_machine.travel(NOW + timedelta(hours=1, minutes=30), tick=False):
        # The first two have ended; the future one now covers the clock.
        assert counts(user_api, "t-nv80") == (8, 7)


def test_available_leaves_out_faulty_retired_and_nodes_not_taking_leases(user_api, pool):
    nv, _ = pool
    node = Node.objects.get(hostname="gpu-01.bj.example.org")
    Card.objects.filter(card_model=nv, index=0).update(status=Card.Status.FAULTY)
    Card.objects.filter(card_model=nv, index=1).update(status=Card.Status.RETIRED)
    assert counts(user_api, "t-nv80") == (7, 6)

    Node.objects.filter(pk=node.pk).update(
        status=Node.Status.DRAINING, drain_at=NOW + timedelta(hours=4)
    )
    assert counts(user_api, "t-nv80") == (7, 6)
    Node.objects.filter(pk=node.pk).update(drain_at=NOW - timedelta(minutes=1))
    assert counts(user_api, "t-nv80") == (7, 0)
    Node.objects.filter(pk=node.pk).update(status=Node.Status.OFFLINE, drain_at=None)
    assert counts(user_api, "t-nv80") == (7, 0)


@pytest.mark.parametrize(
    ("query", "kept", "dropped"),
    [
        ("vendor=huawei", "t-asc64", "t-nv80"),
        ("min_memory_gb=70", "t-nv80", "t-asc64"),
        ("precision=fp8", "t-asc64", "t-nv80"),
        ("interconnect=hccs", "t-asc64", "t-nv80"),
    ],
)
def test_card_model_filters(user_api, pool, query, kept, dropped):
    slugs = {m["slug"] for m in results(user_api.get(f"/api/v1/card-models/?{query}&limit=500"))}
    assert kept in slugs
    assert dropped not in slugs


# --- Nodes and cards --------------------------------------------------------------------


def test_node_by_hostname_with_dots(user_api, pool):
    body = user_api.get("/api/v1/nodes/gpu-01.bj.example.org/").json()
    assert body["region"] == "t-bj"
    assert (body["cards_total"], body["cards_available"]) == (8, 8)


def test_node_filters(user_api, pool):
    Node.objects.filter(hostname="npu-01.sh.example.org").update(status=Node.Status.MAINTENANCE)
    assert [n["hostname"] for n in results(user_api.get("/api/v1/nodes/?region=t-sh"))] == [
        "npu-01.sh.example.org"
    ]
    assert [n["hostname"] for n in results(user_api.get("/api/v1/nodes/?status=maintenance"))] == [
        "npu-01.sh.example.org"
    ]


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("model=t-asc64", 4),
        ("node=gpu-01.bj.example.org", 8),
        ("region=t-sh", 4),
        ("status=faulty", 1),
        ("model=t-nv80&status=ok", 7),
        ("model=t-nv80&region=t-sh", 0),
    ],
)
def test_card_filters(user_api, pool, query, expected):
    Card.objects.filter(node__hostname="gpu-01.bj.example.org", index=3).update(
        status=Card.Status.FAULTY
    )
    assert user_api.get(f"/api/v1/cards/?{query}").json()["count"] == expected


def test_card_shows_who_holds_it_until_when(user_api, alice, vision, pool):
    card = Card.objects.get(node__hostname="gpu-01.bj.example.org", index=2)
    hold(card, alice, vision, start=NOW - timedelta(hours=1), end=NOW + timedelta(hours=2))
    body = user_api.get(f"/api/v1/cards/{card.uuid}/").json()
    assert body["node"] == "gpu-01.bj.example.org"
    assert body["card_model"] == "t-nv80"
    assert body["region"] == "t-bj"
    assert body["busy_until"].startswith("2026-03-02T")
    other = user_api.get("/api/v1/cards/?model=t-nv80&limit=20").json()["results"]
    assert sum(c["busy_until"] is not None for c in other) == 1


@pytest.mark.parametrize(
    ("url", "field"),
    [
        ("/api/v1/cards/?model=no-such-model", "model"),
        ("/api/v1/cards/?node=nowhere.example.org", "node"),
        ("/api/v1/cards/?status=melted", "status"),
        ("/api/v1/cards/?region=atlantis", "region"),
        ("/api/v1/nodes/?status=on-fire", "status"),
        ("/api/v1/nodes/?region=atlantis", "region"),
        ("/api/v1/card-models/?vendor=acme", "vendor"),
        ("/api/v1/card-models/?min_memory_gb=lots", "min_memory_gb"),
        ("/api/v1/card-models/?precision=fp99", "precision"),
        ("/api/v1/card-models/?interconnect=smoke", "interconnect"),
    ],
)
def test_bad_filter_values_get_400_with_a_message(user_api, pool, url, field):
    response = user_api.get(url)
    assert response.status_code == 400
    assert response.json()[field][0]


def test_unknown_lookups_are_404(user_api, pool):
    assert user_api.get("/api/v1/card-models/nope/").status_code == 404
    assert user_api.get("/api/v1/nodes/nope.example.org/").status_code == 404
    assert user_api.get("/api/v1/cards/nope/").status_code == 404


def test_memory_filter_takes_fractions_and_refuses_negatives(user_api, pool):
    """One FilterSet for the catalogue page and the API: the same names, the same checks."""
    fine = user_api.get("/api/v1/card-models/?min_memory_gb=70.5")
    assert fine.status_code == 200
    assert {m["slug"] for m in fine.json()["results"]} >= {"t-nv80"}
    bad = user_api.get("/api/v1/card-models/?min_memory_gb=-1")
    assert bad.status_code == 400 and "min_memory_gb" in bad.json()
