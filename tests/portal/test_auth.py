"""Sign-in: email verification, password reset, failed-login throttling, OIDC and LDAP wiring."""

from __future__ import annotations

import json
import os
import re
import runpy
import ssl
from pathlib import Path
from unittest import mock
from urllib.parse import parse_qs, urlparse

import pytest
import requests
from allauth.account.models import EmailAddress
from django.contrib.auth import get_user_model
from django.core.exceptions import ImproperlyConfigured
from ldap3.core.exceptions import LDAPBindError

from portal.models import Profile

SETTINGS_FILE = Path(__file__).resolve().parents[2] / "portal" / "settings.py"
LDAP_BACKEND = "portal.ldap_backend.LDAPBackend"


def link_in(mail) -> str:
    return re.search(r"https?://testserver(/\S+)", mail.body).group(1)


# --- Email + password -------------------------------------------------------------------


def test_signup_sends_a_verification_link_that_verifies(en_client, db, mailoutbox, settings):
    settings.ACCOUNT_SIGNUP_ENABLED = True
    settings.ACCOUNT_EMAIL_VERIFICATION = "mandatory"
    response = en_client.post(
        "/accounts/signup/",
        {
            "email": "carol@example.org",
            "username": "carol",
            "password1": "a-long-passphrase-9",
            "password2": "a-long-passphrase-9",
        },
    )
    assert response.status_code == 302
    assert response.url == "/accounts/confirm-email/"
    address = EmailAddress.objects.get(email="carol@example.org")
    assert not address.verified
    assert len(mailoutbox) == 1 and mailoutbox[0].to == ["carol@example.org"]
    assert mailoutbox[0].subject.startswith("[Cardpool] ")

    # Unverified: the browser is sent back to "check your email", scripts get no token.
    en_client.post("/accounts/login/", {"login": "carol", "password": "a-long-passphrase-9"})
    assert "_auth_user_id" not in en_client.session
    refused = en_client.post(
        "/api/v1/auth/token/", {"username": "carol", "password": "a-long-passphrase-9"}
    )
    assert refused.status_code == 400
    assert "Verify your email address" in refused.json()["non_field_errors"][0]

    confirm = link_in(mailoutbox[-1])
    assert en_client.get(confirm).status_code == 200
    en_client.post(confirm)
    address.refresh_from_db()
    assert address.verified
    en_client.post("/accounts/login/", {"login": "carol", "password": "a-long-passphrase-9"})
    assert en_client.session["_auth_user_id"] == str(address.user_id)


def test_signup_can_be_closed(en_client, db, settings):
    settings.ACCOUNT_SIGNUP_ENABLED = False
    response = en_client.get("/accounts/signup/")
    assert b"Sign Up Closed" in response.content


def test_password_reset_by_email(en_client, alice, mailoutbox):
    response = en_client.post("/accounts/password/reset/", {"email": alice.email})
    assert response.status_code == 302
    assert len(mailoutbox) == 1
    step = en_client.get(link_in(mailoutbox[0]))
    assert step.status_code == 302  # the key moves into the session, out of the address bar
    form_url = step.url
    done = en_client.post(
        form_url, {"password1": "brand-new-secret-7", "password2": "brand-new-secret-7"}
    )
    assert done.status_code == 302
    alice.refresh_from_db()
    assert alice.check_password("brand-new-secret-7")
    assert not alice.check_password("pw-for-tests")


def test_failed_logins_are_throttled(en_client, alice, settings):
    settings.ACCOUNT_RATE_LIMITS = {"login_failed": "10/m/ip,3/5m/key"}
    for _ in range(3):
        response = en_client.post("/accounts/login/", {"login": "alice", "password": "wrong"})
        assert b"not correct" in response.content
    # Even the right password is refused now, until the window passes.
    response = en_client.post("/accounts/login/", {"login": "alice", "password": "pw-for-tests"})
    assert b"Too many failed login attempts" in response.content
    assert "_auth_user_id" not in en_client.session


def test_the_site_limits_failed_logins_by_default():
    namespace = runpy.run_path(str(SETTINGS_FILE))
    assert namespace["ACCOUNT_RATE_LIMITS"]["login_failed"] == "10/m/ip,5/5m/key"


# --- OpenID Connect ---------------------------------------------------------------------

ISSUER = "https://id.corp.example"
DISCOVERY = {
    "issuer": ISSUER,
    "authorization_endpoint": f"{ISSUER}/authorize",
    "token_endpoint": f"{ISSUER}/token",
    "userinfo_endpoint": f"{ISSUER}/userinfo",
    "jwks_uri": f"{ISSUER}/jwks",
    "token_endpoint_auth_methods_supported": ["client_secret_post"],
}
OIDC_APP = {
    "provider_id": "corp",
    "name": "Corp SSO",
    "client_id": "cardpool",
    "secret": "s3cret",
    "settings": {"server_url": ISSUER, "scope": ["openid", "profile", "email"]},
}


def _json_response(url: str, payload: dict) -> requests.Response:
    response = requests.Response()
    response.status_code = 200
    response.url = url
    response.headers["Content-Type"] = "application/json"
    response._content = json.dumps(payload).encode()
    return response


@pytest.fixture
def identity_provider():
    """A fake identity provider behind requests: no network. Records each call."""
    calls: list[tuple[str, str]] = []

    def fake_request(self, method, url, *args, **kwargs):
        calls.append((method.upper(), url))
        if url == f"{ISSUER}/.well-known/openid-configuration":
            return _json_response(url, DISCOVERY)
        if url == DISCOVERY["token_endpoint"]:
            return _json_response(url, {"access_token": "at-1", "token_type": "Bearer"})
        if url == DISCOVERY["userinfo_endpoint"]:
            claims = {
                "sub": "u-42",
                "preferred_username": "carol",
                "email": "carol@corp.example",
                "email_verified": True,
                "given_name": "Carol",
                "groups": ["gpu-vision", "unmapped"],
            }
            return _json_response(url, claims)
        raise AssertionError(f"unexpected request {method} {url}")

    with mock.patch.object(requests.Session, "request", fake_request):
        yield calls


@pytest.fixture
def oidc(settings):
    settings.SOCIALACCOUNT_PROVIDERS = {
        "openid_connect": {"OAUTH_PKCE_ENABLED": True, "APPS": [OIDC_APP]}
    }


def test_no_sso_button_without_oidc_settings(en_client, db):
    page = en_client.get("/accounts/login/").content.decode()
    assert "/accounts/oidc/" not in page


def test_sso_button_and_redirect_to_the_provider(en_client, db, oidc, identity_provider):
    page = en_client.get("/accounts/login/").content.decode()
    assert "Sign in with Corp SSO" in page and "/accounts/oidc/corp/login/" in page

    response = en_client.post("/accounts/oidc/corp/login/")
    assert response.status_code == 302
    target = urlparse(response.url)
    assert f"{target.scheme}://{target.netloc}{target.path}" == DISCOVERY["authorization_endpoint"]
    query = parse_qs(target.query)
    assert query["client_id"] == ["cardpool"]
    assert query["response_type"] == ["code"]
    assert query["redirect_uri"] == ["http://testserver/accounts/oidc/corp/login/callback/"]
    assert set(query["scope"][0].split()) == {"openid", "profile", "email"}
    assert query["code_challenge_method"] == ["S256"] and query["state"][0]
    assert identity_provider == [("GET", f"{ISSUER}/.well-known/openid-configuration")]


def test_sso_callback_signs_the_person_in(en_client, db, oidc, identity_provider):
    start = en_client.post("/accounts/oidc/corp/login/")
    state = parse_qs(urlparse(start.url).query)["state"][0]
    response = en_client.get("/accounts/oidc/corp/login/callback/", {"code": "c-1", "state": state})
    assert response.status_code == 302
    user = get_user_model().objects.get(username="carol")
    assert user.email == "carol@corp.example"
    assert en_client.session["_auth_user_id"] == str(user.pk)
    assert ("POST", DISCOVERY["token_endpoint"]) in identity_provider


def test_sso_groups_claim_brings_teams(en_client, db, oidc, identity_provider, settings, vision):
    from portal.directory_map import parse_team_map
    from portal.models import DirectoryAccount, Membership

    settings.CARDPOOL_DIRECTORY = {
        **settings.CARDPOOL_DIRECTORY,
        "TEAMS": parse_team_map("gpu-vision=vision"),
    }
    start = en_client.post("/accounts/oidc/corp/login/")
    state = parse_qs(urlparse(start.url).query)["state"][0]
    en_client.get("/accounts/oidc/corp/login/callback/", {"code": "c-1", "state": state})
    membership = Membership.objects.get(user__username="carol")
    assert (membership.team, membership.source) == (vision, "directory")
    account = DirectoryAccount.objects.get(user__username="carol")
    assert (account.source, account.dn, account.groups) == (
        "oidc",
        "u-42",
        ["gpu-vision", "unmapped"],
    )


def test_sso_signup_can_be_closed(en_client, db, oidc, identity_provider, settings):
    settings.CARDPOOL_OIDC_ALLOW_SIGNUP = False
    start = en_client.post("/accounts/oidc/corp/login/")
    state = parse_qs(urlparse(start.url).query)["state"][0]
    en_client.get("/accounts/oidc/corp/login/callback/", {"code": "c-1", "state": state})
    assert not get_user_model().objects.filter(username="carol").exists()
    assert "_auth_user_id" not in en_client.session


def run_settings(monkeypatch, **environ) -> dict:
    """portal/settings.py evaluated afresh under the given environment."""
    for name in [n for n in os.environ if n.startswith(("CARDPOOL_OIDC", "CARDPOOL_LDAP"))]:
        monkeypatch.delenv(name)
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    return runpy.run_path(str(SETTINGS_FILE))


def test_oidc_is_configured_from_the_environment(monkeypatch, tmp_path):
    secret = tmp_path / "oidc-secret"
    secret.write_text("from-a-file\n")
    namespace = run_settings(
        monkeypatch,
        CARDPOOL_OIDC_SERVER_URL=ISSUER,
        CARDPOOL_OIDC_PROVIDER_NAME="Corp SSO",
        CARDPOOL_OIDC_CLIENT_ID="cardpool",
        CARDPOOL_OIDC_CLIENT_SECRET_FILE=str(secret),
    )
    (app,) = namespace["SOCIALACCOUNT_PROVIDERS"]["openid_connect"]["APPS"]
    assert app["provider_id"] == "sso" and app["name"] == "Corp SSO"
    assert app["secret"] == "from-a-file" and app["settings"]["server_url"] == ISSUER
    assert namespace["SOCIALACCOUNT_PROVIDERS"]["openid_connect"]["OAUTH_PKCE_ENABLED"]


def test_oidc_without_client_credentials_fails_loudly(monkeypatch):
    with pytest.raises(ImproperlyConfigured, match="CARDPOOL_OIDC_CLIENT_ID"):
        run_settings(monkeypatch, CARDPOOL_OIDC_SERVER_URL=ISSUER)


def test_no_oidc_app_by_default(monkeypatch):
    namespace = run_settings(monkeypatch)
    assert namespace["SOCIALACCOUNT_PROVIDERS"]["openid_connect"]["APPS"] == []


# --- LDAP -------------------------------------------------------------------------------


def test_ldap_is_off_unless_configured(monkeypatch):
    namespace = run_settings(monkeypatch)
    assert LDAP_BACKEND not in namespace["AUTHENTICATION_BACKENDS"]
    assert "LDAP_AUTH_URL" not in namespace
    assert "directory-sync" not in namespace["CELERY_BEAT_SCHEDULE"]


def test_ldap_is_configured_from_the_environment(monkeypatch, tmp_path):
    password = tmp_path / "bind-password"
    password.write_text("bind-secret\n")
    namespace = run_settings(
        monkeypatch,
        CARDPOOL_LDAP_URL="ldaps://ldap1.corp.example,ldaps://ldap2.corp.example",
        CARDPOOL_LDAP_SEARCH_BASE="ou=people,dc=corp,dc=example",
        CARDPOOL_LDAP_BIND_USER="svc-cardpool",
        CARDPOOL_LDAP_BIND_PASSWORD_FILE=str(password),
        CARDPOOL_LDAP_USER_FIELDS="username=sAMAccountName,email=mail",
        CARDPOOL_LDAP_USERNAME_FORMAT="active_directory",
        CARDPOOL_LDAP_DOMAIN="CORP",
    )
    assert namespace["AUTHENTICATION_BACKENDS"][-1] == LDAP_BACKEND
    assert namespace["LDAP_AUTH_URL"] == [
        "ldaps://ldap1.corp.example",
        "ldaps://ldap2.corp.example",
    ]
    assert namespace["LDAP_AUTH_SEARCH_BASE"] == "ou=people,dc=corp,dc=example"
    assert namespace["LDAP_AUTH_CONNECTION_USERNAME"] == "svc-cardpool"
    assert namespace["LDAP_AUTH_CONNECTION_PASSWORD"] == "bind-secret"
    assert namespace["LDAP_AUTH_USER_FIELDS"] == {"username": "sAMAccountName", "email": "mail"}
    assert namespace["CARDPOOL_LDAP_FORMAT_USERNAME"].endswith("format_username_active_directory")
    assert namespace["LDAP_AUTH_FORMAT_USERNAME"] == "portal.auth_ldap.format_username"
    assert namespace["LDAP_AUTH_TLS_ARGS"] == {"validate": ssl.CERT_REQUIRED}
    assert namespace["LDAP_AUTH_POOL_ACTIVE"] == 1  # a down directory is a "no", not a hang
    assert namespace["CELERY_BEAT_SCHEDULE"]["directory-sync"]["schedule"] == 300.0
    assert namespace["LDAP_AUTH_ACTIVE_DIRECTORY_DOMAIN"] == "CORP"


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("CARDPOOL_LDAP_USER_FIELDS", "email=mail", "must map username"),
        ("CARDPOOL_LDAP_USER_FIELDS", "username=uid,shoe_size=x", "shoe_size=x"),
        ("CARDPOOL_LDAP_USERNAME_FORMAT", "novell", "novell"),
    ],
)
def test_bad_ldap_settings_fail_loudly(monkeypatch, name, value, message):
    with pytest.raises(ImproperlyConfigured, match=message):
        run_settings(monkeypatch, CARDPOOL_LDAP_URL="ldap://ldap.corp.example", **{name: value})


@pytest.fixture
def ldap(settings):
    """The LDAP backend switched on, with ldap3's connection faked (tests/identity/ signs in
    against a real slapd)."""
    settings.AUTHENTICATION_BACKENDS = [*settings.AUTHENTICATION_BACKENDS, LDAP_BACKEND]
    settings.LDAP_AUTH_URL = ["ldap://ldap.corp.example"]
    settings.LDAP_AUTH_SEARCH_BASE = "ou=people,dc=corp,dc=example"
    settings.LDAP_AUTH_SYNC_USER_RELATIONS = "portal.auth_ldap.sync_user_relations"
    settings.CARDPOOL_LDAP_FORMAT_USERNAME = "django_python3_ldap.utils.format_username_openldap"
    settings.LDAP_AUTH_FORMAT_USERNAME = "portal.auth_ldap.format_username"
    with mock.patch("django_python3_ldap.ldap.ldap3.Connection") as connection:
        connection.return_value.response = [
            {
                "dn": "uid=dana,ou=people,dc=corp,dc=example",
                "attributes": {
                    "uid": ["dana"],
                    "mail": ["dana@corp.example"],
                    "givenName": ["Dana"],
                    "sn": ["Wu"],
                },
            }
        ]
        yield connection


def test_ldap_user_signs_in_through_the_login_page(en_client, db, ldap, settings):
    settings.ACCOUNT_EMAIL_VERIFICATION = "mandatory"  # the directory's address counts
    response = en_client.post("/accounts/login/", {"login": "dana", "password": "ldap-pw"})
    assert response.status_code == 302
    user = get_user_model().objects.get(username="dana")
    assert en_client.session["_auth_user_id"] == str(user.pk)
    assert (user.email, user.first_name, user.last_name) == ("dana@corp.example", "Dana", "Wu")
    assert not user.has_usable_password()
    assert Profile.objects.filter(user=user).exists()
    assert EmailAddress.objects.get(user=user).verified
    bound_as = ldap.call_args.kwargs
    assert bound_as["user"] == "uid=dana,ou=people,dc=corp,dc=example"
    assert bound_as["password"] == "ldap-pw"


def test_ldap_wrong_password_is_refused(en_client, db, ldap):
    ldap.return_value.bind.side_effect = LDAPBindError("invalidCredentials")
    response = en_client.post("/accounts/login/", {"login": "dana", "password": "nope"})
    assert response.status_code == 200
    assert ldap.return_value.bind.called
    assert "_auth_user_id" not in en_client.session
    assert not get_user_model().objects.filter(username="dana").exists()
