"""A lost database answers a clear 503 with Retry-After, and never leaves half a lease."""

import pytest
from django.contrib.sessions.backends.db import SessionStore
from django.db import InterfaceError, OperationalError, transaction
from django.http import HttpResponse
from django.urls import path

from leasing.models import Lease

pytestmark = pytest.mark.django_db


def _lost(request):
    raise OperationalError("server closed the connection unexpectedly")


def _gone(request):
    raise InterfaceError("connection already closed")


def _fine(request):
    return HttpResponse("ok")


def _broken(request):
    raise ValueError("a real bug")


urlpatterns = [
    path("api/v1/lost/", _lost),
    path("lost/", _lost),
    path("gone/", _gone),
    path("fine/", _fine),
    path("broken/", _broken),
]


@pytest.mark.urls(__name__)
def test_api_answers_json_503_with_retry_after(client):
    response = client.get("/api/v1/lost/", HTTP_ACCEPT_LANGUAGE="en")
    assert response.status_code == 503
    assert response["Retry-After"] == "5"
    assert response.json() == {
        "detail": "The database is unavailable for a moment. Please try again shortly.",
        "code": "database_unavailable",
    }


@pytest.mark.urls(__name__)
@pytest.mark.parametrize("url", ["/lost/", "/gone/"])
def test_pages_answer_a_small_503_page(client, url):
    response = client.get(url, HTTP_ACCEPT_LANGUAGE="en")
    assert response.status_code == 503
    assert response["Retry-After"] == "5"
    assert "Temporarily unavailable" in response.content.decode()


@pytest.mark.urls(__name__)
def test_other_errors_and_answers_are_left_alone(client):
    assert client.get("/fine/").status_code == 200
    client.raise_request_exception = False
    assert client.get("/broken/").status_code == 500


def test_a_lost_database_in_the_session_lookup_is_a_503_too(client, alice, monkeypatch):
    client.force_login(alice)

    def lost(self):
        raise OperationalError("could not connect to server")

    monkeypatch.setattr(SessionStore, "load", lost)
    client.raise_request_exception = False
    response = client.get("/", HTTP_ACCEPT_LANGUAGE="en")
    assert response.status_code == 503
    assert response["Retry-After"] == "5"


def test_a_request_cut_off_midway_leaves_no_lease(api, alice, vision, monkeypatch):
    from tests.factories import CardModelFactory, make_node

    model = CardModelFactory(slug="cut-a100")
    make_node(model, cards=2, domains=1, hostname="cut-node")

    def lost(*args, **kwargs):
        raise OperationalError("terminating connection due to administrator command")

    # After the Lease row, its events and its cards are written, before the commit.
    monkeypatch.setattr(transaction, "on_commit", lost)
    api.force_authenticate(alice)
    response = api.post(
        "/api/v1/leases/",
        {"card_model": model.slug, "count": 1, "duration_minutes": 60},
        format="json",
        HTTP_ACCEPT_LANGUAGE="en",
    )
    assert response.status_code == 503
    assert not Lease.objects.exists()
