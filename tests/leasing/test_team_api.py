"""/api/v1/teams/, /teams/{slug}/quotas/ and /approvals/."""

from decimal import Decimal

import pytest

from leasing.choices import LeaseStatus
from leasing.models import Quota
from leasing.teams import services as team_services
from portal.models import Membership
from tests.leasing.conftest import ask


@pytest.fixture
def api(api):
    api.credentials(HTTP_ACCEPT_LANGUAGE="en")
    return api


def test_teams_list_shows_your_teams_and_all_for_operators(api, alice, bob, ops, vision, nlp):
    api.force_authenticate(alice)
    assert [t["slug"] for t in api.get("/api/v1/teams/").json()["results"]] == ["vision"]
    assert api.get("/api/v1/teams/nlp/").status_code == 404
    api.force_authenticate(ops)
    assert [t["slug"] for t in api.get("/api/v1/teams/").json()["results"]] == ["nlp", "vision"]


@pytest.mark.parametrize("url", ["/api/v1/teams/", "/api/v1/leases/", "/api/v1/cards/"])
def test_a_huge_limit_or_offset_is_a_page_not_a_500(api, alice, vision, url):
    """Found by schemathesis: ?limit=10**35 overflowed the database's LIMIT (a 500)."""
    api.force_authenticate(alice)
    huge = 35236248283336200714282259802226688
    response = api.get(url, {"limit": huge})
    assert response.status_code == 200, response.content
    assert api.get(url, {"limit": 5, "offset": huge}).json()["results"] == []
    assert api.get(url, {"limit": huge, "offset": huge}).status_code == 200


def test_operator_puts_quotas_and_members_read_use(
    api, frozen, alice, ops, vision, a100, small_pool
):
    api.force_authenticate(ops)
    rules = [
        {"card_model": a100.slug, "max_concurrent_cards": 6, "card_hours_per_month": "100"},
        {"card_model": None, "money_per_month": "5000.00"},
    ]
    response = api.put("/api/v1/teams/vision/quotas/", rules, format="json")
    assert response.status_code == 200, response.content
    ask(alice, vision, a100, count=2)  # 2 cards × 2 h
    api.force_authenticate(alice)
    body = {r["card_model"]: r for r in api.get("/api/v1/teams/vision/quotas/").json()}
    assert body[a100.slug]["max_concurrent_cards"] == 6
    assert Decimal(body[a100.slug]["booked_card_hours"]) == Decimal(4)
    assert body[None]["money_per_month"] == "5000.00"
    # PUT replaces: a rule not given is removed.
    api.force_authenticate(ops)
    api.put("/api/v1/teams/vision/quotas/", rules[:1], format="json")
    assert Quota.objects.filter(team=vision).count() == 1


@pytest.mark.parametrize(
    ("rules", "words"),
    [
        ([{"card_model": "nope"}], "Unknown card model"),
        ([{"card_model": None, "max_concurrent_cards": -1}], "greater than or equal to 0"),
        ([{"card_model": None}, {"card_model": None}], "same card model"),
        ({"card_model": None}, "list"),
    ],
)
def test_bad_quota_puts_get_400_and_change_nothing(api, ops, vision, a100, rules, words):
    api.force_authenticate(ops)
    response = api.put("/api/v1/teams/vision/quotas/", rules, format="json")
    assert response.status_code == 400 and words in response.content.decode()
    assert not Quota.objects.exists()


def test_leads_and_members_cannot_put_quotas(api, alice, lena, vision):
    for user in (alice, lena):
        api.force_authenticate(user)
        response = api.put(
            "/api/v1/teams/vision/quotas/", [{"max_concurrent_cards": 99}], format="json"
        )
        assert response.status_code == 403
    assert not Quota.objects.exists()


def test_approvals_flow_through_the_api(api, frozen, alice, lena, bob, vision, a100, small_pool):
    membership = Membership.objects.get(user=alice, team=vision)
    team_services.member_limit_set(
        user=lena, membership=membership, card_model=None, max_concurrent_cards=1
    )
    lease = ask(alice, vision, a100, count=2)
    api.force_authenticate(bob)
    assert api.get("/api/v1/approvals/").json()["count"] == 0
    assert api.post(f"/api/v1/approvals/{lease.pk}/approve/").status_code == 404
    api.force_authenticate(alice)
    assert api.post(f"/api/v1/approvals/{lease.pk}/approve/").status_code == 404
    api.force_authenticate(lena)
    assert [a["id"] for a in api.get("/api/v1/approvals/").json()["results"]] == [lease.pk]
    assert (
        api.post(f"/api/v1/approvals/{lease.pk}/reject/", {"reason": ""}, format="json").status_code
        == 400
    )
    response = api.post(f"/api/v1/approvals/{lease.pk}/approve/", {"reason": "fine"}, format="json")
    assert response.status_code == 200 and response.json()["status"] == LeaseStatus.PROVISIONING


def test_operator_override_through_the_api(api, frozen, alice, ops, vision, a100, small_pool):
    team_services.quota_set(user=ops, team=vision, card_model=a100, max_concurrent_cards=1)
    body = {"card_model": a100.slug, "count": 2, "duration_minutes": 60, "team": "vision"}
    api.force_authenticate(alice)
    refused = api.post("/api/v1/leases/", body | {"override_reason": "please"}, format="json")
    assert refused.status_code == 403
    assert api.post("/api/v1/leases/", body, format="json").status_code == 400
    api.force_authenticate(ops)
    allowed = api.post("/api/v1/leases/", body | {"override_reason": "deadline"}, format="json")
    assert allowed.status_code == 201
