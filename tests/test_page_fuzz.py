"""Every HTML page, asked with hostile query parameters and form posts: never a 5xx.

tests/test_api_fuzz.py covers the API bodies from its schema; the pages have no schema, so
this walks the URL resolver (every route but the library's account pages and the few that
end the session or reach outside), fills path parameters from seeded objects or hostile
values, and sends GET with a hostile query string and POST with a hostile form. The field
names are those the pages' own forms carry (read from their HTML) plus the ones views read.

Strategies: NUL characters, unicode digits ("²", "٣", "１２"), huge and negative numbers,
far dates (year 1, 9999, 10000), malformed dates and plain random text.

Bounded for CI (CARDPOOL_PAGE_FUZZ_EXAMPLES, default 60 per role, derandomized); the run
recorded in docs/reliability.md used CARDPOOL_PAGE_FUZZ_EXAMPLES=1000 (2,000 cases). Runs on
SQLite and PostgreSQL alike; on PostgreSQL a NUL that reached a query would be a DataError.
"""

from __future__ import annotations

import os
import re
from datetime import timedelta
from decimal import Decimal
from urllib.parse import quote

import pytest
from django.core.cache import cache
from django.urls import URLPattern, URLResolver, get_resolver
from django.utils import timezone
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from leasing.choices import LeaseStatus
from leasing.lifecycle import requests as lease_requests
from leasing.models import Lease, LeaseChange, Quota
from tests.factories import CardModelFactory, make_node
from tests.hostile import NUL, UNICODE_DIGITS, VALUE

EXAMPLES = int(os.environ.get("CARDPOOL_PAGE_FUZZ_EXAMPLES", "60"))

# Not walked: the API (tests/test_api_fuzz.py), the admin, the account library's own pages
# (allauth), the ones that end the session or change its language, and the webhook test
# button (it would post to the outside).
SKIP = re.compile(
    r"^(api/|admin/|static/|i18n/|metrics"
    r"|accounts/(?!profile)"
    r"|notifications/settings/webhooks/<int:pk>/test/)"
)

# Names the views read from GET/POST besides those their forms render.
KNOWN_NAMES = [
    "count", "duration", "unit", "start", "start_at", "end", "team", "card_model", "model",
    "priority", "purpose", "same_node", "description", "minutes", "note", "reason", "days",
    "page", "sort", "format", "group_by", "period", "detail", "region", "status", "vendor",
    "min_memory", "min_memory_gb", "precision", "interconnect", "next", "cards", "hours",
    "task", "params_b", "batch", "context", "tokens", "url", "name", "fmt", "kind", "month",
    "max_concurrent_cards", "card_hours_per_month", "max_lease_hours", "money_per_month",
]  # fmt: skip


def _routes(patterns, prefix: str = ""):
    for p in patterns:
        if isinstance(p, URLResolver):
            yield from _routes(p.url_patterns, prefix + str(p.pattern))
        elif isinstance(p, URLPattern):
            yield prefix + str(p.pattern)


ROUTES = sorted({r for r in _routes(get_resolver().url_patterns) if not SKIP.match(r)})
PARAM = re.compile(r"<(?:(\w+):)?(\w+)>")


def test_the_walk_covers_the_pages():
    assert len(ROUTES) >= 30
    assert "leases/new/" in ROUTES and "reports/" in ROUTES


@pytest.fixture
def seeded(alice, lena, bob, ops, vision):
    """A card model with nodes, leases of alice's (running, waiting for approval, with a
    change asked), a quota: so that path parameters find real objects now and then."""
    cache.clear()
    model = CardModelFactory(slug="a100-pages", name="A100 pages")
    nodes = [make_node(model, cards=4, hostname=f"pages{i}") for i in range(2)]
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
    return {
        "int": [lease.pk, waiting.pk, change.pk],
        "slug": [vision.slug, model.slug],
        "str": [nodes[0].hostname, "approve", "reject"],
    }


@pytest.fixture
def field_names(client, seeded, lena) -> list[str]:
    """The names the pages' own forms carry, read from each page's HTML, plus KNOWN_NAMES."""
    client.force_login(lena)
    names = set(KNOWN_NAMES)
    for route in ROUTES:
        if "<" in route:
            continue
        page = client.get("/" + route)
        if page.status_code == 200 and "html" in page.get("Content-Type", ""):
            names.update(re.findall(r'name="([\w\-]+)"', page.content.decode()))
    names.discard("csrfmiddlewaretoken")
    return sorted(names)


def _path_value(kind: str, seeded: dict):
    real = st.sampled_from(seeded.get(kind) or seeded["str"]).map(str)
    hostile = {
        "int": st.one_of(st.integers(min_value=0, max_value=10**30).map(str), UNICODE_DIGITS),
        "slug": st.from_regex(r"\A[-a-zA-Z0-9_]{1,20}\Z"),
    }.get(kind, st.one_of(NUL, UNICODE_DIGITS, st.text(min_size=1, max_size=20)))
    return st.one_of(real, hostile)


@st.composite
def page_requests(draw, seeded: dict, names: list[str]):
    route = draw(st.sampled_from(ROUTES))
    path = route
    for match in PARAM.finditer(route):
        kind, _name = match.group(1) or "str", match.group(2)
        value = draw(_path_value(kind, seeded))
        path = path.replace(match.group(0), value, 1)
    params = draw(st.dictionaries(st.sampled_from(names), VALUE, max_size=6))
    method = draw(st.sampled_from(["GET", "POST"]))
    return method, "/" + path, params


def _fuzz(client, user, seeded, names):
    client.force_login(user)
    client.raise_request_exception = True  # a 500 fails with its traceback

    @given(page_requests(seeded, names))
    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        suppress_health_check=list(HealthCheck),
        derandomize=EXAMPLES <= 60,  # the CI run is the same every time
        database=None,
    )
    def run(request):
        method, path, params = request
        path = quote(path, safe="/")  # a "?" or "#" drawn into the path stays in the path
        send = client.get if method == "GET" else client.post
        response = send(path, params)
        assert response.status_code < 500, (method, path, params, response.status_code)
        statuses[response.status_code] = statuses.get(response.status_code, 0) + 1

    statuses: dict[int, int] = {}
    run()
    # Shown with -s: how many cases ran and what they answered (docs/reliability.md).
    print(f"\n{user.username}: {sum(statuses.values())} cases, no 5xx; {sorted(statuses.items())}")


@pytest.mark.parametrize("who", ["lena", "ops"])
def test_no_page_answers_5xx(client, seeded, field_names, who, request):
    _fuzz(client, request.getfixturevalue(who), seeded, field_names)


# --- Deeply nested JSON posted to the pages (issue #28) -----------------------------------------
# The NUL check reads every JSON body before any view; a deep one with a "\u0000" inside was
# parsed by recursion there. Each page, posted nesting depths up to 100,000: never a 5xx.


@pytest.mark.parametrize("who", [None, "lena"])
def test_no_page_answers_5xx_to_deep_json(client, seeded, who, request):
    if who:
        client.force_login(request.getfixturevalue(who))
    client.raise_request_exception = True

    @given(st.sampled_from(ROUTES), st.sampled_from([65, 1_000, 10_000, 100_000]), st.booleans())
    @settings(
        max_examples=40, deadline=None, suppress_health_check=list(HealthCheck), database=None
    )
    def run(route, depth, with_nul):
        path = "/" + PARAM.sub(lambda m: str(seeded["int"][0]), route)
        middle = '"\\u0000"' if with_nul else "1"
        body = "[" * depth + middle + "]" * depth
        response = client.post(quote(path, safe="/"), body, content_type="application/json")
        assert response.status_code < 500, (path, depth, response.status_code)

    run()
