"""Under the Content-Security-Policy the pages work in a real browser with no violation: charts
drawn (also the lease's utilisation chart htmx loads), the API docs (Redoc) listing the
endpoints and searching them, nothing refused. Chromium via Playwright on the live server
(PostgreSQL: the server thread must see the test's data)."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.utils import timezone

from inventory.models import CardSample
from leasing.lifecycle import provisioning
from leasing.lifecycle import requests as lease_requests
from leasing.models import Allocation, Lease
from tests.e2e.test_browser import chromium_page
from tests.factories import CardModelFactory, make_node

pytestmark = [pytest.mark.postgres, pytest.mark.browser]


def _login(page, username: str) -> None:
    page.context.clear_cookies()  # signed out: the login page shows its form
    page.goto("/accounts/login/")
    page.locator("input[name=login]").fill(username)
    page.locator("input[name=password]").fill("pw-for-tests")
    page.locator("input[name=password]").press("Enter")
    page.wait_for_url(re.compile(r"^(?!.*/accounts/login/)"))


def test_pages_draw_under_the_policy_without_violations(live_server, alice, lena, fin, vision):
    model = CardModelFactory(slug="csp-browser")
    make_node(model, cards=2, domains=1, hostname="csp-browser-node")
    lease = lease_requests.lease_request(
        user=alice, team=vision, card_model=model, count=1, duration=timedelta(hours=2)
    )
    provisioning.provision_step(lease_id=lease.pk)
    # The card has been held for the last half hour, busy at 40 %.
    now = timezone.now()
    Allocation.objects.filter(lease=lease).update(start_at=now - timedelta(minutes=30))
    earlier = now - timedelta(minutes=30)
    Lease.objects.filter(pk=lease.pk).update(start_at=earlier, activated_at=earlier)
    for allocation in lease.allocations.select_related("card"):
        CardSample.objects.bulk_create(
            CardSample(
                card=allocation.card, at=now - timedelta(minutes=20 - i), utilization_pct=40.0
            )
            for i in range(20)
        )
    refused: list[str] = []
    with chromium_page(live_server) as page:
        page.on(
            "console",
            lambda m: (
                refused.append(f"{page.url}: {m.text}")
                if "Content Security Policy" in m.text or "strict CSP" in m.text
                else None
            ),
        )
        page.on("pageerror", lambda e: refused.append(f"{page.url}: {e}"))
        _login(page, "alice")
        for url in ("/", "/pool/", "/inventory/", "/inventory/nodes/", "/leases/new/"):
            page.goto(url)
            page.wait_for_load_state("networkidle")
        policy = page.goto("/pool/").headers["content-security-policy"]
        assert "script-src 'self'" in policy and "unsafe-inline" not in policy
        page.locator(".plotly-chart .main-svg").first.wait_for()
        page.goto(f"/leases/{lease.pk}/")
        page.locator("#utilisation .plotly-chart .main-svg").first.wait_for()  # htmx-loaded
        docs = page.goto("/api/v1/docs/").headers["content-security-policy"]
        assert "script-src 'self';" in docs + ";" and "worker-src blob:" in docs
        page.locator("[data-section-id='operation/leases_extend_create']").wait_for()
        page.locator("input.search-input").fill("extend")  # Redoc's search runs in its worker
        page.locator("[role=search] li", has_text="leases_extend_create").first.wait_for()
        page.goto("/no/such/page/")
        _login(page, "lena")
        page.goto("/teams/vision/")
        page.wait_for_load_state("networkidle")
        _login(page, "fin")
        page.goto("/reports/")
        page.wait_for_load_state("networkidle")
    assert refused == []
