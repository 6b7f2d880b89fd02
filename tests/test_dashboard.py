from datetime import timedelta

from leasing.lifecycle import changes
from leasing.lifecycle import requests as lease_requests
from tests.factories import CardModelFactory, make_node


def test_dashboard_shows_free_cards_and_my_leases(
    client, alice, vision, django_assert_max_num_queries
):
    model = CardModelFactory(slug="dash-a100", name="Dash A100")
    for i in range(3):
        make_node(model, cards=4, domains=1, hostname=f"dash{i}")
    CardModelFactory(slug="unused-model")  # no cards: not on the board
    lease = lease_requests.lease_request(
        user=alice, team=vision, card_model=model, count=3, duration=timedelta(hours=1)
    )
    client.force_login(alice)
    client.cookies["django_language"] = "en"
    with django_assert_max_num_queries(12):
        page = client.get("/").content.decode()
    assert 'data-free="dash-a100">9</strong> / 12' in page
    assert "unused-model" not in page
    assert f'href="/leases/{lease.pk}/"' in page


def test_dashboard_needs_login(client, db):
    assert client.get("/").status_code == 302


def test_dashboard_counts_who_waits_per_model_not_who_ever_asked(client, alice, bob, vision, nlp):
    model = CardModelFactory(slug="dash-h800", name="Dash H800")
    make_node(model, cards=2, domains=1, hostname="dash-h")
    held = lease_requests.lease_request(
        user=alice, team=vision, card_model=model, count=2, duration=timedelta(hours=1)
    )
    for _ in range(3):
        lease_requests.lease_request(
            user=bob, team=nlp, card_model=model, count=1, duration=timedelta(hours=1)
        )
    changes.lease_cancel(
        lease=lease_requests.lease_request(
            user=bob, team=nlp, card_model=model, count=1, duration=timedelta(hours=1)
        ),
        user=bob,
    )  # asked once, no longer waits
    assert held.status == "provisioning"
    client.force_login(alice)
    client.cookies["django_language"] = "en"
    page = client.get("/").content.decode()
    board = page[page.index('data-free="dash-h800"') :]
    assert "3 waiting" in board[: board.index("</p>")]
