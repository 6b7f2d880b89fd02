"""A Content-Security-Policy without 'unsafe-inline', and pages that need none: no inline script,
style block, style attribute or event handler (charts are data drawn by static/js/charts.js)."""

import re
from datetime import timedelta

from leasing.lifecycle import provisioning
from leasing.lifecycle import requests as lease_requests
from tests.factories import CardModelFactory, make_node

INLINE = [
    (re.compile(r"<script(?![^>]*\bsrc=)[^>]*>", re.I), "inline <script>"),
    (re.compile(r"<style\b", re.I), "<style> block"),
    (re.compile(r"\sstyle\s*=", re.I), "style attribute"),
    (re.compile(r"\son[a-z]+\s*=", re.I), "event handler attribute"),
    (re.compile(r"javascript:", re.I), "javascript: address"),
]


def _inline_parts(page: str) -> list[str]:
    return [what for pattern, what in INLINE if pattern.search(page)]


def test_policy_allows_only_the_sites_own_scripts_and_styles(client, alice):
    client.force_login(alice)
    policy = client.get("/")["Content-Security-Policy"]
    directives = dict(d.strip().split(" ", 1) for d in policy.split(";") if d.strip())
    assert directives["script-src"] == "'self'" and directives["style-src"] == "'self'"
    assert directives["default-src"] == "'self'" and directives["frame-ancestors"] == "'none'"
    assert "unsafe" not in policy


def test_main_pages_have_nothing_inline(client, alice, lena, fin, ops, vision):
    model = CardModelFactory(slug="csp-model")
    make_node(model, cards=2, domains=1, hostname="csp-node")
    lease = lease_requests.lease_request(
        user=alice, team=vision, card_model=model, count=1, duration=timedelta(hours=2)
    )
    provisioning.provision_step(lease_id=lease.pk)
    pages = [
        (alice, "/"),
        (alice, "/pool/"),
        (alice, "/inventory/"),
        (alice, f"/inventory/models/{model.slug}/"),
        (alice, "/inventory/nodes/"),
        (alice, "/inventory/nodes/csp-node/"),
        (alice, "/leases/"),
        (alice, "/leases/new/"),
        (alice, f"/leases/{lease.pk}/"),
        (alice, "/leases/calendar/"),
        (alice, "/notifications/"),
        (lena, "/teams/"),
        (lena, "/teams/vision/"),
        (fin, "/reports/"),
        (fin, "/reports/statements/vision/2026-01/"),
        (alice, "/api/v1/docs/"),
        (alice, "/no/such/page/"),
    ]
    for user, url in pages:
        client.force_login(user)
        response = client.get(url, follow=True)
        assert response.status_code in (200, 404), url
        assert _inline_parts(response.content.decode()) == [], url
    client.logout()
    assert _inline_parts(client.get("/accounts/login/").content.decode()) == []


def test_plotly_style_rules_are_a_file_charts_js_links(client, alice):
    """plotly.js writes its rules into an inline <style> unless the page links them with the id
    it looks for (static/js/charts.js does, before loading plotly.js); the file is built from
    the vendored bundle."""
    from django.contrib.staticfiles import finders

    css = open(finders.find("vendor/plotly.css"), encoding="utf-8").read()
    assert ".js-plotly-plot .plotly .modebar {" in css and ".plotly-notifier" in css
    client.force_login(alice)
    page = client.get("/pool/").content.decode()
    assert 'data-plotly-css="/static/vendor/plotly.css"' in page
    script = open(finders.find("js/charts.js"), encoding="utf-8").read()
    assert 'link.id = "plotly.js-style-global"' in script and '"no-inline-styles"' in script
