"""Personal API tokens: made and named on the profile page, shown once, hashed at rest,
used as `Authorization: Token <key>`, revoked; the throttled password → token endpoint."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
import time_machine
from rest_framework.throttling import ScopedRateThrottle

from portal.models import Profile
from portal.tokens.models import ApiToken
from portal.tokens.services import token_create, token_digest
from tests.factories import UserFactory

T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)


@pytest.fixture
def api(api):
    api.credentials(HTTP_ACCEPT_LANGUAGE="en")
    return api


def use(api, key):
    api.credentials(HTTP_AUTHORIZATION=f"Token {key}", HTTP_ACCEPT_LANGUAGE="en")
    return api.get("/api/v1/leases/")


# --- The profile page -------------------------------------------------------------------


def test_profile_needs_sign_in(client, db):
    response = client.get("/accounts/profile/")
    assert response.status_code == 302 and response.url.startswith("/accounts/login/")


def test_token_is_shown_once_and_stored_hashed(en_client, alice):
    en_client.force_login(alice)
    with time_machine.travel(T0, tick=False):
        response = en_client.post(
            "/accounts/profile/tokens/", {"name": "laptop scripts", "expires_in_days": "90"}
        )
    assert response.status_code == 200
    assert "no-store" in response["Cache-Control"]
    key = response.context["new_key"]["key"]
    assert key in response.content.decode()

    token = ApiToken.objects.get(user=alice)
    assert token.name == "laptop scripts"
    assert token.digest == token_digest(key) and key not in (token.digest, token.prefix)
    assert key.startswith(token.prefix) and len(token.prefix) < len(key) // 3
    assert (token.created_at, token.expires_at) == (T0, T0 + timedelta(days=90))

    page = en_client.get("/accounts/profile/").content.decode()
    assert key not in page
    assert "laptop scripts" in page and f"{token.prefix}…" in page


def test_token_without_expiry_and_blank_name(en_client, alice):
    en_client.force_login(alice)
    ok = en_client.post("/accounts/profile/tokens/", {"name": "ci", "expires_in_days": ""})
    assert ok.status_code == 200
    assert ApiToken.objects.get(user=alice).expires_at is None
    blank = en_client.post("/accounts/profile/tokens/", {"name": "  ", "expires_in_days": "30"})
    assert blank.status_code == 400
    assert ApiToken.objects.filter(user=alice).count() == 1


def test_token_works_and_records_last_use(api, alice):
    with time_machine.travel(T0, tick=False):
        token, key = token_create(user=alice, name="ci")
        assert use(api, key).status_code == 200
    token.refresh_from_db()
    assert token.last_used_at == T0
    with time_machine.travel(T0 + timedelta(seconds=30), tick=False):
        assert use(api, key).status_code == 200
    token.refresh_from_db()
    assert token.last_used_at == T0  # at most one write a minute


def test_revoked_token_stops_working(en_client, api, alice):
    token, key = token_create(user=alice, name="ci")
    assert use(api, key).status_code == 200
    en_client.force_login(alice)
    response = en_client.post(f"/accounts/profile/tokens/{token.pk}/revoke/")
    assert response.status_code == 302
    assert not ApiToken.objects.filter(pk=token.pk).exists()
    refused = use(api, key)
    assert refused.status_code == 401
    assert refused.json()["detail"] == "Invalid or revoked token."


def test_cannot_see_or_revoke_someone_elses_token(en_client, alice, bob):
    token, _key = token_create(user=bob, name="bob's secret job")
    en_client.force_login(alice)
    assert "bob's secret job" not in en_client.get("/accounts/profile/").content.decode()
    assert en_client.post(f"/accounts/profile/tokens/{token.pk}/revoke/").status_code == 404
    assert en_client.get(f"/accounts/profile/tokens/{token.pk}/revoke/").status_code == 405
    assert ApiToken.objects.filter(pk=token.pk).exists()


def test_expired_token_and_inactive_user_are_refused(api, alice):
    with time_machine.travel(T0, tick=False):
        _token, key = token_create(user=alice, name="short", expires_at=T0 + timedelta(hours=1))
    with time_machine.travel(T0 + timedelta(hours=2), tick=False):
        refused = use(api, key)
    assert refused.status_code == 401 and refused.json()["detail"] == "This token has expired."

    _token, key = token_create(user=alice, name="ci")
    alice.is_active = False
    alice.save()
    assert use(api, key).status_code == 401


def test_making_a_token_removes_expired_ones(alice):
    with time_machine.travel(T0, tick=False):
        token_create(user=alice, name="old", expires_at=T0 + timedelta(hours=1))
        token_create(user=alice, name="kept")
    with time_machine.travel(T0 + timedelta(days=1), tick=False):
        token_create(user=alice, name="new")
    assert set(ApiToken.objects.values_list("name", flat=True)) == {"kept", "new"}


def test_profile_page_queries_are_bounded(en_client, alice, django_assert_max_num_queries):
    for n in range(20):
        token_create(user=alice, name=f"t{n}")
    en_client.force_login(alice)
    with django_assert_max_num_queries(8):
        assert en_client.get("/accounts/profile/").status_code == 200


def test_preferences_time_zone_and_language(en_client, alice):
    en_client.force_login(alice)
    response = en_client.post("/accounts/profile/", {"timezone": "Europe/Berlin", "language": "en"})
    assert response.status_code == 302
    assert Profile.objects.get(user=alice).timezone == "Europe/Berlin"
    assert response.cookies["django_language"].value == "en"
    page = en_client.get("/accounts/profile/").content.decode()
    assert "Times are shown in Europe/Berlin" in page

    bad = en_client.post("/accounts/profile/", {"timezone": "Mars/Olympus", "language": "en"})
    assert bad.status_code == 400
    assert Profile.objects.get(user=alice).timezone == "Europe/Berlin"

    en_client.post("/accounts/profile/", {"timezone": "", "language": "zh-hans"})
    assert Profile.objects.get(user=alice).timezone == ""


def test_preferences_for_a_user_without_a_profile(en_client, db):
    user = UserFactory(username="newcomer")
    Profile.objects.filter(user=user).delete()
    en_client.force_login(user)
    assert en_client.get("/accounts/profile/").status_code == 200
    en_client.post("/accounts/profile/", {"timezone": "Asia/Tokyo", "language": "en"})
    assert Profile.objects.get(user=user).timezone == "Asia/Tokyo"


def test_user_menu_links_to_the_profile(en_client, alice):
    en_client.force_login(alice)
    assert 'href="/accounts/profile/"' in en_client.get("/").content.decode()


# --- POST /api/v1/auth/token/ -----------------------------------------------------------


def test_token_endpoint_issues_a_named_expiring_token(api, alice):
    with time_machine.travel(T0, tick=False):
        response = api.post(
            "/api/v1/auth/token/",
            {"username": "alice@example.org", "password": "pw-for-tests", "name": "nightly"},
            format="json",
        )
    assert response.status_code == 200
    body = response.json()
    token = ApiToken.objects.get(user=alice)
    assert body["name"] == token.name == "nightly"
    assert token.expires_at == T0 + timedelta(days=30)
    assert token.digest == token_digest(body["token"])


def test_token_endpoint_bad_credentials(api, alice):
    response = api.post(
        "/api/v1/auth/token/", {"username": "alice", "password": "wrong"}, format="json"
    )
    assert response.status_code == 400
    assert response.json() == {"non_field_errors": ["Wrong username or password."]}
    missing = api.post("/api/v1/auth/token/", {"username": "alice"}, format="json")
    assert missing.status_code == 400 and "password" in missing.json()
    assert not ApiToken.objects.exists()


def test_token_endpoint_is_throttled(api, alice, monkeypatch):
    monkeypatch.setattr(ScopedRateThrottle, "THROTTLE_RATES", {"auth-token": "3/min"})
    # A forged X-Forwarded-For does not make a fresh client (no trusted proxy by default).
    for n in range(3):
        api.post(
            "/api/v1/auth/token/",
            {"username": "alice", "password": "x"},
            format="json",
            HTTP_X_FORWARDED_FOR=f"203.0.113.{n}",
        )
    response = api.post(
        "/api/v1/auth/token/",
        {"username": "alice", "password": "pw-for-tests"},
        format="json",
        HTTP_X_FORWARDED_FOR="203.0.113.99",
    )
    assert response.status_code == 429
    assert "Retry-After" in response
    assert not ApiToken.objects.exists()


def test_token_endpoint_default_rate():
    from django.conf import settings

    assert settings.REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"]["auth-token"] == "10/min"
