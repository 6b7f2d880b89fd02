"""The operators' alerts page and API (issue #19): open, acknowledged and resolved alerts,
filterable; acknowledge and silence; refused to everyone else; the pool, node and catalogue
pages show what the readings keep out of placement."""

from __future__ import annotations

from datetime import timedelta

import pytest

from inventory.models import Card
from inventory.telemetry import telemetry_record
from leasing.choices import AlertKind, AlertStatus
from leasing.health.services import health_evaluate
from leasing.models import Alert
from portal.models import AuditEntry
from tests.factories import make_node

pytestmark = pytest.mark.django_db


@pytest.fixture
def alerting(frozen, ops, a100):
    """gpu-hot#0 at 92 °C for 6 minutes (an open alert); gpu-q silent (another)."""
    hot = make_node(a100, cards=2, hostname="gpu-hot")
    quiet = make_node(a100, cards=1, hostname="gpu-q")
    telemetry_record(node=quiet, samples=[{"index": 0, "utilization_pct": 1}])
    for _ in range(13):
        frozen.shift(timedelta(seconds=30))
        telemetry_record(node=hot, samples=[{"index": 0, "temperature_c": 92, "power_w": 100}])
        health_evaluate()
    return hot, quiet


def test_the_api_lists_filters_acknowledges_and_silences(api, ops, alerting):
    api.force_authenticate(ops)
    data = api.get("/api/v1/alerts/").json()
    assert {a["kind"] for a in data["results"]} == {"card_hot", "node_silent"}
    hot = api.get("/api/v1/alerts/?kind=card_hot", HTTP_ACCEPT_LANGUAGE="en").json()["results"]
    assert len(hot) == 1 and hot[0]["card"] == "gpu-hot#0" and hot[0]["value"] == 92
    assert "Card too hot" in hot[0]["title"]
    assert api.get("/api/v1/alerts/?status=nonsense").status_code == 400

    pk = hot[0]["id"]
    done = api.post(f"/api/v1/alerts/{pk}/acknowledge/")
    assert done.status_code == 200 and done.json()["acknowledged_by"] == "ops"
    assert api.post(f"/api/v1/alerts/{pk}/acknowledge/").status_code == 400
    assert api.get("/api/v1/alerts/?status=acknowledged").json()["count"] == 1
    assert api.get("/api/v1/alerts/?lasting=true").json()["count"] == 2

    assert api.post(f"/api/v1/alerts/{pk}/silence/", {"minutes": 60, "x": 1}).status_code == 400
    assert api.post(f"/api/v1/alerts/{pk}/silence/", {"minutes": -1}).status_code == 400
    silenced = api.post(f"/api/v1/alerts/{pk}/silence/", {"minutes": 60}, format="json")
    assert silenced.status_code == 200 and silenced.json()["silenced_by"] == "ops"
    assert api.post("/api/v1/alerts/99999/acknowledge/").status_code == 404
    assert AuditEntry.objects.filter(target=f"alert {pk}").count() == 2


def test_rules_api_shows_defaults_and_takes_a_threshold(api, ops, alerting):
    api.force_authenticate(ops)
    rules = {r["kind"]: r for r in api.get("/api/v1/alert-rules/").json()}
    assert rules["card_hot"]["threshold"] == 85 and rules["node_silent"]["for_minutes"] == 5
    changed = api.put(
        "/api/v1/alert-rules/card_hot/",
        {"threshold": 90, "for_minutes": 3, "severity": "critical"},
        format="json",
    )
    assert changed.status_code == 200 and changed.json()["threshold"] == 90
    assert (
        api.put(
            "/api/v1/alert-rules/card_hot/",
            {"threshold": -1, "for_minutes": 3, "severity": "critical"},
            format="json",
        ).status_code
        == 400
    )
    assert api.put("/api/v1/alert-rules/nope/", {}, format="json").status_code == 404


def test_members_get_403(api, client, alice, alerting):
    api.force_authenticate(alice)
    assert api.get("/api/v1/alerts/").status_code == 403
    assert api.get("/api/v1/alert-rules/").status_code == 403
    alert = Alert.objects.first()
    assert api.post(f"/api/v1/alerts/{alert.pk}/acknowledge/").status_code == 403
    client.force_login(alice)
    assert client.get("/alerts/").status_code == 403
    assert client.post(f"/alerts/{alert.pk}/acknowledge/").status_code == 403
    alert.refresh_from_db()
    assert alert.status == AlertStatus.OPEN


def test_the_page_filters_and_acknowledges(client, ops, alerting, django_assert_max_num_queries):
    client.force_login(ops)
    with django_assert_max_num_queries(12):
        page = client.get("/alerts/", HTTP_ACCEPT_LANGUAGE="en").content.decode()
    assert page.count("data-alert=") == 2 and "gpu-hot#0" in page and "gpu-q" in page
    page = client.get("/alerts/?kind=node_silent").content.decode()
    assert page.count("data-alert=") == 1 and "gpu-hot#0" not in page
    alert = Alert.objects.get(kind=AlertKind.CARD_HOT)
    response = client.post(f"/alerts/{alert.pk}/acknowledge/", {"next": "/alerts/?status=open"})
    assert response.status_code == 302 and response["Location"] == "/alerts/?status=open"
    page = client.get("/alerts/?status=acknowledged", HTTP_ACCEPT_LANGUAGE="en").content.decode()
    assert f'data-alert="{alert.pk}"' in page and "by ops" in page
    client.post(f"/alerts/{alert.pk}/silence/", {"minutes": "240"})
    alert.refresh_from_db()
    assert alert.silenced_by == ops
    client.post(f"/alerts/{alert.pk}/silence/", {"minutes": "nonsense"})
    alert.refresh_from_db()
    assert alert.silenced_by == ops  # refused, unchanged


def test_pool_node_and_catalogue_pages_show_what_is_kept_out(client, ops, alice, alerting):
    hot, quiet = alerting
    assert Card.objects.get(node=hot, index=0).health == Card.Health.HOT
    client.force_login(alice)
    pool = client.get("/pool/", HTTP_ACCEPT_LANGUAGE="en").content.decode()
    assert '<td data-health="hot">1</td>' in pool and '<td data-health="offline">1</td>' in pool
    node = client.get("/inventory/nodes/gpu-hot/", HTTP_ACCEPT_LANGUAGE="en").content.decode()
    assert 'data-health="hot"' in node and 'data-kept-out="1"' in node
    assert "92 °C" in node and 'data-reading="temperature_c"' in node
    catalogue = client.get("/inventory/", HTTP_ACCEPT_LANGUAGE="en").content.decode()
    assert 'data-unhealthy="2"' in catalogue
    client.force_login(ops)
    pool = client.get("/pool/", HTTP_ACCEPT_LANGUAGE="en").content.decode()
    assert "2 alerts still open" in pool


def test_the_lease_page_charts_temperature_power_and_memory(frozen, client, alice, vision, a100):
    from leasing.lifecycle import provisioning
    from tests.leasing.conftest import ask, hours

    node = make_node(a100, cards=1, hostname="gpu-lease")
    lease = ask(alice, vision, a100, count=1, duration=hours(4))
    provisioning.provision_step(lease_id=lease.pk)
    for _ in range(6):
        frozen.shift(timedelta(minutes=1))
        telemetry_record(
            node=node,
            samples=[
                {"index": 0, "utilization_pct": 90, "temperature_c": 81, "power_w": 350},
            ],
        )
    client.force_login(alice)
    page = client.get(f"/leases/{lease.pk}/utilisation/", HTTP_ACCEPT_LANGUAGE="en")
    html = page.content.decode()
    assert 'id="utilisation-chart"' in html
    assert 'data-reading="temperature_c"' in html and 'data-reading="power_w"' in html
    assert 'data-reading="memory_used_mb"' not in html  # no memory readings: no empty chart
