"""Someone signed in but in no team (and with no site role) sees nothing of the pool, on any
page or API view; their own account still works, and joining a team opens the rest."""

from __future__ import annotations

import pytest

from portal.tokens.services import token_create
from tests.factories import CardModelFactory, MembershipFactory, UserFactory, make_node

POOL_PAGES = [
    "/",
    "/pool/",
    "/inventory/",
    "/inventory/models/{model}/",
    "/inventory/nodes/",
    "/inventory/nodes/{node}/",
    "/leases/",
    "/leases/new/",
    "/leases/calendar/",
    "/leases/calendar/{model}/",
    "/teams/",
    "/notifications/",
]
POOL_API = [
    "/api/v1/card-models/",
    "/api/v1/nodes/",
    "/api/v1/nodes/{node}/",
    "/api/v1/cards/",
    "/api/v1/leases/",
    "/api/v1/teams/",
]


@pytest.fixture
def pool(db):
    model = CardModelFactory(slug="secret-model")
    node = make_node(model, cards=2, hostname="hidden-host-17")
    return {"model": model.slug, "node": node.hostname}


@pytest.fixture
def stranger(db):
    return UserFactory(username="stranger")


@pytest.fixture
def as_stranger(client, stranger):
    client.force_login(stranger)
    client.defaults["HTTP_ACCEPT_LANGUAGE"] = "en"
    return client


@pytest.mark.parametrize("path", POOL_PAGES)
def test_pages_show_nothing_of_the_pool(as_stranger, pool, path):
    url = path.format(**pool)
    response = as_stranger.get(url)
    assert response.status_code == 403
    body = response.content.decode().replace(url, "")  # the language switch echoes the URL
    assert "hidden-host-17" not in body and "secret-model" not in body
    assert 'data-testid="no-team"' in body


@pytest.mark.parametrize("path", POOL_API)
def test_the_api_shows_nothing_of_the_pool(api, stranger, pool, path):
    _token, key = token_create(user=stranger, name="script")
    api.credentials(HTTP_AUTHORIZATION=f"Token {key}", HTTP_ACCEPT_LANGUAGE="en")
    response = api.get(path.format(**pool))
    assert response.status_code == 403
    assert "not in a team yet" in response.json()["detail"]


def test_the_session_api_too(as_stranger, pool):
    assert as_stranger.get("/api/v1/nodes/").status_code == 403


def test_their_own_account_still_works(as_stranger):
    assert as_stranger.get("/accounts/profile/").status_code == 200
    assert as_stranger.get("/accounts/password/change/").status_code == 200


def test_joining_a_team_opens_the_pool(client, stranger, pool, vision):
    MembershipFactory(user=stranger, team=vision)
    client.force_login(stranger)
    response = client.get("/inventory/nodes/")
    assert response.status_code == 200
    assert "hidden-host-17" in response.content.decode()


@pytest.mark.parametrize("role", ["fin", "ops"])
def test_site_roles_without_a_team_see_the_pool(client, request, pool, role):
    client.force_login(request.getfixturevalue(role))
    assert client.get("/pool/").status_code == 200
    assert client.get("/api/v1/nodes/").status_code == 200
