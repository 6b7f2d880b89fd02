"""schemathesis over the whole /api/v1/ schema, as a member and as a lead: no 5xx.

Every operation gets EXAMPLES generated cases per role (about 30 operations, so over 1,000
cases in all) against the WSGI app with seeded objects, so the ids in paths sometimes hit.
"""

from __future__ import annotations

import json
import os
import re
from datetime import timedelta
from decimal import Decimal
from urllib.parse import quote, urlencode

import pytest
import schemathesis
from drf_spectacular.generators import SchemaGenerator
from drf_spectacular.renderers import OpenApiJsonRenderer as JSONRenderer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis.checks import not_a_server_error

from inventory.models import Card, Node
from leasing.lifecycle import requests as lease_requests
from leasing.models import Lease, Quota
from portal.tokens.services import token_create
from portal.wsgi import application
from tests.factories import CardModelFactory, make_node
from tests.hostile import VALUE

# Bounded for CI; CARDPOOL_FUZZ_EXAMPLES=200 runs a deeper (slower) search locally.
EXAMPLES = int(os.environ.get("CARDPOOL_FUZZ_EXAMPLES", "20"))


@pytest.fixture(autouse=True)
def keep_the_test_connection():
    """Calls go through the WSGI app, whose request signals would close the database
    connection that holds the test's transaction (Django's test client disconnects them too)."""
    from django.core.signals import request_finished, request_started
    from django.db import close_old_connections

    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    yield
    request_started.connect(close_old_connections)
    request_finished.connect(close_old_connections)


@pytest.fixture
def seeded(alice, lena, vision):
    """A card model with nodes, a lease of alice's, a team quota."""
    model = CardModelFactory(slug="a100-fuzz", name="A100 fuzz")
    for i in range(2):
        make_node(model, cards=4, hostname=f"fuzz{i}")
    Quota.objects.create(team=vision, card_model=model, card_hours_per_month=Decimal("1000"))
    lease_requests.lease_request(
        user=alice, team=vision, card_model=model, count=1, duration=timedelta(hours=2)
    )


def _auth(user) -> dict[str, str]:
    _token, key = token_create(user=user, name="fuzz")
    return {"Authorization": f"Token {key}"}


@pytest.fixture
def member_auth(seeded, alice):
    return _auth(alice)


@pytest.fixture
def lead_auth(seeded, lena):
    return _auth(lena)


def _load_schema():
    """The document /api/v1/schema/ serves, built without a request.

    schemathesis' lazy `from_fixture` loader does not run under pytest 9, and the endpoint
    needs a token (a database) that does not exist at collection time;
    test_schema_is_the_served_one checks that the two are the same.
    """
    document = SchemaGenerator().get_schema(request=None, public=True)
    schema = schemathesis.openapi.from_dict(json.loads(JSONRenderer().render(document)))
    schema.app = application  # calls go through the WSGI app in-process
    return schema


schema = _load_schema()
# The coverage phase alone sends ~4,000 boundary cases (about two minutes); CI runs the
# examples and fuzzing phases, CARDPOOL_FUZZ_COVERAGE=1 adds it.
schema.config.phases.coverage.enabled = os.environ.get("CARDPOOL_FUZZ_COVERAGE") == "1"

FUZZ_SETTINGS = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    derandomize=EXAMPLES <= 20,  # the CI run is the same every time
)


def test_schema_is_the_served_one(api, alice):
    api.force_authenticate(alice)
    served = api.get("/api/v1/schema/", HTTP_ACCEPT="application/json")
    assert served.status_code == 200
    assert json.loads(served.content)["paths"] == schema.raw_schema["paths"]


# One test per operation, named by it ("GET /api/v1/leases/"): schemathesis' own
# ``schema.parametrize()`` gives every operation's test the same id under pytest 9, and tests
# that share an id cannot be told apart (pytest-xdist ran one of them).
OPERATIONS = [result.ok() for result in schema.get_all_operations()]
per_operation = pytest.mark.parametrize("operation", OPERATIONS, ids=lambda op: op.label)


@per_operation
@FUZZ_SETTINGS
@given(data=st.data())
def test_api_as_member(operation, data, member_auth):
    case = data.draw(operation.as_strategy())
    case.call_and_validate(headers=member_auth, checks=[not_a_server_error])


@per_operation
@FUZZ_SETTINGS
@given(data=st.data())
def test_api_as_lead(operation, data, lead_auth):
    case = data.draw(operation.as_strategy())
    case.call_and_validate(headers=lead_auth, checks=[not_a_server_error])


# --- Hostile values in every query parameter and body field (issue #15) ----------------------
# schemathesis draws values that fit the schema; the attack used values that do not: NUL,
# unicode digits, huge numbers, far dates. Every operation, its query parameters and its body
# fields (by the schema's names), with values from tests/hostile.py.

HOSTILE_EXAMPLES = int(os.environ.get("CARDPOOL_API_HOSTILE_EXAMPLES", "60"))


def _operations() -> list[tuple[str, str, list[str], list[str], bool]]:
    """(method, path, query names, body names, body is a list) of every operation."""
    raw = schema.raw_schema
    components = raw.get("components", {}).get("schemas", {})
    found = []
    for path, item in raw["paths"].items():
        for method, op in item.items():
            if method not in ("get", "post", "put", "patch", "delete"):
                continue
            query = [p["name"] for p in op.get("parameters", []) if p.get("in") == "query"]
            body_schema = (
                op.get("requestBody", {}).get("content", {}).get("application/json", {})
            ).get("schema", {})
            is_list = body_schema.get("type") == "array"
            ref = (body_schema.get("items") if is_list else body_schema) or {}
            target = components.get(ref.get("$ref", "").rsplit("/", 1)[-1], {})
            found.append((method, path, query, sorted(target.get("properties", {})), is_list))
    return found


OPERATIONS = _operations()
JSON_VALUE = st.one_of(
    VALUE, st.integers(min_value=-(10**30), max_value=10**30), st.booleans(), st.none()
)


@st.composite
def hostile_calls(draw, ids: dict):
    method, path, query, body_names, is_list = draw(st.sampled_from(OPERATIONS))
    for name in re.findall(r"\{(\w+)\}", path):
        value = draw(st.one_of(st.sampled_from(ids.get(name, ["1"])), VALUE.filter(bool)))
        path = path.replace("{" + name + "}", quote(str(value), safe=""), 1)
    params = draw(st.dictionaries(st.sampled_from(query), VALUE, max_size=4)) if query else {}
    body = draw(st.fixed_dictionaries({}, optional={n: JSON_VALUE for n in body_names}))
    return method, path, params, [body] if is_list else body


@pytest.mark.parametrize("who", ["alice", "lena", "ops"])
def test_api_hostile_values(seeded, api, who, request, vision):
    user = request.getfixturevalue(who)
    api.force_authenticate(user)
    ids = {
        "pk": [str(pk) for pk in Lease.objects.values_list("pk", flat=True)],
        "hostname": list(Node.objects.values_list("hostname", flat=True)),
        "uuid": [str(u) for u in Card.objects.values_list("uuid", flat=True)[:2]],
        "slug": [vision.slug, "a100-fuzz"],
    }

    @given(hostile_calls(ids))
    @settings(
        max_examples=HOSTILE_EXAMPLES,
        deadline=None,
        suppress_health_check=list(HealthCheck),
        derandomize=HOSTILE_EXAMPLES <= 60,
        database=None,
    )
    def run(call):
        method, path, params, body = call
        if method == "get":
            response = api.get(path, params)
        else:
            url = path + ("?" + urlencode(params) if params else "")
            response = getattr(api, method)(url, body, format="json")
        assert response.status_code < 500, (method, path, params, body, response.status_code)
        statuses[response.status_code] = statuses.get(response.status_code, 0) + 1

    statuses: dict[int, int] = {}
    run()
    print(f"\n{who}: {sum(statuses.values())} cases, no 5xx; {sorted(statuses.items())}")


# --- Deeply nested bodies (issue #28): every write operation, anonymous and signed in --------
# Python's JSON parser recursed once per level (a RecursionError at about 1,000): the nesting
# is measured before parsing, so every depth is a 400 that says so, up to 100,000.

NESTINGS = st.sampled_from([65, 999, 1_000, 10_000, 100_000]).flatmap(
    lambda depth: st.sampled_from(["[", '{"count":']).map(lambda opener: (depth, opener))
)
WRITES = [op for op in OPERATIONS if op[0] in ("post", "put", "patch")]


def _deep_body(depth: int, opener: str) -> bytes:
    closer = "]" if opener == "[" else "}"
    middle = "1" if opener != "[" else ""
    return (opener * depth + middle + closer * depth).encode()


@pytest.mark.parametrize("who", [None, "alice", "ops"])
def test_api_deep_nesting(seeded, api, who, request):
    if who:
        api.force_authenticate(request.getfixturevalue(who))
    pk = str(Lease.objects.values_list("pk", flat=True).first())

    @given(st.sampled_from(WRITES), NESTINGS)
    @settings(
        max_examples=60, deadline=None, suppress_health_check=list(HealthCheck), database=None
    )
    def run(operation, nesting):
        method, path = operation[0], re.sub(r"\{\w+\}", pk, operation[1])
        response = getattr(api, method)(path, _deep_body(*nesting), content_type="application/json")
        assert response.status_code < 500, (method, path, nesting, response.status_code)
        if response.status_code == 400:
            assert "64" in response.json()["detail"], (method, path)

    run()
