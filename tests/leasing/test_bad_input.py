"""Bad input is a clear 4xx that says what is wrong, never a 500 (issue #15, "Bad input").

Each test is one request the attack found answering 500 (OverflowError, ValueError,
DataError) or answering the wrong thing.
"""

from __future__ import annotations

import pytest
from django.conf import settings
from rest_framework.test import APIClient

from leasing.choices import LeaseStatus
from leasing.lifecycle import provisioning
from tests.leasing.conftest import ask

NUL_MESSAGE = "NUL character"
HUGE = 100000000000000


def active(lease):
    provisioning.provision_step(lease_id=lease.pk)
    lease.refresh_from_db()
    assert lease.status == LeaseStatus.ACTIVE
    return lease


@pytest.fixture
def api():
    """The API client, asking for English (the site's default language is Chinese)."""
    client = APIClient()
    client.credentials(HTTP_ACCEPT_LANGUAGE="en")
    return client


@pytest.fixture
def web(client, alice):
    client.force_login(alice)
    client.cookies["django_language"] = "en"
    return client


def lease_body(a100, **extra):
    return {"card_model": a100.slug, "count": 1, "duration_minutes": 60, **extra}


# --- Numbers -----------------------------------------------------------------------------


def test_api_huge_duration_names_the_limit(api, frozen, alice, a100, small_pool):
    api.force_authenticate(alice)
    r = api.post("/api/v1/leases/", lease_body(a100, duration_minutes=HUGE), format="json")
    assert r.status_code == 400
    most = settings.CARDPOOL["MAX_LEASE_MINUTES"]
    assert f"{most} minutes" in r.json()["duration_minutes"][0]


@pytest.mark.parametrize("path", ["/leases/new/", "/leases/preview/"])
def test_form_huge_duration_in_days_is_a_form_error(web, frozen, vision, a100, small_pool, path):
    data = {
        "card_model": a100.slug,
        "count": "1",
        "duration": "1000000000000",
        "unit": "days",
        "start": "now",
        "team": vision.slug,
        "priority": "normal",
        "purpose": "development",
    }
    r = web.post(path, data) if path.endswith("new/") else web.get(path, data)
    assert r.status_code == 200
    if path.endswith("new/"):  # the preview, asked as you type, shows nothing until valid
        assert "The longest lease is" in r.content.decode()


@pytest.mark.parametrize("query", ["count=²", "duration=²", "count=10000000000000000000000"])
def test_prefill_with_a_unicode_digit_is_ignored(web, frozen, a100, small_pool, query):
    r = web.get(f"/leases/new/?{query}")
    assert r.status_code == 200


def test_resize_with_a_unicode_digit_says_what_is_wrong(
    web, frozen, alice, vision, a100, small_pool
):
    lease = active(ask(alice, vision, a100, count=1))
    r = web.post(f"/leases/{lease.pk}/resize/", {"count": "²"}, follow=True)
    assert r.status_code == 200
    assert "Enter a whole number" in r.content.decode()
    lease.refresh_from_db()
    assert lease.count == 1


def test_extending_by_too_much_says_too_large(web, frozen, alice, vision, a100, small_pool):
    lease = active(ask(alice, vision, a100, count=1))
    r = web.post(f"/leases/{lease.pk}/extend/", {"minutes": "999999999"}, follow=True)
    page = r.content.decode()
    assert "The longest lease is 720 hours (43200 minutes)" in page
    assert "at least 1" not in page


def test_quota_longest_lease_beyond_the_site_limit_is_refused(api, frozen, lena, vision, a100):
    api.force_authenticate(lena)
    rules = [{"card_model": a100.slug, "max_lease_hours": HUGE, "max_concurrent_cards": HUGE}]
    r = api.put(
        f"/api/v1/teams/{vision.slug}/quotas/", rules, format="json", HTTP_ACCEPT_LANGUAGE="en"
    )
    assert r.status_code == 400
    body = str(r.json())
    assert "The longest lease is" in body and "100000" in body


@pytest.mark.parametrize(
    "field", ["quota-max_concurrent_cards", "quota-max_lease_hours", "quota-card_hours_per_month"]
)
def test_team_page_huge_limits_are_form_errors(client, frozen, lena, vision, a100, field):
    client.force_login(lena)
    client.cookies["django_language"] = "en"
    r = client.post(f"/teams/{vision.slug}/quotas/", {field: str(HUGE * 10**6)}, follow=True)
    assert r.status_code == 200
    assert "Check the quota" in r.content.decode()


# --- Dates -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "query",
    [
        "start=9999-12-31&end=9999-12-31",
        "start=0001-01-01",
        "start=9999-12-31&end=9999-12-31&format=csv",
        "start=0001-01-01&format=xlsx",
    ],
)
def test_report_far_dates_are_refused(api, frozen, fin, query):
    api.force_authenticate(fin)
    r = api.get(f"/api/v1/reports/usage/?{query}")
    assert r.status_code == 400
    assert "within 100 years of today" in str(r.content, "utf-8")


@pytest.mark.parametrize("query", ["start=9999-12-31&end=9999-12-31", "start=0001-01-01"])
def test_report_page_far_dates_are_a_form_error(client, frozen, fin, query):
    client.force_login(fin)
    client.cookies["django_language"] = "en"
    r = client.get(f"/reports/?{query}")
    assert r.status_code in (200, 400)
    assert "within 100 years of today" in r.content.decode()


@pytest.mark.parametrize("month", ["9999-12", "0001-01"])
def test_statement_of_a_far_month_is_not_found(client, frozen, fin, vision, month):
    client.force_login(fin)
    assert client.get(f"/reports/statements/vision/{month}/").status_code == 404


@pytest.mark.parametrize("when", ["0001-01-01T00:00", "9999-12-31T23:59"])
@pytest.mark.parametrize("path", ["/api/v1/leases/", "/api/v1/estimate/"])
def test_naive_far_start_is_refused_not_overflowed(
    api, frozen, alice, a100, small_pool, path, when
):
    """Found by the API hostile fuzz on PostgreSQL: DRF's DateTimeField overflowed moving a
    naive time near year 1 into UTC (an OverflowError, a 500)."""
    api.force_authenticate(alice)
    body = lease_body(a100, start_at=when)
    if path.endswith("estimate/"):
        body = {"profile": {"task": "inference", "params_b": 7}, "duration_minutes": 60}
        body["start_at"] = when
    r = api.post(path, body, format="json")
    assert r.status_code == 400
    assert "within 100 years of today" in r.json()["start_at"][0]


def test_drain_at_far_date_is_refused(api, frozen, ops, a100, small_pool):
    api.force_authenticate(ops)
    r = api.post("/api/v1/nodes/gpu0/drain/", {"drain_at": "9999-12-31T23:59:59Z"}, format="json")
    assert r.status_code == 400


# --- NUL ---------------------------------------------------------------------------------


def test_nul_in_a_path_is_not_found(api, frozen, ops, a100, small_pool):
    api.force_authenticate(ops)
    assert api.get("/api/v1/nodes/a%00b/").status_code == 404
    assert api.post("/api/v1/nodes/gpu%000/drain/", {}, format="json").status_code == 404


@pytest.mark.parametrize(
    "extra",
    [{"card_model": "a100-test\u0000"}, {"team": "vision\u0000"}, {"description": "x\u0000y"}],
)
def test_nul_in_a_json_body_is_refused(api, frozen, alice, a100, small_pool, extra):
    api.force_authenticate(alice)
    r = api.post("/api/v1/leases/", lease_body(a100, **extra), format="json")
    assert r.status_code == 400
    assert NUL_MESSAGE in r.json()["detail"]


def test_nul_in_drain_and_faulty_is_refused(api, frozen, ops, a100, small_pool):
    api.force_authenticate(ops)
    r = api.post("/api/v1/nodes/gpu0/drain/", {"drain_at": "2026-12-02T00:00\u0000"}, format="json")
    assert r.status_code == 400 and NUL_MESSAGE in r.json()["detail"]
    card = small_pool[0].cards.first()
    r = api.post(f"/api/v1/cards/{card.uuid}/faulty/", {"note": "fan\u0000"}, format="json")
    assert r.status_code == 400 and NUL_MESSAGE in r.json()["detail"]


def test_nul_in_a_query_or_form_post_is_refused(web, frozen, a100, small_pool):
    assert web.get("/leases/new/?card_model=a%00").status_code == 400
    r = web.post("/leases/new/", {"card_model": "a\x00", "count": "1"})
    assert r.status_code == 400 and NUL_MESSAGE in r.content.decode()


# --- Unknown fields ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "field", [("image", "pytorch:2"), ("volume_gb", 100), ("jupyter", True), ("region", "eu")]
)
def test_unknown_lease_fields_are_refused_by_name(api, frozen, alice, a100, small_pool, field):
    api.force_authenticate(alice)
    name, value = field
    r = api.post("/api/v1/leases/", lease_body(a100, **{name: value}), format="json")
    assert r.status_code == 400
    assert name in r.json()
    assert "Unknown field" in r.json()[name][0]


def test_unknown_nested_requirement_is_refused(api, frozen, alice, a100, small_pool):
    api.force_authenticate(alice)
    body = {"requirements": {"vendor": "nvidia", "colour": "green"}, "count": 1}
    r = api.post("/api/v1/leases/", {**body, "duration_minutes": 60}, format="json")
    assert r.status_code == 400
    assert "colour" in str(r.json())


# --- Redirects -----------------------------------------------------------------------------


@pytest.mark.parametrize("back", ["²", "leasing:list", "https://evil.example/", "//evil.example/"])
def test_a_next_that_is_no_local_path_goes_to_the_list(web, frozen, back):
    """Found by tests/test_page_fuzz.py: redirect("²") tried to reverse a view named "²"."""
    r = web.post("/notifications/read-all/", {"next": back})
    assert r.status_code == 302
    assert r["Location"] == "/notifications/"


def test_a_local_next_is_followed(web, frozen):
    r = web.post("/notifications/read-all/", {"next": "/leases/"})
    assert r["Location"] == "/leases/"


@pytest.mark.parametrize(
    "headers",
    [
        {"HTTP_COOKIE": 'sessionid="abcdefgh\\000xyz"'},  # Django unquotes \000 to NUL
        {"HTTP_COOKIE": 'django_language="en\\000"'},
        {"HTTP_AUTHORIZATION": "Token abc\x00def"},
    ],
)
@pytest.mark.parametrize("path", ["/leases/", "/api/v1/leases/"])
def test_nul_in_a_cookie_or_the_authorization_is_refused(client, db, headers, path):
    """Found while reviewing the NUL check: a quoted session cookie with \\000 reached the
    session lookup (a DataError on PostgreSQL)."""
    assert client.get(path, **headers).status_code == 400


def test_statement_of_a_month_beyond_any_calendar_is_not_found(client, fin, vision):
    client.force_login(fin)
    response = client.get(f"/reports/statements/{vision.slug}/{10**20}-12/")
    assert response.status_code == 404
