"""Every waiting lease says why it waits (``waiting_because``), worded for its reader, the same
on the lease page, the lease list and ``GET /api/v1/leases/{id}/``: one test per kind."""

from datetime import timedelta

import pytest

from inventory.models import Card
from leasing.choices import LeaseStatus, StartPolicy
from leasing.models import OffPeakWindow
from leasing.scheduler.run import queue_advance
from leasing.teams import services as team_services
from portal.models import Membership
from tests.factories import make_node
from tests.leasing.conftest import T0, ask, hours

DAY2_9 = T0 + timedelta(days=1)


def _because(api, user, lease):
    api.force_authenticate(user)
    data = api.get(f"/api/v1/leases/{lease.pk}/", HTTP_ACCEPT_LANGUAGE="en").json()
    return {b["kind"]: b for b in data["waiting_because"]}, data


@pytest.fixture
def eight(a100):
    return make_node(a100, cards=8, domains=1, hostname="bj-h800-01")


def test_cards_in_use_names_the_reservation_in_the_way(
    frozen, api, client, alice, lena, bob, vision, nlp, a100, eight
):
    """The demo's case: bob's 8 cards wait for lena's 4-card reservation, which bob may not
    see (another team's lease); lena, a lead, sees her own lease named in alice's."""
    mine = ask(lena, vision, a100, count=4, duration=hours(27), start_at=DAY2_9)
    waiting = ask(bob, nlp, a100, count=8, duration=hours(48), start_at=DAY2_9 + hours(3))
    assert waiting.status == LeaseStatus.QUEUED
    kinds, data = _because(api, bob, waiting)
    assert set(kinds) == {"cards_in_use"}
    params = kinds["cards_in_use"]["params"]
    assert params["count"] == 4 and params["leases"] == [] and params["others"] == 1
    assert kinds["cards_in_use"]["text"] == (
        "4 cards in use or planned until 12-03 12:00 (1 other team's lease)"
    )
    assert data["waiting_reason"] is None  # the deprecated field: only "never fits"
    # alice's lease waits behind lena's reservation too: lena, her lead, sees it named
    hers = ask(alice, vision, a100, count=8, duration=hours(2), start_at=DAY2_9 + hours(1))
    kinds, _data = _because(api, lena, hers)
    assert mine.pk in kinds["cards_in_use"]["params"]["leases"]
    # the lease page says it in the reader's language
    client.force_login(bob)
    page = client.get(f"/leases/{waiting.pk}/").content.decode()
    assert 'data-because-kind="cards_in_use"' in page
    assert "4 张卡在使用中或已计划，至 12-03 12:00（1 个其他团队的租约）" in page
    client.cookies["django_language"] = "en"
    rows = client.get("/leases/").content.decode()
    assert "4 cards in use or planned until 12-03 12:00 (1 other team&#x27;s lease)" in rows


def test_ahead_in_queue_counts_the_leases_and_their_card_hours(
    frozen, api, alice, bob, vision, nlp, a100, eight
):
    ask(alice, vision, a100, count=8, duration=hours(3))
    first = ask(bob, nlp, a100, count=4, duration=hours(1))  # the smaller one is served first
    second = ask(bob, nlp, a100, count=8, duration=hours(2))
    assert first.status == second.status == LeaseStatus.QUEUED
    kinds, _data = _because(api, bob, second)
    assert kinds["ahead_in_queue"]["params"] == {"count": 1, "card_hours": 4.0}
    assert kinds["ahead_in_queue"]["text"] == "1 lease ahead in the queue (4.0 card-hours)"
    assert "cards_in_use" in kinds
    kinds, _data = _because(api, bob, first)
    assert "ahead_in_queue" not in kinds


def test_approval_names_who_must_approve(frozen, api, alice, lena, vision, a100, eight):
    team_services.member_limit_set(
        user=lena,
        membership=Membership.objects.get(user=alice, team=vision),
        card_model=a100,
        max_concurrent_cards=1,
    )
    lease = ask(alice, vision, a100, count=2, duration=hours(2))
    assert lease.status == LeaseStatus.PENDING_APPROVAL
    kinds, _data = _because(api, alice, lease)
    assert kinds == {
        "approval": {
            "kind": "approval",
            "params": {"approvers": ["lena"]},
            "text": "waits for approval by lena",
        }
    }


def test_requirements_and_drain_when_it_can_never_start(
    frozen, api, alice, bob, vision, nlp, a100, eight
):
    ask(alice, vision, a100, count=8, duration=hours(3))
    lease = ask(bob, nlp, a100, count=8, duration=hours(2))
    Card.objects.filter(node=eight, index=7).update(status=Card.Status.FAULTY)
    queue_advance(card_model_ids=[a100.pk])
    kinds, data = _because(api, bob, lease)
    assert kinds["requirements"]["params"]["reason"] == "out_of_service"
    assert kinds["requirements"]["text"].startswith("cannot start as asked: Too many cards")
    assert kinds["drain"]["params"] == {"count": 1}
    assert data["waiting_reason"]["code"] == "out_of_service"  # kept one release


def test_unhealthy_cards_are_named(frozen, api, alice, bob, vision, nlp, a100, eight):
    ask(alice, vision, a100, count=4, duration=hours(3))
    Card.objects.filter(node=eight, index=7).update(health=Card.Health.HOT)
    lease = ask(bob, nlp, a100, count=4, duration=hours(2))
    assert lease.status == LeaseStatus.QUEUED
    kinds, _data = _because(api, bob, lease)
    assert kinds["unhealthy_cards"]["params"] == {"count": 1}
    assert kinds["cards_in_use"]["params"]["count"] == 4


def test_off_peak_names_the_window(frozen, api, alice, bob, vision, nlp, a100, eight):
    OffPeakWindow.objects.create(weekday=1, start_hour=22, end_hour=24, price_factor=0.4)
    OffPeakWindow.objects.create(weekday=2, start_hour=0, end_hour=6, price_factor=0.4)
    ask(alice, vision, a100, count=8, duration=hours(20))  # until 12-02 05:00
    lease = ask(bob, nlp, a100, count=2, duration=hours(1), start_policy=StartPolicy.NEXT_OFF_PEAK)
    assert lease.status == LeaseStatus.QUEUED
    kinds, _data = _because(api, bob, lease)
    assert kinds["off_peak"]["text"] == "waits for the off-peak window from 12-02 05:00"
    assert "cards_in_use" in kinds


def test_a_lease_that_does_not_wait_has_no_reasons(frozen, api, alice, vision, a100, eight):
    lease = ask(alice, vision, a100, count=1, duration=hours(1))
    kinds, _data = _because(api, alice, lease)
    assert kinds == {}


def test_the_schema_marks_waiting_reason_deprecated(api, ops):
    api.force_authenticate(ops)
    schema = api.get("/api/v1/schema/", {"format": "json"}).json()
    lease = schema["components"]["schemas"]["Lease"]["properties"]
    assert lease["waiting_reason"]["deprecated"] is True
    assert "waiting_because" in lease
