"""Pool health in a real browser, in Simplified Chinese (issue #19): a node's agent posts
92 °C → the rules run → the operator sees the alert in the bell and on the alerts page, and
acknowledges it there. Chromium via Playwright on the live server (PostgreSQL: the server
thread must see the test's data). Selectors are data attributes, never English text."""

from __future__ import annotations

import json
import re
import urllib.request

import pytest

from inventory.telemetry import node_token_issue
from leasing.choices import AlertKind, AlertStatus
from leasing.health.services import alert_rule_set, health_evaluate
from leasing.models import Alert
from tests.e2e.test_browser import chromium_page, db_read
from tests.factories import CardModelFactory, make_node

pytestmark = [pytest.mark.postgres, pytest.mark.browser]


def _post_telemetry(base_url: str, token: str, samples: list[dict]) -> int:
    request = urllib.request.Request(
        f"{base_url}/api/v1/telemetry/",
        data=json.dumps({"samples": samples}).encode(),
        headers={"Authorization": f"Node {token}", "Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310 - the live server
        return response.status


def test_posted_telemetry_reaches_the_operator_in_the_bell_and_on_the_alerts_page(
    live_server, ops, tmp_path
):
    model = CardModelFactory(slug="alert-browser", name="H800 告警测试", tdp_w=700)
    node = make_node(model, cards=2, hostname="gpu-alert-01")
    token = node_token_issue(node=node)
    # The operators' threshold: above 85 °C at once (no waiting window, to keep the test short).
    alert_rule_set(
        user=ops, kind=AlertKind.CARD_HOT, threshold=85, for_minutes=0, severity="critical"
    )

    status = _post_telemetry(
        live_server.url,
        token,
        [
            {"index": 0, "temperature_c": 92, "power_w": 410, "utilization_pct": 97},
            {"index": 1, "temperature_c": 60, "power_w": 300, "utilization_pct": 40},
        ],
    )
    assert status == 201
    health_evaluate()  # what beat runs every CARDPOOL_HEALTH_SECONDS
    alert = Alert.objects.get(kind=AlertKind.CARD_HOT)

    with chromium_page(live_server) as page:
        page.goto("/accounts/login/")
        page.locator("input[name=login]").fill("ops")
        page.locator("input[name=password]").fill("pw-for-tests")
        page.locator("input[name=password]").press("Enter")
        page.wait_for_url(re.compile(r"^(?!.*/accounts/login/)"))

        assert page.locator("html").get_attribute("lang") == "zh-hans"
        bell = page.locator("a.notification-bell")
        assert bell.get_attribute("data-unread") == "1"
        bell.click()
        page.wait_for_url(re.compile(r"/notifications/"))
        note = page.locator("#notifications tbody tr[data-unread]").first
        assert "卡温度过高" in note.inner_text() and "gpu-alert-01#0" in note.inner_text()
        assert "资源池告警" in note.inner_text()  # the kind's label

        page.goto("/alerts/")
        row = page.locator(f'tr[data-alert="{alert.pk}"]')
        assert row.get_attribute("data-status") == AlertStatus.OPEN
        text = row.inner_text()
        assert "卡温度过高" in text and "gpu-alert-01#0" in text and "92" in text
        assert page.locator("tr[data-alert]").count() == 1  # the cool card raised nothing
        page.screenshot(path=str(tmp_path / "alerts.png"), full_page=True)

        row.locator("form[action$='/acknowledge/'] button").click()
        page.wait_for_load_state()
        row = page.locator(f'tr[data-alert="{alert.pk}"]')
        assert row.get_attribute("data-status") == AlertStatus.ACKNOWLEDGED
        assert "ops" in row.inner_text()

        page.goto("/alerts/?status=resolved")
        assert page.locator("tr[data-alert]").count() == 0

    alert = db_read(lambda: Alert.objects.select_related("acknowledged_by").get(pk=alert.pk))
    assert alert.acknowledged_by.username == "ops"
