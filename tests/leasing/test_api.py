"""/api/v1/leases/: the request contract, errors a script can act on, and who sees what."""

import pytest

from leasing.choices import LeaseStatus
from leasing.lifecycle import provisioning
from leasing.models import Lease
from portal.tokens.models import ApiToken
from portal.tokens.selectors import token_for_key
from tests.leasing.conftest import T0


@pytest.fixture
def api(api):
    """Scripts read English errors; the zh-hans default is tested on the pages."""
    api.credentials(HTTP_ACCEPT_LANGUAGE="en")
    return api


def post(api, user, data, url="/api/v1/leases/"):
    api.force_authenticate(user)
    return api.post(url, data, format="json")


def test_request_free_cards(api, frozen, alice, vision, a100, small_pool):
    response = post(
        api, alice, {"card_model": a100.slug, "count": 2, "duration_minutes": 90, "team": "vision"}
    )
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["status"] == "provisioning"
    assert body["start_at"].startswith("2026-12-01T09:00")
    assert len(body["allocations"]) == 2
    assert {"node", "card_index", "card_uuid"} <= set(body["allocations"][0])
    assert body["estimated_start"] is None


def test_team_defaults_to_the_only_team(api, frozen, alice, vision, a100, small_pool):
    assert (
        post(api, alice, {"card_model": a100.slug, "count": 1, "duration_minutes": 30}).status_code
        == 201
    )


def test_queued_request_has_estimated_start(api, frozen, alice, vision, a100, small_pool):
    post(
        api,
        alice,
        {"card_model": a100.slug, "count": 8, "duration_minutes": 60, "same_node": False},
    )
    body = post(api, alice, {"card_model": a100.slug, "count": 1, "duration_minutes": 60}).json()
    assert body["status"] == "queued"
    assert body["estimated_start"].startswith("2026-12-01T10:00")
    assert body["allocations"] == []


@pytest.mark.parametrize(
    ("data", "status", "words"),
    [
        ({"card_model": "nope", "count": 1, "duration_minutes": 60}, 400, "Unknown card model"),
        (
            {"card_model": "a100-test", "count": 0, "duration_minutes": 60},
            400,
            "greater than or equal to 1",
        ),
        ({"card_model": "a100-test", "count": 99, "duration_minutes": 60}, 400, "only 8"),
        (
            {"card_model": "a100-test", "count": 1, "duration_minutes": 0},
            400,
            "greater than or equal to 1",
        ),
        ({"card_model": "a100-test", "count": 1, "duration_minutes": 10**7}, 400, "longest lease"),
        (
            {
                "card_model": "a100-test",
                "count": 1,
                "duration_minutes": 60,
                "start_at": "2026-11-30T09:00:00+08:00",
            },
            400,
            "in the past",
        ),
        (
            {"card_model": "a100-test", "count": 1, "duration_minutes": 60, "start_at": "tomorrow"},
            400,
            "Datetime has wrong format",
        ),
        (
            {"card_model": "a100-test", "count": 1, "duration_minutes": 60, "team": "nlp"},
            403,
            "not a member",
        ),
        ({"card_model": "a100-test", "count": "two", "duration_minutes": 60}, 400, "valid integer"),
        ({"count": 1, "duration_minutes": 60}, 400, "Give card_model"),
    ],
)
def test_bad_input_gets_a_clear_4xx_and_no_lease(
    api, frozen, alice, vision, nlp, a100, small_pool, data, status, words
):
    response = post(api, alice, data)
    assert response.status_code == status, response.content
    assert words in response.content.decode()
    assert not Lease.objects.exists()


@pytest.mark.parametrize("body", ["null", "[]", '"profile"', "3"])
def test_a_body_that_is_not_an_object_is_a_400(api, alice, vision, a100, body):
    """Found by schemathesis: a JSON null body was a 500 (`"profile" in None`)."""
    api.force_authenticate(alice)
    response = api.post("/api/v1/leases/", body, content_type="application/json")
    assert response.status_code == 400, response.content
    assert not Lease.objects.exists()


def test_release_extend_cancel_and_events(api, frozen, alice, vision, a100, small_pool):
    lease_id = post(
        api, alice, {"card_model": a100.slug, "count": 1, "duration_minutes": 60}
    ).json()["id"]
    provisioning.provision_step(lease_id=lease_id)
    extended = api.post(f"/api/v1/leases/{lease_id}/extend/", {"minutes": 30}, format="json")
    assert extended.status_code == 200 and extended.json()["end_at"].startswith("2026-12-01T10:30")
    assert (
        api.post(f"/api/v1/leases/{lease_id}/extend/", {"minutes": 0}, format="json").status_code
        == 400
    )
    cancel = api.post(f"/api/v1/leases/{lease_id}/cancel/")
    assert cancel.status_code == 400 and "Release it instead" in cancel.content.decode()
    released = api.post(f"/api/v1/leases/{lease_id}/release/")
    assert released.status_code == 200 and released.json()["status"] == "releasing"
    again = api.post(f"/api/v1/leases/{lease_id}/release/")
    assert again.status_code == 400
    kinds = [e["kind"] for e in api.get(f"/api/v1/leases/{lease_id}/events/").json()]
    assert kinds == ["requested", "placed", "active", "extended", "release"]


def test_members_see_only_their_own_leases(api, frozen, alice, bob, vision, nlp, a100, small_pool):
    lease_id = post(
        api, alice, {"card_model": a100.slug, "count": 1, "duration_minutes": 60}
    ).json()["id"]
    api.force_authenticate(bob)
    assert api.get(f"/api/v1/leases/{lease_id}/").status_code == 404
    assert api.post(f"/api/v1/leases/{lease_id}/release/").status_code == 404
    assert api.get("/api/v1/leases/").json()["count"] == 0


def test_lead_sees_team_lease_and_operator_sees_all(
    api, frozen, alice, lena, ops, vision, a100, small_pool
):
    lease_id = post(
        api, alice, {"card_model": a100.slug, "count": 1, "duration_minutes": 60}
    ).json()["id"]
    for user in (lena, ops):
        api.force_authenticate(user)
        assert api.get(f"/api/v1/leases/{lease_id}/").status_code == 200
        assert api.get("/api/v1/leases/?scope=all").json()["count"] == 1


def test_token_endpoint_and_token_auth(api, frozen, alice, vision, a100, small_pool):
    response = api.post(
        "/api/v1/auth/token/", {"username": "alice", "password": "pw-for-tests"}, format="json"
    )
    assert response.status_code == 200
    token = response.json()["token"]
    stored = ApiToken.objects.get(user=alice)
    assert stored.name == "api-login" and token_for_key(token) == stored
    assert token.startswith(stored.prefix) and token not in (stored.digest, stored.prefix)
    api.credentials(HTTP_AUTHORIZATION=f"Token {token}", HTTP_ACCEPT_LANGUAGE="en")
    assert api.get("/api/v1/leases/").status_code == 200
    bad = api.post("/api/v1/auth/token/", {"username": "alice", "password": "wrong"}, format="json")
    assert bad.status_code == 400


def test_anonymous_is_refused(api, db):
    assert api.get("/api/v1/leases/").status_code in (401, 403)


def test_list_runs_bounded_queries(
    api, frozen, alice, vision, a100, small_pool, django_assert_max_num_queries
):
    for _ in range(6):
        post(api, alice, {"card_model": a100.slug, "count": 1, "duration_minutes": 60})
    assert Lease.objects.filter(status=LeaseStatus.PROVISIONING).count() == 6
    with django_assert_max_num_queries(8):
        assert api.get("/api/v1/leases/").json()["count"] == 6
    assert T0


def test_a_request_for_free_cards_is_a_handful_of_queries(
    api, frozen, alice, vision, a100, small_pool, monkeypatch
):
    """Nobody waits: the request is placed in SQL (scheduler/fastpath.py), not by loading the
    whole pool into the planner, and the answer is built from the service's own lease."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from leasing.scheduler import run

    passes = []
    real_pass = run.schedule_card_model

    def spy(card_model_id, **kwargs):
        passes.append(card_model_id)
        return real_pass(card_model_id, **kwargs)

    monkeypatch.setattr(run, "schedule_card_model", spy)
    post(api, alice, {"card_model": a100.slug, "count": 1, "duration_minutes": 60})  # warm
    with CaptureQueriesContext(connection) as queries:
        response = post(api, alice, {"card_model": a100.slug, "count": 2, "duration_minutes": 60})
    assert response.status_code == 201 and response.json()["status"] == "provisioning"
    assert len(response.json()["allocations"]) == 2
    assert passes == [], "the full queue pass ran for a request that met no queue"
    # The spy sees the pass when there is a queue (so it cannot be bypassed unnoticed).
    post(api, alice, {"card_model": a100.slug, "count": 2, "duration_minutes": 60})  # other node
    assert passes == []
    queued = post(api, alice, {"card_model": a100.slug, "count": 4, "duration_minutes": 60})
    assert queued.json()["status"] == "queued" and passes == [a100.pk]
    assert len(queries) <= 16, [q["sql"][:120] for q in queries.captured_queries]


def test_a_retried_request_with_its_idempotency_key_books_once(
    api, frozen, alice, bob, vision, a100, small_pool
):
    body = {"card_model": a100.slug, "count": 2, "duration_minutes": 60}
    api.force_authenticate(alice)
    first = api.post("/api/v1/leases/", body, format="json", HTTP_IDEMPOTENCY_KEY="k-1")
    again = api.post("/api/v1/leases/", body, format="json", HTTP_IDEMPOTENCY_KEY="k-1")
    assert first.status_code == again.status_code == 201
    assert again.json()["id"] == first.json()["id"]
    assert again["Idempotent-Replayed"] == "true" and not first.has_header("Idempotent-Replayed")
    assert Lease.objects.count() == 1
    # The key is the user's own: someone else's request with the same key is a new one.
    assert Lease.objects.get(pk=first.json()["id"]).request_key == "k-1"
    # Without a key, every request is a new one.
    assert api.post("/api/v1/leases/", body, format="json").json()["id"] != first.json()["id"]


def test_an_idempotency_key_reused_for_another_request_is_refused(
    api, frozen, alice, vision, a100, small_pool
):
    api.force_authenticate(alice)
    body = {"card_model": a100.slug, "count": 1, "duration_minutes": 60}
    first = api.post("/api/v1/leases/", body, format="json", HTTP_IDEMPOTENCY_KEY="same")
    other = api.post(
        "/api/v1/leases/", {**body, "count": 3}, format="json", HTTP_IDEMPOTENCY_KEY="same"
    )
    assert other.status_code == 400
    assert f"lease {first.json()['id']}" in other.content.decode()
    for bad in ("x" * 81, "ключ", "two words"):
        response = api.post("/api/v1/leases/", body, format="json", HTTP_IDEMPOTENCY_KEY=bad)
        assert response.status_code == 400 and "Idempotency-Key" in response.json()
    assert Lease.objects.count() == 1


def test_the_same_key_from_two_users_makes_two_leases(
    api, frozen, alice, bob, vision, nlp, a100, small_pool
):
    body = {"card_model": a100.slug, "count": 1, "duration_minutes": 60}
    ids = set()
    for user in (alice, bob):
        api.force_authenticate(user)
        response = api.post("/api/v1/leases/", body, format="json", HTTP_IDEMPOTENCY_KEY="k")
        ids.add(response.json()["id"])
    assert len(ids) == 2


def test_the_lease_list_filters_are_one_filterset_for_page_and_api(
    api, client, frozen, alice, lena, vision, a100, small_pool
):
    """``leasing.lifecycle.filters.LeaseFilterSet``: the same names on /leases/ and the API;
    the API answers a bad value with a 400 naming it, the page shows the default."""
    first = post(
        api,
        alice,
        {"card_model": a100.slug, "count": 8, "duration_minutes": 60, "same_node": False},
    )
    assert first.status_code == 201, first.json()
    queued = post(api, alice, {"card_model": a100.slug, "count": 1, "duration_minutes": 60})
    assert queued.json()["status"] == "queued"
    api.force_authenticate(lena)  # the lead
    assert api.get("/api/v1/leases/").json()["count"] == 0  # mine: none
    listed = api.get("/api/v1/leases/?scope=team&status=queued").json()
    assert [row["id"] for row in listed["results"]] == [queued.json()["id"]]
    bad = api.get("/api/v1/leases/?scope=everyone&status=nonsense")
    assert bad.status_code == 400 and {"scope", "status"} <= set(bad.json())
    client.force_login(lena)
    page = client.get("/leases/?scope=team&status=queued").content.decode()
    assert f"/leases/{queued.json()['id']}/" in page
    assert f"/leases/{first.json()['id']}/" not in page
    assert client.get("/leases/?scope=everyone").status_code == 200  # the default instead
