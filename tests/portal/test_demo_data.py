"""The demo's first impressions: alice's first request for a free card is granted at once,
a request waits for lena's approval, and a reservation sits in the calendar."""

from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command

from inventory.models import CardModel
from leasing.choices import LeaseStatus
from leasing.lifecycle import request_steps, requests
from leasing.models import Lease
from portal.models import Team


@pytest.fixture
def demo(db):
    call_command("seed_demo", stdout=open("/dev/null", "w"))


def test_alices_first_request_is_granted(demo):
    alice = get_user_model().objects.get(username="alice")
    vision = Team.objects.get(slug="vision")
    a100 = CardModel.objects.get(slug="a100-80g-sxm")
    values = {
        "user": alice,
        "team": vision,
        "card_model": a100,
        "count": 1,
        "duration": timedelta(hours=4),
    }
    assert request_steps.lease_request_check(**values).outcome == "now"
    assert requests.lease_request(**values).status == LeaseStatus.PROVISIONING


def test_something_waits_for_lena_and_a_reservation_is_booked(demo, client):
    waiting = Lease.objects.get(status=LeaseStatus.PENDING_APPROVAL)
    assert waiting.team.slug == "vision" and waiting.user.username == "chen"
    lena = get_user_model().objects.get(username="lena")
    client.force_login(lena)
    page = client.get("/teams/vision/").content.decode()
    assert f"/leases/{waiting.pk}/" in page or f"#{waiting.pk}" in page or "chen" in page
    assert Lease.objects.filter(status=LeaseStatus.SCHEDULED, user=lena).count() == 1


def test_bob_waits_for_the_h800s_and_the_timeline_shows_his_planned_cards(demo, client):
    """The demo's H800 case: bob's 8 cards wait behind lena's reservation; alice's view of
    the model shows them planned for a waiting request, bob's lease names what is in his way."""
    waiting = Lease.objects.get(user__username="bob", card_model__slug="h800")
    assert waiting.status == LeaseStatus.QUEUED and len(waiting.planned_cards) == 8
    alice = get_user_model().objects.get(username="alice")
    client.force_login(alice)
    client.cookies["django_language"] = "en"
    calendar = client.get("/leases/calendar/h800/").content.decode()
    assert 'data-planned="8"' in calendar
    answer = client.get("/api/v1/card-models/h800/timeline/").json()
    assert sum(1 for c in answer["cards"] for b in c["bookings"] if b["kind"] == "planned") == 8
    client.force_login(waiting.user)
    page = client.get(f"/leases/{waiting.pk}/").content.decode()
    assert 'data-because-kind="cards_in_use"' in page
