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
