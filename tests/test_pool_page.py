"""The pool page (/pool/) and the dashboard's "frees up" line: charts, numbers, roles, queries."""

from __future__ import annotations

import html
import json
import re
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
import time_machine
from django.test import Client

from inventory.models import Card, Node
from leasing.choices import LeaseStatus
from leasing.models import Allocation, Lease, LeaseEvent
from leasing.scheduler.run import replan
from portal.views_pool import HOURS, _hour_starts, held_per_hour, queue_per_hour, queue_waits
from tests.factories import CardModelFactory, NodeFactory, UserFactory, make_node

NOW = datetime(2026, 12, 1, 9, 30, tzinfo=ZoneInfo("Asia/Shanghai"))


def lease(user, team, card_model, status, *, submitted, start=None, minutes=60, **fields):
    start = start or submitted
    return Lease.objects.create(
        user=user,
        team=team,
        card_model=card_model,
        count=fields.pop("count", 1),
        duration=timedelta(minutes=minutes),
        start_at=start,
        end_at=start + timedelta(minutes=minutes),
        status=status,
        end_reason="expired" if status == LeaseStatus.ENDED else "",
        submitted_at=submitted,
        **fields,
    )


def hold(card, held_lease, start, end):
    Allocation.objects.create(card=card, lease=held_lease, start_at=start, end_at=end)


def login(client: Client, user) -> Client:
    client.force_login(user)
    client.cookies["django_language"] = "en"
    return client


def fetch(client: Client, path="/pool/"):
    with time_machine.travel(NOW, tick=False):
        return client.get(path)


def get(client: Client, user, path="/pool/"):
    return fetch(login(client, user), path)


@pytest.fixture
def pool(alice, bob, vision, nlp):
    """a100: 4 cards; alice held one from 10 h ago to 2 h ago and holds another since 1 h
    ago; bob waited 20 minutes, then held one for 3 hours, 2 days ago."""
    a100 = CardModelFactory(slug="a100", name="A100")
    make_node(a100, cards=4)
    cards = list(Card.objects.order_by("pk"))
    past = lease(
        alice, vision, a100, LeaseStatus.ENDED, submitted=NOW - timedelta(hours=10), minutes=480
    )
    hold(cards[0], past, NOW - timedelta(hours=10), NOW - timedelta(hours=2))
    active = lease(alice, vision, a100, LeaseStatus.ACTIVE, submitted=NOW - timedelta(hours=1))
    hold(cards[1], active, NOW - timedelta(hours=1), NOW + timedelta(hours=1))
    submitted = NOW - timedelta(days=2)
    waited = lease(
        bob,
        nlp,
        a100,
        LeaseStatus.ENDED,
        submitted=submitted,
        start=submitted + timedelta(minutes=20),
        minutes=180,
    )
    LeaseEvent.objects.create(
        lease=waited,
        at=submitted + timedelta(minutes=20),
        kind="placed",
        from_status="queued",
        to_status="provisioning",
    )
    hold(cards[2], waited, waited.start_at, waited.end_at)
    return a100


def test_held_and_queue_series(pool):
    hours = _hour_starts(NOW)
    assert len(hours) == HOURS
    held = held_per_hour(NOW, hours, [pool.pk])[pool.pk]
    # NOW is 09:30; each point is read at its hour's end (09:30, 09:00, 08:00, 07:00, ...).
    assert held[-1] == 1  # now: alice's active lease (since 08:30)
    assert held[-2] == 1  # 09:00: the same
    assert held[-3] == 0  # 08:00: the past lease ended at 07:30
    assert held[-4] == 1  # 07:00: the past lease
    assert max(held) == 1  # the three-hour lease (two days ago) overlapped nothing
    queue = queue_per_hour(NOW, hours, [pool.pk])[pool.pk]
    assert queue[-1] == 0 and max(queue) == 0  # bob waited 20 minutes inside one hour
    lease(
        UserFactory(),
        pool.leases.first().team,
        pool,
        LeaseStatus.QUEUED,
        submitted=NOW - timedelta(hours=3),
    )
    queue = queue_per_hour(NOW, hours, [pool.pk])[pool.pk]
    assert queue[-1] == 1 and queue[-4] == 1 and queue[-5] == 0  # waiting since 06:30
    assert queue_waits(NOW, [pool.pk])[pool.pk] == [0, 0, 0, 1, 0, 0, 0]


def test_page_renders_charts(client, pool, alice):
    response = get(client, alice)
    assert response.status_code == 200
    page = response.content.decode()
    assert 'class="plotly-chart" data-figure=' in page
    for chart in ("utilisation", "queue", "waits", "users"):
        assert f'data-chart="{chart}"' in page
    assert page.count('class="plotly-chart" data-figure=') == 4
    assert 'aria-current="page">Pool<' in page


def test_summary_numbers_lead_the_page(client, pool, alice):
    page = get(client, alice).content.decode()
    assert page.index('id="pool-summary"') < page.index('data-chart="utilisation"')

    def stat(name):
        block = page.split(f'data-stat="{name}"', 1)[1]
        return re.search(r'class="stat__value">([^<]*)<', block).group(1)

    assert (stat("total"), stat("held"), stat("free"), stat("down")) == ("4", "1", "3", "0")
    assert stat("waiting") == "0"
    # alice held 8 h + 1 h and bob 3 h of 4 cards × 168 h: 12 / 672 = 1.8 %, read at each
    # hour's end (bob's 3 h and the past lease count by the hours they cover at an hour's end).
    assert stat("share").endswith("%")
    row = page.split('<tr data-model="a100">', 1)[1].split("</tr>", 1)[0]
    assert re.findall(r'class="num">([^<]*)<', row)[:5] == ["4", "1", "3", "0", "0"]


def test_time_axes_show_numbers_not_month_names(client, pool, alice):
    page = get(client, alice).content.decode()
    for chart in ("utilisation", "queue"):
        figure = page.split(f'data-chart="{chart}"', 1)[1]
        data = json.loads(html.unescape(re.search(r'data-figure="([^"]*)"', figure).group(1)))
        assert data["layout"]["xaxis"]["tickformat"] == "%m-%d %H:%M"


def _top_users_labels(page: str) -> list[str]:
    """The y labels of the top-users chart (the last plotly figure on the page)."""
    figure = page.rsplit('data-chart="users"', 1)[1]
    data = re.search(r'data-figure="([^"]*)"', figure)
    return json.loads(html.unescape(data.group(1)))["data"][0]["y"]


def test_names_in_top_users_per_role(client, pool, alice, bob, lena, fin, ops):
    # alice 8 + 1 card-hours so far (the active lease counts up to now), bob 3.
    assert _top_users_labels(get(Client(), ops).content.decode()) == ["bob", "alice"]
    assert _top_users_labels(get(Client(), fin).content.decode()) == ["bob", "alice"]
    assert _top_users_labels(get(Client(), lena).content.decode()) == ["user #2", "alice"]
    assert _top_users_labels(get(Client(), alice).content.decode()) == ["user #2", "alice"]
    assert _top_users_labels(get(Client(), bob).content.decode()) == ["bob", "user #1"]


def test_anonymous_is_sent_to_sign_in(client):
    response = client.get("/pool/")
    assert response.status_code == 302
    assert response["Location"].startswith("/accounts/login/")


def test_empty_pool(client, alice):
    response = get(client, alice)
    assert response.status_code == 200
    assert "No cards in the pool yet." in response.content.decode()


def test_query_count_is_bounded_with_1000_cards(
    client, alice, vision, django_assert_max_num_queries
):
    models = [CardModelFactory(slug=f"m{i}", name=f"M{i}") for i in range(5)]
    for n in range(125):
        make_node(models[n % 5], cards=8, hostname=f"big{n:03d}")
    cards = list(Card.objects.order_by("pk").values_list("pk", "card_model_id")[:300])
    Allocation.objects.bulk_create(
        Allocation(
            card_id=card_id,
            lease=lease(
                alice,
                vision,
                models[0],
                LeaseStatus.ENDED,
                submitted=NOW - timedelta(hours=i % 150 + 2),
            ),
            start_at=NOW - timedelta(hours=i % 150 + 2),
            end_at=NOW - timedelta(hours=i % 150 + 1),
        )
        for i, (card_id, _model) in enumerate(cards)
    )
    assert Card.objects.count() == 1000
    login(client, alice)
    with django_assert_max_num_queries(25):
        response = fetch(client)
    assert response.status_code == 200
    page = response.content.decode()
    assert page.count('data-chart="utilisation"') == 1  # one chart, a line per model
    assert page.count("<tr data-model=") == 5


def test_dashboard_says_when_a_busy_model_frees_up(
    client, alice, vision, django_assert_max_num_queries
):
    busy = CardModelFactory(slug="busy", name="Busy")
    make_node(busy, cards=2)
    for card, hours in zip(
        Card.objects.filter(card_model=busy).order_by("pk"), (2, 5), strict=True
    ):
        held = lease(alice, vision, busy, LeaseStatus.ACTIVE, submitted=NOW, minutes=hours * 60)
        hold(card, held, NOW, NOW + timedelta(hours=hours))
    # Someone waits for one card ahead of any new request: they get the first card to free.
    lease(alice, vision, busy, LeaseStatus.QUEUED, submitted=NOW, minutes=600)
    replan(busy.pk, now=NOW)  # the queue's plan puts it on the first card to free (11:30)
    down = CardModelFactory(slug="down", name="Down")
    make_node(down, cards=2, status=Node.Status.MAINTENANCE)
    free = CardModelFactory(slug="free", name="Free")
    make_node(free, cards=1)
    login(client, alice)
    # "next free" reads the busy models' one picture: the same five queries however many
    with django_assert_max_num_queries(16):
        page = fetch(client, "/").content.decode()
    # NOW is 09:30 in Shanghai; the second card frees at 14:30.
    assert re.search(r'data-frees="busy">1 card free from 12-01 14:30<', page)
    assert re.search(r'data-frees="down">No card in service<', page)
    assert 'data-frees="free"' not in page


def test_nodes_not_taking_leases_are_down(client, alice):
    model = CardModelFactory(slug="m", name="M")
    make_node(model, cards=2, status=Node.Status.OFFLINE)
    NodeFactory()
    response = get(client, alice)
    assert response.status_code == 200
