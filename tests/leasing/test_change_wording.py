"""What a person reads about an extension or a resize above a limit: it counts only what the
change adds (an extension no cards, a resize the cards it adds), says what happens next
(waiting for lena's approval) instead of advice that only fits a refusal, is stored as
parameters and worded in the reader's language. The extend box takes minutes, hours or days."""

import pytest
from django.core.exceptions import ValidationError
from django.utils import translation

from leasing.lifecycle import changes, provisioning, resize
from leasing.models import LeaseChange, Notification
from leasing.notify.messages import breaches_text, duration_text
from leasing.teams import services as team_services
from portal.models import Membership
from tests.leasing.conftest import ask, hours


def active(lease):
    provisioning.provision_step(lease_id=lease.pk)
    lease.refresh_from_db()
    return lease


def _limit(lena, alice, vision, a100, **limits):
    team_services.member_limit_set(
        user=lena,
        membership=Membership.objects.get(user=alice, team=vision),
        card_model=a100,
        **limits,
    )


def test_an_extension_adds_no_cards(frozen, alice, lena, vision, a100, small_pool):
    lease = active(ask(alice, vision, a100, count=2, duration=hours(2)))
    ask(alice, vision, a100, count=2, duration=hours(8))  # held past the lease's end
    _limit(lena, alice, vision, a100, max_concurrent_cards=3)
    lease = changes.lease_extend(lease=lease, user=alice, minutes=120)
    text = breaches_text(lease.pending_change.breaches)
    assert "needs 2" not in text
    assert "This extension adds no cards" in text and "this lease's 2 cards" in text
    assert "while 2 others are held or waiting: 4 in all" in text


def test_a_resize_counts_the_cards_it_adds(frozen, alice, lena, vision, a100, small_pool):
    _limit(lena, alice, vision, a100, max_concurrent_cards=3)
    lease = active(ask(alice, vision, a100, count=2, duration=hours(2)))
    lease = resize.lease_resize(lease=lease, user=alice, count=4)
    text = breaches_text(lease.pending_change.breaches)
    assert "this resize adds 2" in text and "needs 4" not in text


def test_a_change_waiting_for_the_lead_says_so_not_extend_by_less(
    frozen, client, alice, lena, vision, a100, small_pool, django_capture_on_commit_callbacks
):
    _limit(lena, alice, vision, a100, max_lease_hours=3)
    lease = active(ask(alice, vision, a100, count=2, duration=hours(2)))
    client.force_login(alice)
    client.cookies["django_language"] = "en"
    with django_capture_on_commit_callbacks(execute=True):
        page = client.post(
            f"/leases/{lease.pk}/extend/", {"duration": "2", "unit": "hours"}, follow=True
        ).content.decode()
    assert "waits for lena to approve it" in page
    assert "Extend by less" not in page
    assert "this extension would make the lease 4.0 hours long" in page
    change = LeaseChange.objects.get(lease=lease)
    assert change.minutes == 120
    assert "Extend by 2 hours" in page and "waiting for lena to approve it" in page
    # The lead is told in words too, in her language: "2 小时", not "120 分钟".
    note = Notification.objects.get(user=lena, kind="approval_requested")
    assert f"将租约 {lease.pk} 延长 2 小时" in note.title


def test_a_refusal_by_the_team_still_says_what_to_do(frozen, alice, ops, vision, a100, small_pool):
    team_services.quota_set(user=ops, team=vision, card_model=a100, max_lease_hours=3)
    lease = active(ask(alice, vision, a100, count=1, duration=hours(2)))
    with pytest.raises(ValidationError) as refused:
        changes.lease_extend(lease=lease, user=alice, minutes=180)
    assert "Extend by less, or release and ask again." in refused.value.messages[0]


def test_the_wording_is_in_the_readers_language(frozen, alice, lena, vision, a100, small_pool):
    lease = active(ask(alice, vision, a100, count=2, duration=hours(2)))
    ask(alice, vision, a100, count=2, duration=hours(8))
    _limit(lena, alice, vision, a100, max_concurrent_cards=3, max_lease_hours=3)
    lease = changes.lease_extend(lease=lease, user=alice, minutes=120)
    stored = lease.pending_change.breaches
    assert all("ask" in b["params"] for b in stored)  # kind + parameters, no text
    with translation.override("zh-hans"):
        chinese = breaches_text(stored)
        assert "extension" not in chinese and "延长" in chinese
        assert duration_text(120) == "2 小时"


@pytest.mark.parametrize(
    ("minutes", "said"),
    [(45, "45 minutes"), (60, "1 hour"), (120, "2 hours"), (1440, "1 day"), (90, "90 minutes")],
)
def test_durations_as_people_say_them(minutes, said):
    assert duration_text(minutes) == said


@pytest.mark.django_db
def test_the_extend_box_takes_minutes_hours_or_days(
    frozen, client, alice, vision, a100, small_pool
):
    lease = active(ask(alice, vision, a100, duration=hours(2)))
    client.force_login(alice)
    client.cookies["django_language"] = "en"
    page = client.get(f"/leases/{lease.pk}/").content.decode()
    assert 'name="unit"' in page and 'value="days"' in page
    client.post(f"/leases/{lease.pk}/extend/", {"duration": "1", "unit": "days"})
    lease.refresh_from_db()
    assert lease.end_at - lease.start_at == hours(26)
    client.post(f"/leases/{lease.pk}/extend/", {"minutes": "30"})  # older links still work
    lease.refresh_from_db()
    assert lease.end_at - lease.start_at == hours(26.5)
    bad = client.post(
        f"/leases/{lease.pk}/extend/", {"duration": "2", "unit": "weeks"}, follow=True
    ).content.decode()
    assert "Select a valid choice" in bad or "Choose minutes, hours or days" in bad
    huge = client.post(
        f"/leases/{lease.pk}/extend/", {"duration": "99999", "unit": "days"}, follow=True
    )
    assert huge.status_code == 200 and "The longest lease is" in huge.content.decode()


def test_the_api_extends_by_a_duration_with_its_unit(frozen, api, alice, vision, a100, small_pool):
    lease = active(ask(alice, vision, a100, duration=hours(2)))
    api.force_authenticate(alice)
    url = f"/api/v1/leases/{lease.pk}/extend/"
    assert api.post(url, {"duration": 2, "unit": "hours"}, format="json").status_code == 200
    lease.refresh_from_db()
    assert lease.end_at - lease.start_at == hours(4)
    assert api.post(url, {"minutes": 30}, format="json").status_code == 200
    for body, field in (
        ({"duration": 2, "unit": "weeks"}, "unit"),
        ({"minutes": 30, "duration": 1}, "duration"),
        ({}, "duration"),
        ({"unit": "hours"}, "unit"),
        ({"duration": 10**6, "unit": "days"}, "duration"),
    ):
        response = api.post(url, body, format="json")
        assert response.status_code == 400 and field in response.json(), (body, response.json())


def test_the_api_names_who_a_change_waits_for(frozen, api, alice, lena, vision, a100, small_pool):
    _limit(lena, alice, vision, a100, max_lease_hours=3)
    lease = active(ask(alice, vision, a100, duration=hours(2)))
    api.force_authenticate(alice)
    response = api.post(
        f"/api/v1/leases/{lease.pk}/extend/", {"duration": 2, "unit": "hours"}, format="json"
    )
    assert response.status_code == 202
    assert response.json()["pending_change"]["waiting_for"] == ["lena"]
