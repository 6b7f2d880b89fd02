"""Every API write route refuses fields it does not know, by name (issue #15).

The walk takes its routes from the router (drf-spectacular's endpoint list), so a route added
later is walked too; its path parameters are filled from seeded objects.
"""

from __future__ import annotations

import json
from datetime import timedelta
from decimal import Decimal

import pytest
from django.core.cache import cache
from django.utils import timezone
from drf_spectacular.generators import EndpointEnumerator, SchemaGenerator

from inventory import telemetry
from leasing.choices import LeaseStatus
from leasing.lifecycle import requests as lease_requests
from leasing.models import Alert, Lease, LeaseChange, Notification, Quota
from portal.input import StrictInputMixin
from tests.factories import CardModelFactory, make_node

UNKNOWN = "zz_not_a_field"
WRITE_METHODS = ("POST", "PUT", "PATCH")


def write_routes() -> list[tuple[str, str]]:
    return [
        (path, method)
        for path, _regex, method, _view in EndpointEnumerator().get_api_endpoints()
        if method in WRITE_METHODS
    ]


def _view(path: str, method: str):
    for p, _regex, m, view in EndpointEnumerator().get_api_endpoints():
        if (p, m) == (path, method):
            return view
    raise LookupError(path)


def test_there_are_write_routes_to_walk():
    assert len(write_routes()) >= 15


@pytest.mark.parametrize(("path", "method"), write_routes())
def test_every_write_route_documents_a_strict_input(path, method):
    """What the schema says the route takes is a StrictSerializer (refuses unknown fields)."""
    generator = SchemaGenerator()  # held: the view's schema refers to it weakly
    schema_view = generator.create_view(_view(path, method), method)
    schema = schema_view.schema
    schema.path, schema.path_regex, schema.method = path, path, method
    serializer = schema.get_request_serializer()
    serializer = getattr(serializer, "child", serializer)  # a list of rules: each is checked
    cls = serializer if isinstance(serializer, type) else type(serializer)
    assert issubclass(cls, StrictInputMixin), f"{method} {path} takes {cls.__name__}"


@pytest.fixture
def seeded(alice, lena, ops, vision):
    cache.clear()  # the token endpoint's throttle
    model = CardModelFactory(slug="a100-strict", name="A100 strict")
    node = make_node(model, cards=4, hostname="strict0")
    Quota.objects.create(team=vision, card_model=model, card_hours_per_month=Decimal("1000"))
    lease = lease_requests.lease_request(
        user=alice, team=vision, card_model=model, count=1, duration=timedelta(hours=2)
    )
    waiting = lease_requests.lease_request(
        user=alice, team=vision, card_model=model, count=1, duration=timedelta(hours=2)
    )
    Lease.objects.filter(pk=waiting.pk).update(status=LeaseStatus.PENDING_APPROVAL)
    change = LeaseChange.objects.create(
        lease=lease,
        kind=LeaseChange.Kind.EXTEND,
        minutes=60,
        requested_by=alice,
        requested_at=timezone.now(),
    )
    note = Notification.objects.create(
        user=ops, kind="lease_active", title="t", created_at=timezone.now()
    )
    alert = Alert.objects.create(
        kind="card_hot",
        severity="warning",
        subject="card:1",
        opened_at=timezone.now(),
        last_seen_at=timezone.now(),
    )
    return {
        "pk": {
            "approvals": waiting.pk,
            "lease-changes": change.pk,
            "leases": lease.pk,
            "notifications": note.pk,
            "alerts": alert.pk,
        },
        "hostname": node.hostname,
        "uuid": str(node.cards.first().uuid),
        "slug": vision.slug,
        "node_token": telemetry.node_token_issue(node=node),
    }


def _fill(path: str, seeded: dict) -> str:
    resource = path.split("/")[3]
    return (
        path.replace("{pk}", str(seeded["pk"].get(resource, 1)))
        .replace("{hostname}", seeded["hostname"])
        .replace("{uuid}", seeded["uuid"])
        .replace("{slug}", seeded["slug"])
        .replace("{lease_id}", str(seeded["pk"]["leases"]))
        .replace("{kind}", "card_hot")
    )


@pytest.mark.parametrize(("path", "method"), write_routes())
def test_every_write_route_names_an_unknown_field(api, seeded, ops, path, method):
    url = _fill(path, seeded)
    body: object = {UNKNOWN: 1}
    extra = {}
    if url.endswith("/quotas/") or url.endswith("/shares/"):
        body = [{UNKNOWN: 1}]
    if url.endswith("/telemetry/") or "/checkpoints/" in url or "/agent/" in url:
        extra["HTTP_AUTHORIZATION"] = f"Node {seeded['node_token']}"
    else:
        api.force_authenticate(ops)
    call = getattr(api, method.lower())
    r = call(url, data=json.dumps(body), content_type="application/json", **extra)
    assert r.status_code == 400, (url, r.status_code, r.content[:300])
    assert UNKNOWN in r.content.decode(), r.content[:300]
