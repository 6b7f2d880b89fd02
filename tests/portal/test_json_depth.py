"""A deeply nested JSON body is a 400 with a message, never a RecursionError (a 500): the
nesting is measured before parsing, in one place (portal.input), for the API, the NUL check
and webhook replies."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from leasing.lifecycle import requests as lease_requests
from leasing.notify import webhooks
from portal.input import MAX_JSON_DEPTH, JsonTooDeep, json_loads
from tests.factories import CardModelFactory, make_node

DEPTHS = [MAX_JSON_DEPTH + 1, 1_000, 5_000, 100_000]


def nested(depth: int, *, kind: str = "[") -> bytes:
    if kind == "[":
        return b"[" * depth + b"]" * depth
    return b'{"a":' * depth + b"1" + b"}" * depth


@pytest.mark.parametrize("depth", DEPTHS)
@pytest.mark.parametrize("kind", ["[", "{"])
def test_anonymous_token_endpoint(client, depth, kind):
    response = client.post(
        "/api/v1/auth/token/", nested(depth, kind=kind), content_type="application/json"
    )
    assert response.status_code == 400
    assert str(MAX_JSON_DEPTH) in response.json()["detail"]


@pytest.fixture
def lease(alice):
    model = CardModelFactory(slug="deep", name="Deep")
    make_node(model, cards=2, hostname="deep0")
    return lease_requests.lease_request(
        user=alice, team=alice.memberships.first().team, card_model=model, count=1,
        duration=timedelta(hours=1),
    )  # fmt: skip


@pytest.mark.parametrize("depth", DEPTHS)
def test_signed_in_routes(client, alice, lease, depth):
    client.force_login(alice)
    for path in (
        "/api/v1/leases/",
        "/api/v1/estimate/",
        f"/api/v1/leases/{lease.pk}/extend/",
        "/api/v1/ssh-keys/",
    ):
        response = client.post(path, nested(depth), content_type="application/json")
        assert response.status_code == 400, path
        assert str(MAX_JSON_DEPTH) in response.json()["detail"], path


def test_a_deep_body_with_a_nul_escape_is_a_400(client):
    """The NUL check parses JSON bodies too (before any view): no RecursionError there."""
    body = b"[" * 5_000 + b'"\\u0000"' + b"]" * 5_000
    response = client.post("/api/v1/auth/token/", body, content_type="application/json")
    assert response.status_code == 400


def test_a_webhook_reply_nested_deep_is_a_failure_not_a_crash():
    response = webhooks.HttpResponse(status=200, body=nested(100_000).decode())
    verdict = webhooks.judge(webhooks.WECOM, response)
    assert not verdict.ok and "not JSON" in verdict.error


def test_strings_do_not_count():
    text = json.dumps({"a": "[" * 10_000, "b": '\\"{{{{' * 1000, "c": [[["x"]]]})
    assert json_loads(text)["c"] == [[["x"]]]


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(alphabet='[]{}"\\ab', max_size=6),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.text(alphabet='[]{}"\\', max_size=4), inner, max_size=3)
    ),
    max_leaves=30,
)


def _depth(value) -> int:
    if isinstance(value, list):
        return 1 + max((_depth(v) for v in value), default=0)
    if isinstance(value, dict):
        return 1 + max((_depth(v) for v in value.values()), default=0)
    return 0


@given(JSON, st.integers(min_value=0, max_value=MAX_JSON_DEPTH + 2))
@settings(max_examples=200, deadline=None)
def test_the_measure_is_the_real_nesting(value, wrap):
    """Whatever the strings hold (brackets, quotes, escapes), the check counts the document's
    own nesting: accepted exactly when it is at most MAX_JSON_DEPTH."""
    text = "[" * wrap + json.dumps(value) + "]" * wrap
    depth = _depth(value) + wrap
    if depth <= MAX_JSON_DEPTH:
        assert json_loads(text) is not None or value is None
    else:
        with pytest.raises(JsonTooDeep):
            json_loads(text)
