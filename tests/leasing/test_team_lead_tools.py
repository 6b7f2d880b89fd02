"""A lead's tools on the team page: members in and out, the idle policy, the chart's range,
and the lease list's "mine / my teams'" switch."""

from datetime import date

import pytest
from django.core.exceptions import PermissionDenied, ValidationError

from leasing.lifecycle import changes, provisioning
from leasing.teams import services as team_services
from portal.models import AuditEntry, Membership
from tests.factories import UserFactory
from tests.leasing.conftest import T0, ask, hours


@pytest.fixture
def as_lena(client, lena):
    client.force_login(lena)
    client.cookies["django_language"] = "en"
    return client


def test_lead_adds_and_removes_a_member_through_the_page(as_lena, frozen, lena, vision, bob):
    response = as_lena.post("/teams/vision/members/", {"member-username": "bob"}, follow=True)
    assert "bob joined the team." in response.content.decode()
    membership = Membership.objects.get(team=vision, user=bob)
    assert membership.role == Membership.Role.MEMBER
    assert AuditEntry.objects.filter(action="membership_add", actor=lena, target="vision").exists()

    again = as_lena.post("/teams/vision/members/", {"member-username": "bob"}, follow=True)
    assert "bob is in the team already." in again.content.decode()
    unknown = as_lena.post("/teams/vision/members/", {"member-username": "nobody"}, follow=True)
    assert "No account is called nobody" in unknown.content.decode()

    response = as_lena.post(f"/teams/vision/members/{membership.pk}/remove/", follow=True)
    assert "bob left the team." in response.content.decode()
    assert not Membership.objects.filter(team=vision, user=bob).exists()
    assert AuditEntry.objects.filter(action="membership_remove", target="vision").exists()


def test_a_member_with_open_leases_stays_until_they_end(
    as_lena, frozen, alice, lena, vision, a100, small_pool
):
    lease = ask(alice, vision, a100, count=1, duration=hours(2))
    provisioning.provision_step(lease_id=lease.pk)
    membership = Membership.objects.get(team=vision, user=alice)
    page = as_lena.post(f"/teams/vision/members/{membership.pk}/remove/", follow=True)
    assert "alice still has 1 open lease(s)" in page.content.decode()
    assert Membership.objects.filter(pk=membership.pk).exists()
    changes.lease_release(lease=lease, user=alice)
    provisioning.release_step(lease_id=lease.pk)
    team_services.membership_remove(user=lena, membership=membership)
    assert not Membership.objects.filter(pk=membership.pk).exists()


def test_leads_stay_and_only_operators_make_leads(frozen, lena, ops, vision, bob):
    lead = Membership.objects.get(team=vision, user=lena)
    with pytest.raises(PermissionDenied):
        team_services.membership_remove(user=lena, membership=lead)
    with pytest.raises(ValidationError):  # the last lead, even for an operator
        team_services.membership_remove(user=ops, membership=lead)
    with pytest.raises(PermissionDenied):
        team_services.membership_add(user=lena, team=vision, member=bob, role="lead")
    team_services.membership_add(user=ops, team=vision, member=bob, role="lead")
    team_services.membership_remove(user=ops, membership=lead)  # another lead is left
    assert list(
        vision.memberships.filter(role="lead").values_list("user__username", flat=True)
    ) == ["bob"]


def test_a_member_cannot_manage_members(frozen, alice, vision):
    newcomer = UserFactory(username="newcomer")
    with pytest.raises(PermissionDenied):
        team_services.membership_add(user=alice, team=vision, member=newcomer)


def test_lead_sets_the_idle_policy(as_lena, frozen, lena, alice, vision):
    response = as_lena.post(
        "/teams/vision/idle/",
        {"idle-idle_threshold_pct": "10", "idle-idle_minutes": "30", "idle-idle_reclaim": "on"},
        follow=True,
    )
    assert "Idle policy saved." in response.content.decode()
    vision.refresh_from_db()
    assert (vision.idle_threshold_pct, vision.idle_minutes, vision.idle_reclaim) == (10, 30, True)
    assert AuditEntry.objects.filter(action="team_idle_policy_set", actor=lena).exists()
    bad = as_lena.post(
        "/teams/vision/idle/", {"idle-idle_threshold_pct": "101", "idle-idle_minutes": "1"}
    )
    assert bad.status_code == 302
    vision.refresh_from_db()
    assert vision.idle_threshold_pct == 10  # unchanged
    with pytest.raises(PermissionDenied):
        team_services.team_idle_policy_set(
            user=alice, team=vision, idle_reclaim=False, idle_threshold_pct=5, idle_minutes=60
        )
    with pytest.raises(ValidationError):
        team_services.team_idle_policy_set(
            user=lena, team=vision, idle_reclaim=False, idle_threshold_pct=5, idle_minutes=2
        )


def test_team_chart_covers_the_chosen_range(as_lena, frozen, alice, lena, vision, a100, small_pool):
    lease = ask(alice, vision, a100, count=2, duration=hours(3))  # 1 Dec 09:00–12:00
    provisioning.provision_step(lease_id=lease.pk)
    frozen.move_to(T0.replace(year=2027, month=1, day=10))
    as_lena.force_login(lena)  # the session of December has expired
    response = as_lena.get("/teams/vision/")
    assert response.status_code == 200, response
    default = response.content.decode()
    assert 'id="daily-chart-empty"' in default  # the last 30 days: nothing since 11 Dec
    assert "2026-12-12 to 2027-01-10" in default
    december = as_lena.get("/teams/vision/?start=2026-12-01&end=2026-12-31").content.decode()
    assert 'id="daily-chart"' in december
    assert "2026-12-01 to 2026-12-31" in december
    assert "2026-12-01" in december and "6.0" in december  # 2 cards × 3 h on the 1st
    backwards = as_lena.get("/teams/vision/?start=2026-12-31&end=2026-12-01")
    assert backwards.status_code == 200
    assert "The end comes before the start." in backwards.content.decode()
    too_long = as_lena.get("/teams/vision/?start=2020-01-01&end=2026-12-31")
    assert "At most 366 days at a time." in too_long.content.decode()
    assert as_lena.get("/teams/vision/?start=nonsense").status_code == 200


def test_daily_hours_over_a_range(frozen, alice, vision, a100, small_pool):
    from leasing.teams import selectors

    lease = ask(alice, vision, a100, count=1, duration=hours(20))  # 09:00 → 05:00 next day
    provisioning.provision_step(lease_id=lease.pk)
    frozen.move_to(T0 + hours(48))
    since = T0.replace(hour=0)
    daily = selectors.team_daily_hours(
        vision, since=since, until=since + hours(72), now=T0 + hours(48)
    )
    assert daily == {a100.name: {date(2026, 12, 1): 15, date(2026, 12, 2): 5}}


def test_lease_list_switches_between_mine_and_my_team(
    client, frozen, alice, lena, bob, vision, a100, small_pool
):
    lease = ask(alice, vision, a100, count=1, duration=hours(2))
    client.force_login(lena)
    client.cookies["django_language"] = "en"
    mine = client.get("/leases/").content.decode()
    assert 'id="scope-switch"' in mine and f'href="/leases/{lease.pk}/"' not in mine
    team = client.get("/leases/?scope=team").content.decode()
    assert f'href="/leases/{lease.pk}/"' in team
    assert "My teams&#x27; leases" in team and "<td>alice</td>" in team
    assert "?scope=team" in team  # the live refresh keeps the scope
    client.force_login(bob)  # a member: no switch, and ?scope=team shows only his own
    page = client.get("/leases/?scope=team").content.decode()
    assert 'id="scope-switch"' not in page and f'href="/leases/{lease.pk}/"' not in page


def test_the_api_documents_and_takes_the_same_scope(
    api, frozen, alice, lena, vision, a100, small_pool
):
    lease = ask(alice, vision, a100, count=1, duration=hours(2))
    api.force_authenticate(lena)
    mine = api.get("/api/v1/leases/").json()
    assert lease.pk not in [item["id"] for item in mine["results"]]
    team = api.get("/api/v1/leases/?scope=team").json()
    assert lease.pk in [item["id"] for item in team["results"]]
    schema = api.get("/api/v1/schema/?format=json").json()
    params = schema["paths"]["/api/v1/leases/"]["get"]["parameters"]
    scope = next(p for p in params if p["name"] == "scope")
    assert sorted(scope["schema"]["enum"]) == ["all", "mine", "team"]


def test_members_through_the_api(api, frozen, lena, alice, bob, vision):
    api.force_authenticate(lena)
    api.credentials(HTTP_ACCEPT_LANGUAGE="en")
    listed = api.get("/api/v1/teams/vision/members/").json()
    assert [(m["username"], m["role"]) for m in listed] == [("lena", "lead"), ("alice", "member")]
    added = api.post("/api/v1/teams/vision/members/", {"username": "bob"}, format="json")
    assert added.status_code == 201 and "bob" in [m["username"] for m in added.json()]
    again = api.post("/api/v1/teams/vision/members/", {"username": "bob"}, format="json")
    assert again.status_code == 400 and "bob is in the team already." in str(again.json())
    unknown = api.post("/api/v1/teams/vision/members/", {"username": "zed"}, format="json")
    assert unknown.status_code == 400 and "username" in unknown.json()
    extra = api.post(
        "/api/v1/teams/vision/members/", {"username": "bob", "role": "lead"}, format="json"
    )
    assert extra.status_code == 400 and "role" in str(extra.json())  # unknown field named
    assert api.delete("/api/v1/teams/vision/members/bob/").status_code == 204
    assert api.delete("/api/v1/teams/vision/members/bob/").status_code == 404
    assert not Membership.objects.filter(team=vision, user=bob).exists()
