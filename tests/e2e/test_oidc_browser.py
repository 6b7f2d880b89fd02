"""Single sign-on through a real OpenID Connect provider (tests/identity/idp/: a separate
Django process with django-oidc-provider): the portal's "Sign in with …" walks the whole code
flow with PKCE in Chromium — the provider's sign-in, its consent page, the callback, the token
and userinfo calls — and a denied consent and an expired code leave the person signed out."""

from __future__ import annotations

import re
from contextlib import contextmanager
from urllib.parse import parse_qs, urlparse

import pytest

from portal.directory_map import parse_team_map
from portal.models import DirectoryAccount, Membership
from tests.e2e.test_browser import CHROMIUM_ARGS, STATUS_TIMEOUT_MS, db_read
from tests.identity import oidc

pytestmark = [pytest.mark.postgres, pytest.mark.browser]
CALLBACK = "/accounts/oidc/corp/login/callback/"


@pytest.fixture(scope="session")
def provider(live_server, tmp_path_factory):
    reason = oidc.missing()
    if reason:
        pytest.skip(reason)
    started = oidc.start(tmp_path_factory.mktemp("idp"), redirect_uri=live_server.url + CALLBACK)
    yield started
    started.stop()


@pytest.fixture
def sso(settings, provider, transactional_db):
    settings.SOCIALACCOUNT_PROVIDERS = {
        "openid_connect": {
            "OAUTH_PKCE_ENABLED": True,
            "APPS": [
                {
                    "provider_id": "corp",
                    "name": "Corp SSO",
                    "client_id": oidc.CLIENT_ID,
                    "secret": oidc.CLIENT_SECRET,
                    "settings": {
                        "server_url": provider.issuer,
                        "scope": ["openid", "profile", "email", "groups"],
                    },
                }
            ],
        }
    }
    settings.CARDPOOL_DIRECTORY = {
        **settings.CARDPOOL_DIRECTORY,
        "TEAMS": parse_team_map("gpu-vision=vision,gpu-nlp=nlp:lead"),
    }
    return provider


@contextmanager
def english_page(live_server):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS, headless=True
        )
        context = browser.new_context(base_url=live_server.url, locale="en-US")
        context.set_default_timeout(STATUS_TIMEOUT_MS)
        try:
            yield context.new_page()
        finally:
            context.close()
            browser.close()


def signed_in(page) -> bool:
    """Whether the browser holds a signed-in portal session (the profile page, not the
    sign-in page)."""
    page.goto("/accounts/profile/")
    return "/accounts/login/" not in page.url


def to_consent(page, provider) -> dict:
    """From the portal's login page through the provider's sign-in to its consent page;
    the authorization request's query."""
    asked: list[str] = []
    page.on(
        "request",
        lambda r: asked.append(r.url) if r.url.startswith(provider.issuer + "/authorize") else None,
    )
    page.goto("/accounts/login/")
    page.get_by_role("link", name="Sign in with Corp SSO").click()
    page.get_by_role("button", name=re.compile("Continue", re.I)).click()
    page.wait_for_url(re.compile(r"/login/\?next="))
    page.locator("input[name=username]").fill("carol")
    page.locator("input[name=password]").fill("carol-pw")
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(re.compile(r"/openid/authorize"))
    assert page.get_by_text("Request for Permission").is_visible()
    return parse_qs(urlparse(asked[0]).query)


def test_sign_in_with_the_provider_through_the_whole_code_flow(live_server, sso, vision, nlp):
    with english_page(live_server) as page:
        query = to_consent(page, sso)
        assert query["response_type"] == ["code"]
        assert query["code_challenge_method"] == ["S256"] and query["code_challenge"][0]
        assert set(query["scope"][0].split()) == {"openid", "profile", "email", "groups"}
        page.get_by_role("button", name="Authorize").click()
        page.wait_for_url(re.compile(r"^(?!.*(/openid/|/accounts/)).*$"))
        assert page.url.startswith(live_server.url)
        assert signed_in(page)

    def read():
        account = DirectoryAccount.objects.get(user__username="carol")
        roles = {
            (m.team.slug, m.role, m.source)
            for m in Membership.objects.filter(user__username="carol").select_related("team")
        }
        return account.source, account.uid, account.groups, account.user.email, roles

    source, uid, groups, email, roles = db_read(read)
    assert (source, uid, email) == ("oidc", "carol", "carol@idp.example")
    assert groups == ["gpu-nlp", "gpu-vision"]
    assert roles == {("vision", "member", "directory"), ("nlp", "lead", "directory")}


def test_a_denied_consent_signs_nobody_in(live_server, sso):
    with english_page(live_server) as page:
        to_consent(page, sso)
        page.get_by_role("button", name="Decline").click()
        page.wait_for_url(re.compile(r"^" + re.escape(live_server.url)))
        assert page.get_by_text(re.compile("cancel", re.I)).first.is_visible()
        assert not signed_in(page)

    from django.contrib.auth import get_user_model

    assert not db_read(lambda: get_user_model().objects.filter(username="carol").exists())


def test_an_expired_code_signs_nobody_in(live_server, sso):
    with english_page(live_server) as page:
        to_consent(page, sso)

        expired: list[int] = []

        def expire_on_the_way(route):
            """The consent's answer (a redirect to the portal with the code) is held while
            the code expires at the provider, then given to the browser."""
            answer = route.fetch(max_redirects=0)
            expired.append(sso.expire_codes())
            route.fulfill(response=answer)

        page.route(re.compile(re.escape(sso.issuer + "/authorize")), expire_on_the_way)
        page.get_by_role("button", name="Authorize").click()
        page.wait_for_url(re.compile(re.escape(CALLBACK)))
        page.wait_for_load_state()
        assert expired == [1]
        assert page.get_by_text(re.compile("error|failure", re.I)).first.is_visible()
        assert not signed_in(page)

    from django.contrib.auth import get_user_model

    assert not db_read(lambda: get_user_model().objects.filter(username="carol").exists())
