"""The inventory's pages and API over a big pool: 10,000 cards on 1,250 eight-card nodes over
four models and two regions. The pool is built once for this module (committed, then removed
when the module is done); each test adds what it needs inside its own transaction."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
import time_machine

from inventory.models import Card, CardModel, Node, Region
from leasing.choices import LeaseStatus
from leasing.models import Allocation, Lease
from tests.factories import CardModelFactory

NOW = datetime(2026, 3, 2, 8, 0, tzinfo=UTC)
CATALOGUE = "/inventory/"
NODES = "/inventory/nodes/"


@pytest.fixture(autouse=True)
def frozen():
    with time_machine.travel(NOW, tick=False):
        yield


@pytest.fixture(scope="module")
def big_pool(django_db_setup, django_db_blocker):
    """10,000 cards on 1,250 eight-card nodes (two interconnect domains each), built once."""
    with django_db_blocker.unblock():
        regions = [Region.objects.create(slug=f"big-{i}", name=f"Big {i}") for i in range(2)]
        models = [CardModelFactory(slug=f"big-model-{i}") for i in range(4)]
        Node.objects.bulk_create(
            Node(hostname=f"big-{i:04d}.example.org", region=regions[i % 2]) for i in range(1250)
        )
        nodes = list(Node.objects.filter(hostname__startswith="big-").order_by("hostname"))
        Card.objects.bulk_create(
            (
                Card(
                    node=node,
                    card_model=models[n % 4],
                    index=i,
                    uuid=f"{node.hostname}-{i}",
                    interconnect_domain=i // 4,
                )
                for n, node in enumerate(nodes)
                for i in range(8)
            ),
            batch_size=2000,
        )
        assert Card.objects.filter(node__hostname__startswith="big-").count() == 10_000
    yield nodes
    with django_db_blocker.unblock():
        Card.objects.filter(node__hostname__startswith="big-").delete()
        Node.objects.filter(hostname__startswith="big-").delete()
        CardModel.objects.filter(slug__startswith="big-model-").delete()
        Region.objects.filter(slug__startswith="big-").delete()


@pytest.fixture
def pool(db, big_pool):
    return big_pool


@pytest.fixture
def held(pool, alice, vision):
    """Three cards of big-model-0 held now, inside the test's transaction."""
    for card in Card.objects.filter(node__hostname="big-0000.example.org")[:3]:
        lease = Lease.objects.create(
            user=alice,
            team=vision,
            card_model=card.card_model,
            count=1,
            duration=timedelta(hours=2),
            start_at=NOW - timedelta(hours=1),
            end_at=NOW + timedelta(hours=1),
            status=LeaseStatus.ACTIVE,
            submitted_at=NOW - timedelta(hours=1),
        )
        Allocation.objects.create(
            card=card, lease=lease, start_at=lease.start_at, end_at=lease.end_at
        )
    return pool


@pytest.fixture
def user_api(api, alice):
    api.force_authenticate(alice)
    return api


def counts(api, slug: str) -> tuple[int, int]:
    body = api.get(f"/api/v1/card-models/{slug}/").json()
    return body["total"], body["available"]


# --- pages ------------------------------------------------------------------------------


# Measured: 4 (catalogue), 7 (nodes: + both filter drop-downs), 5 (model, node page),
# counting session, user and profile; two spare for the shell growing a query;
# +1 for the team gate (portal.permissions.sees_pool: is the viewer in a team?).
@pytest.mark.parametrize(
    ("url", "most"),
    [
        # 8th: the region filter's choices (inventory.requirements); +4: the reader's team and
        # its price books (membership, list prices, team prices, off-peak windows)
        (CATALOGUE, 12),
        (f"{CATALOGUE}?sort=-available&vendor=nvidia&precision=bf16", 12),
        (NODES, 10),
        (f"{NODES}?region=big-1&model=big-model-1", 12),
        ("/inventory/models/big-model-2/", 12),  # +4: the price in force for the reader
        # + the cards' latest readings and one pair for the 24-hour charts of every reading,
        # + who holds which card
        ("/inventory/nodes/big-0007.example.org/", 12),
    ],
)
def test_pages_run_a_bounded_number_of_queries(
    client, alice, pool, django_assert_max_num_queries, url, most
):
    client.force_login(alice)
    with django_assert_max_num_queries(most):
        response = client.get(url)
    assert response.status_code == 200


def test_catalogue_counts_a_big_pool(client, alice, pool):
    client.force_login(alice)
    rows = {m.slug: m for m in client.get(CATALOGUE).context["models"]}
    # 1,250 nodes round-robin over four models: 313, 313, 312, 312 nodes of eight cards.
    assert [(rows[f"big-model-{i}"].total, rows[f"big-model-{i}"].available) for i in range(4)] == [
        (2504, 2504),
        (2504, 2504),
        (2496, 2496),
        (2496, 2496),
    ]


# --- API --------------------------------------------------------------------------------


# Token/session auth is forced, so these are the endpoint's own queries: count + page,
# +1 for the team gate (portal.permissions.sees_pool: is the caller in a team?).
@pytest.mark.parametrize(
    ("url", "most"),
    [
        # +4: the reader's team and its price books, once for the page (not per model)
        ("/api/v1/card-models/", 7),
        ("/api/v1/card-models/?vendor=nvidia&precision=bf16&min_memory_gb=40", 7),
        ("/api/v1/card-models/big-model-1/", 6),
        ("/api/v1/nodes/", 3),
        ("/api/v1/nodes/?region=big-1&status=active&limit=1000", 4),
        ("/api/v1/cards/", 3),
        ("/api/v1/cards/?limit=1000", 3),
        ("/api/v1/cards/?model=big-model-0&region=big-0&status=ok&limit=1000", 5),
    ],
)
def test_list_endpoints_run_a_bounded_number_of_queries(
    user_api, held, django_assert_max_num_queries, url, most
):
    with django_assert_max_num_queries(most):
        response = user_api.get(url)
    assert response.status_code == 200


def test_api_counts_a_big_pool(user_api, held):
    assert counts(user_api, "big-model-0") == (2504, 2501)
    assert user_api.get("/api/v1/cards/?limit=1").json()["count"] >= 10_000
