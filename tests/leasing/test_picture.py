"""One picture of a model's future, read from the queue's plan (``scheduler.picture``): the
pool timeline, the calendar and ``GET /api/v1/card-models/{slug}/timeline/`` show a waiting
lease's planned cards, and a stretch shown free can be reserved as shown."""

from datetime import timedelta

import pytest
from django.db import transaction
from django.urls import reverse
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from inventory.models import Card, Node
from leasing.choices import LeaseStatus
from leasing.lifecycle import pool_timeline
from leasing.lifecycle import selectors as lease_selectors
from leasing.models import QueueMark
from leasing.scheduler.joining import mark_fields
from leasing.scheduler.picture import model_picture
from leasing.scheduler.queueplan import service_key
from leasing.scheduler.refresh import queue_tick
from tests.factories import make_node
from tests.leasing.conftest import T0, ask, hours

DAY2_9 = T0 + timedelta(days=1)  # 12-02 09:00 (Asia/Shanghai)
DAY3_12 = T0 + timedelta(days=2, hours=3)  # 12-03 12:00


@pytest.fixture
def h800_case(frozen, alice, lena, bob, vision, nlp, a100):
    """The demo's case: one node of 8; lena's reservation of 4 from 12-02 09:00 to 12-03
    12:00; bob asks for all 8 from 12-02 12:00 for two days and waits for her cards."""
    make_node(a100, cards=8, domains=1, hostname="bj-h800-01")
    mine = ask(lena, vision, a100, count=4, duration=hours(27), start_at=DAY2_9)
    assert mine.status == LeaseStatus.SCHEDULED
    waiting = ask(bob, nlp, a100, count=8, duration=hours(48), start_at=DAY2_9 + hours(3))
    assert waiting.status == LeaseStatus.QUEUED
    waiting.refresh_from_db()
    assert waiting.estimated_start == DAY3_12 and len(waiting.planned_cards) == 8
    return mine, waiting


def test_the_timeline_shows_bobs_eight_planned_cards(h800_case, alice, bob, a100):
    reservation, waiting = h800_case
    end = T0 + timedelta(days=5)
    data = pool_timeline.pool_timeline(a100, user=alice, start=T0, end=end)
    assert len(data["planned"]) == 8
    assert {(b.start, b.end) for b in data["planned"]} == {(DAY3_12, DAY3_12 + hours(48))}
    # alice may not see bob's lease: planned, no name, no link
    assert {(b.label, b.url) for b in data["planned"]} == {("planned for a waiting request", "")}
    # no free stretch offered inside bob's plan
    assert not any(b.start < DAY3_12 + hours(48) and DAY3_12 < b.end for b in data["free"])
    chart = pool_timeline.timeline_chart(data)
    assert "planned for a waiting request" in chart  # its own trace, after booked and free
    # bob sees his own lease on it
    his = pool_timeline.pool_timeline(a100, user=bob, start=T0, end=end)
    assert {b.label for b in his["planned"]} == {f"planned for waiting lease {waiting.pk} · bob"}


def test_the_calendar_counts_planned_cards_as_taken(h800_case, client, alice, a100):
    cal = lease_selectors.availability_calendar(a100, start=T0, days=5)
    at = {s["start"]: s for s in cal["slots"]}
    slot = at[T0 + timedelta(days=2, hours=15)]  # 12-04 00:00
    assert (slot["free"], slot["planned"]) == (0, 8)
    assert at[T0]["free"] == 8  # today: all free
    client.force_login(alice)
    page = client.get("/leases/calendar/a100-test/?days=5").content.decode()
    assert 'data-planned="8"' in page
    assert "8 张卡已计划给排队中的申请" in page  # the site's default language
    client.cookies["django_language"] = "en"
    page = client.get("/leases/calendar/a100-test/?days=5").content.decode()
    assert "8 cards planned for a waiting request" in page


def test_a_click_on_the_planned_stretch_says_so_and_offers_the_next_free_one(
    h800_case, frozen, client, alice, a100
):
    """alice picks 12-04 00:00 on the calendar: the form's preview says the cards are
    planned for a waiting request and gives the next stretch that is really free."""
    reservation, waiting = h800_case
    frozen.shift(hours(5))  # bob asked hours before her: he is ahead of her in the queue
    client.force_login(alice)
    client.cookies["django_language"] = "en"
    page = client.get(
        "/leases/preview/",
        {
            "card_model": a100.slug,
            "count": 2,
            "duration": 3,
            "unit": "hours",
            "start": "later",
            "start_at": "2026-12-04T00:00",
            "team": "vision",
            "priority": "normal",
            "purpose": "training",
            "same_node": "on",
        },  # fmt: skip
    ).content.decode()
    assert 'data-taken="2026-12-04T00:00"' in page
    assert "8 cards are planned for a waiting request" in page
    assert "The next stretch really free starts 2026-12-05 12:00." in page


def test_the_tile_and_the_model_page_say_free_cards_are_planned(h800_case, client, alice, a100):
    client.force_login(alice)
    client.cookies["django_language"] = "en"
    home = client.get("/").content.decode()
    assert "8 cards planned for waiting requests from 12-03 12:00" in home
    model = client.get(reverse("inventory:card_model", args=[a100.slug])).content.decode()
    assert f'data-planned="{a100.slug}"' in model


def _api(api, user, **query):
    api.force_authenticate(user)
    return api.get("/api/v1/card-models/a100-test/timeline/", query)


def test_the_api_gives_each_card_its_bookings_with_lease_ids_only_where_seen(
    h800_case, api, alice, lena, bob
):
    reservation, waiting = h800_case
    span = {"start": T0.isoformat(), "end": (T0 + timedelta(days=5)).isoformat()}
    answer = _api(api, alice, **span)
    assert answer.status_code == 200, answer.content
    cards = answer.json()["cards"]
    assert [(c["node"], c["index"]) for c in cards] == [("bj-h800-01", i) for i in range(8)]
    kinds = [[(b["kind"], b["lease"]) for b in c["bookings"]] for c in cards]
    assert kinds[:4] == [[("reserved", None), ("planned", None)]] * 4
    assert kinds[4:] == [[("planned", None)]] * 4
    # the lead sees her reservation, bob his waiting lease
    lead = _api(api, lena, **span).json()["cards"][0]["bookings"]
    assert [(b["kind"], b["lease"]) for b in lead] == [
        ("reserved", reservation.pk),
        ("planned", None),
    ]
    his = _api(api, bob, **span).json()["cards"][7]["bookings"]
    assert his == [
        {
            "kind": "planned",
            "start": "2026-12-03T12:00:00+08:00",
            "end": "2026-12-05T12:00:00+08:00",
            "lease": waiting.pk,
        }
    ]


def test_the_api_shows_held_maintenance_and_unhealthy_cards(frozen, api, alice, vision, a100):
    node = make_node(a100, cards=4, domains=1, hostname="gpu0")
    held = ask(alice, vision, a100, count=1, duration=hours(2))
    assert held.status == LeaseStatus.PROVISIONING
    cards = list(Card.objects.filter(node=node).order_by("index"))
    Card.objects.filter(pk=cards[2].pk).update(health=Card.Health.HOT)
    Card.objects.filter(pk=cards[3].pk).update(status=Card.Status.FAULTY)
    other = make_node(a100, cards=1, domains=1, hostname="gpu1")
    Node.objects.filter(pk=other.pk).update(status=Node.Status.DRAINING, drain_at=T0 + hours(5))
    answer = _api(api, alice, start=T0.isoformat(), end=(T0 + hours(10)).isoformat()).json()
    by_card = {(c["node"], c["index"]): c["bookings"] for c in answer["cards"]}
    held_card = next(k for k, v in by_card.items() if v and v[0]["kind"] == "held")
    assert by_card[held_card] == [
        {
            "kind": "held",
            "start": "2026-12-01T09:00:00+08:00",
            "end": "2026-12-01T11:00:00+08:00",
            "lease": held.pk,
        }
    ]
    assert [b["kind"] for b in by_card[("gpu0", 2)]] == ["unhealthy"]
    assert [b["kind"] for b in by_card[("gpu0", 3)]] == ["maintenance"]
    assert [(b["kind"], b["start"]) for b in by_card[("gpu1", 0)]] == [
        ("maintenance", "2026-12-01T14:00:00+08:00")
    ]


def test_a_stale_stretch_is_shown_as_being_re_estimated(h800_case, api, alice, bob):
    reservation, waiting = h800_case
    # the stored plan turns stale before bob's lease (someone joined ahead of him)
    key = service_key(
        rank=waiting.priority_rank,
        submitted_at=waiting.submitted_at - hours(5),
        duration=hours(1),
        count=1,
        lease_id=1,
    )
    QueueMark.objects.create(
        card_model_id=waiting.card_model_id,
        since=T0,
        **mark_fields(key),
    )
    answer = _api(api, bob).json()
    assert not any(b["kind"] == "planned" for c in answer["cards"] for b in c["bookings"])
    assert answer["re_estimating"] == [
        {
            "lease": waiting.pk,
            "count": 8,
            "estimated_start": "2026-12-03T12:00:00+08:00",
            "duration_minutes": 48 * 60,
        }
    ]
    assert answer["re_estimated_within_seconds"] > 0
    assert _api(api, alice).json()["re_estimating"][0]["lease"] is None
    # the refresh (right after the commit, and on every tick) places him again
    queue_tick(waiting.card_model_id)
    answer = _api(api, bob).json()
    assert answer["re_estimating"] == []
    assert sum(1 for c in answer["cards"] for b in c["bookings"] if b["kind"] == "planned") == 8


@pytest.mark.parametrize(
    "query",
    [
        {"start": "2026-12-02T00:00:00+08:00", "end": "2026-12-01T00:00:00+08:00"},
        {"start": "2026-12-01T00:00:00+08:00", "end": "2027-03-01T00:00:00+08:00"},
        {"start": "soon"},
        {"from": "2026-12-01T00:00:00+08:00"},
    ],
)
def test_the_api_refuses_bad_windows_with_a_message(frozen, api, alice, a100, query):
    answer = _api(api, alice, **query)
    assert answer.status_code == 400 and answer.json()


def test_the_api_is_in_the_openapi_schema(api, ops):
    api.force_authenticate(ops)
    schema = api.get("/api/v1/schema/", {"format": "json"}).json()
    path = schema["paths"]["/api/v1/card-models/{slug}/timeline/"]["get"]
    assert "200" in path["responses"]
    booking = schema["components"]["schemas"]["Booking"]["properties"]
    assert set(booking) == {"kind", "start", "end", "lease"}


# --- a stretch shown free can be reserved as shown ------------------------------------------

HOLDINGS = st.tuples(
    st.sampled_from(["alice", "bob"]),
    st.integers(1, 4),  # cards
    st.sampled_from([1, 3, 8, 20, 30]),  # hours
    st.sampled_from([None, 2, 5, 12, 26]),  # start: now, or that many hours ahead
)


@pytest.mark.django_db
@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    pool=st.lists(st.tuples(st.integers(1, 4), st.integers(1, 2)), min_size=1, max_size=3),
    holdings=st.lists(HOLDINGS, min_size=1, max_size=7),
    pick=st.integers(0, 10_000),
    length=st.sampled_from([1, 3, 8, 20]),
)
def test_every_stretch_shown_free_can_be_reserved_at_its_start(
    frozen, alice, bob, vision, nlp, a100, pool, holdings, pick, length
):
    users = {"alice": (alice, vision), "bob": (bob, nlp)}
    with transaction.atomic():
        for n, (cards, domains) in enumerate(pool):
            make_node(a100, cards=cards, domains=min(domains, cards), hostname=f"p{n}")
        for who, count, duration, ahead in holdings:
            user, team = users[who]
            start_at = None if ahead is None else T0 + hours(ahead)
            try:
                ask(user, team, a100, count=count, duration=hours(duration), start_at=start_at)
            except Exception:  # noqa: BLE001 - more cards than the pool has: refused
                pass
        end = T0 + timedelta(days=4)
        picture = model_picture(a100.pk, start=T0, end=end, now=T0)
        # every moment a stretch may start: now, and each booking's end
        starts = sorted(
            {T0}
            | {
                b.end
                for bs in picture.bookings.values()
                for b in bs
                if T0 < b.end < end - hours(20)
            }
        )
        start = starts[pick % len(starts)]
        free = picture.free_count(start, start + hours(length))
        if free:
            lease = ask(
                alice, vision, a100, count=free, duration=hours(length),
                start_at=None if start == T0 else start, same_node=False,
            )  # fmt: skip
            lease.refresh_from_db()
            assert lease.status in (LeaseStatus.PROVISIONING, LeaseStatus.SCHEDULED), (
                start, free, lease.status, lease.estimated_start, lease.stall_reason,
            )  # fmt: skip
            assert lease.start_at == start
        transaction.set_rollback(True)
