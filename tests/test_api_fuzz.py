"""schemathesis over the whole /api/v1/ schema, as a member and as a lead: no 5xx.

Every operation gets EXAMPLES generated cases per role (about 30 operations, so over 1,000
cases in all) against the WSGI app with seeded objects, so the ids in paths sometimes hit.
"""

from __future__ import annotations

import json
import os
from datetime import timedelta
from decimal import Decimal

import pytest
import schemathesis
from drf_spectacular.generators import SchemaGenerator
from drf_spectacular.renderers import OpenApiJsonRenderer as JSONRenderer
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error

from leasing.lifecycle import requests as lease_requests
from leasing.models import Quota
from portal.tokens.services import token_create
from portal.wsgi import application
from tests.factories import CardModelFactory, make_node

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


@schema.parametrize()
@FUZZ_SETTINGS
def test_api_as_member(case, member_auth):
    case.call_and_validate(headers=member_auth, checks=[not_a_server_error])


@schema.parametrize()
@FUZZ_SETTINGS
def test_api_as_lead(case, lead_auth):
    case.call_and_validate(headers=lead_auth, checks=[not_a_server_error])
