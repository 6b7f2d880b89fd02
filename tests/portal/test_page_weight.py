"""No page loads more than 1.5 MB of scripts and styles (issue #20): the portal's own pages,
for each persona, counting what the page links plus, as if it drew a chart, plotly.js's
partial bundle, its style sheet and the zh-CN locale (charts.js loads them only then); and the
API docs page (Redoc: its bundle and the page's style sheet; it loads nothing else).
Bytes, not timing: the load times are measured by bench/page_weight.py (docs/performance.md).
"""

import re
from pathlib import Path

import pytest
from django.contrib.staticfiles import finders
from django.test import override_settings

from tests.factories import CardModelFactory, make_node

LIMIT = 1_500_000
PLOTLY = ("vendor/plotly-basic.min.js", "vendor/plotly.css", "vendor/plotly-locale-zh-cn.js")
ASSET = re.compile(
    r'<script[^>]+src="/static/([^"?]+)"|<link[^>]+rel="stylesheet"[^>]+href="/static/([^"?]+)"'
)
PAGES = [
    "/",
    "/inventory/",
    "/inventory/models/w-a100/",
    "/inventory/nodes/",
    "/inventory/nodes/w-node/",
    "/leases/",
    "/leases/new/",
    "/leases/calendar/",
    "/leases/timeline/",
    "/leases/estimate/",
    "/pool/",
    "/teams/",
    "/teams/vision/",
    "/notifications/",
    "/notifications/settings/",
    "/accounts/profile/",
    "/reports/",
]


def _size(name: str) -> int:
    found = finders.find(name)
    assert found, name
    return Path(found).stat().st_size


@pytest.fixture
def pool(db):
    model = CardModelFactory(slug="w-a100", name="W A100")
    make_node(model, cards=4, domains=1, hostname="w-node")


@override_settings(
    STORAGES={"staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"}}
)
@pytest.mark.parametrize("who", ["alice", "lena", "fin", "ops"])
def test_no_page_loads_more_than_one_and_a_half_megabytes(client, pool, vision, who, request):
    client.force_login(request.getfixturevalue(who))
    plotly = sum(_size(name) for name in PLOTLY)
    seen = 0
    for url in PAGES:
        response = client.get(url)
        if response.status_code != 200:
            continue  # not this persona's page
        seen += 1
        linked = {a or b for a, b in ASSET.findall(response.content.decode())}
        weight = sum(_size(name) for name in linked) + plotly
        assert weight <= LIMIT, (url, weight, sorted(linked))
    assert seen >= 8


@override_settings(
    STORAGES={"staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"}}
)
def test_api_docs_page_loads_less_than_one_and_a_half_megabytes(client, alice):
    client.force_login(alice)
    page = client.get("/api/v1/docs/").content.decode()
    linked = {a or b for a, b in ASSET.findall(page)}
    assert "vendor/redoc.standalone.js" in linked
    assert not any("swagger-ui" in name for name in linked)  # its bundle alone is 1.59 MB
    weight = sum(_size(name) for name in linked)
    assert weight <= LIMIT, (weight, sorted(linked))


def test_redoc_as_served_reaches_nothing_outside():
    """The served Redoc is the sidecar's bundle with its one outside address (the Redocly logo)
    emptied, so the docs page breaks no rule of the policy."""
    from portal.staticfinders import REDOC_BUNDLE, REDOC_NAME

    served = Path(finders.find(REDOC_NAME)).read_text(encoding="utf-8")
    original = REDOC_BUNDLE.read_text(encoding="utf-8")
    assert "cdn.redoc.ly" in original and "cdn.redoc.ly" not in served
    assert len(original) - len(served) < 100  # only the address changed
