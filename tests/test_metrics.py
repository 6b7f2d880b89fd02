"""/metrics: who may scrape it, what it says about a small pool, and what a scrape costs."""

from __future__ import annotations

import json
import re
from datetime import datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
import time_machine
from django.test import Client
from prometheus_client.parser import text_string_to_metric_families

from inventory.models import Card, CardModel, CardSample, Node
from leasing.choices import EndReason, LeaseStatus
from leasing.models import Allocation, Delivery, Lease, LeaseEvent, Notification
from tests.factories import CardModelFactory, make_node

NOW = datetime(2026, 12, 1, 9, 0, tzinfo=ZoneInfo("Asia/Shanghai"))
TOKEN = "scrape-token-for-tests"  # noqa: S105
DASHBOARD = Path(__file__).resolve().parent.parent / "docs" / "grafana-dashboard.json"


@pytest.fixture
def token(settings):
    settings.CARDPOOL = {**settings.CARDPOOL, "METRICS_TOKEN": TOKEN}
    return TOKEN


def lease(user, team, card_model, status, *, submitted, start=None, minutes=60, **fields):
    start = start or submitted
    end_reason = EndReason.EXPIRED if status == LeaseStatus.ENDED else ""
    return Lease.objects.create(
        user=user,
        team=team,
        card_model=card_model,
        count=fields.pop("count", 1),
        duration=timedelta(minutes=minutes),
        start_at=start,
        end_at=start + timedelta(minutes=minutes),
        status=status,
        end_reason=end_reason,
        submitted_at=submitted,
        **fields,
    )


@pytest.fixture
def pool(alice, vision):
    """a100: 8 cards on an up node (2 held, 1 faulty, 1 retired) and 4 on a node in
    maintenance (1 of them held); h20: 2 cards, both free. Leases in several states;
    two activations and two expiries in the last hour; one failed delivery."""
    a100 = CardModelFactory(slug="a100")
    h20 = CardModelFactory(slug="h20")
    up = make_node(a100, cards=8)
    down = make_node(a100, cards=4, status=Node.Status.MAINTENANCE)
    make_node(h20, cards=2)
    cards = list(Card.objects.filter(node=up).order_by("index"))
    Card.objects.filter(pk=cards[2].pk).update(status=Card.Status.FAULTY)
    Card.objects.filter(pk=cards[3].pk).update(status=Card.Status.RETIRED)

    def held(card, submitted, waited):
        active = lease(
            alice,
            vision,
            a100,
            LeaseStatus.ACTIVE,
            submitted=submitted,
            start=submitted + waited,
            minutes=120,
            activated_at=submitted + waited,
        )
        Allocation.objects.create(
            card=card, lease=active, start_at=active.start_at, end_at=active.end_at
        )
        LeaseEvent.objects.create(
            lease=active,
            at=active.activated_at,
            kind="active",
            from_status="provisioning",
            to_status="active",
        )
        return active

    held(cards[0], NOW - timedelta(minutes=30), timedelta(seconds=10))
    held(cards[1], NOW - timedelta(minutes=50), timedelta(minutes=20))
    held(
        Card.objects.filter(node=down).first(),
        NOW - timedelta(hours=1, minutes=30),
        timedelta(seconds=3),
    )  # activated 87 min ago: outside the hour
    lease(alice, vision, a100, LeaseStatus.QUEUED, submitted=NOW - timedelta(minutes=5), count=3)
    lease(alice, vision, a100, LeaseStatus.QUEUED, submitted=NOW - timedelta(minutes=4))
    lease(alice, vision, a100, LeaseStatus.PENDING_APPROVAL, submitted=NOW - timedelta(minutes=3))
    for lag in (timedelta(seconds=20), timedelta(minutes=4)):
        ended = lease(
            alice, vision, h20, LeaseStatus.ENDED, submitted=NOW - timedelta(hours=3), minutes=60
        )
        LeaseEvent.objects.create(
            lease=ended,
            at=ended.end_at + lag,
            kind="expire",
            from_status="active",
            to_status="releasing",
        )
        Lease.objects.filter(pk=ended.pk).update(
            end_at=NOW - timedelta(minutes=30), start_at=NOW - timedelta(minutes=90)
        )
        LeaseEvent.objects.filter(lease=ended).update(at=NOW - timedelta(minutes=30) + lag)
    note = Notification.objects.create(user=alice, kind="lease_active", title="t", created_at=NOW)
    Delivery.objects.create(notification=note, channel="email", status="failed", created_at=NOW)
    Delivery.objects.create(notification=note, channel="webhook", status="sent", created_at=NOW)
    return a100, h20


def scrape(client: Client, **headers):
    with time_machine.travel(NOW, tick=False):
        return client.get("/metrics", **headers)


def samples(response) -> dict[tuple, float]:
    out = {}
    for family in text_string_to_metric_families(response.content.decode()):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


# --- who may scrape ----------------------------------------------------------------------


@pytest.mark.django_db
def test_anonymous_gets_401(token):
    response = Client().get("/metrics")
    assert response.status_code == 401
    assert response["WWW-Authenticate"].startswith("Bearer")


@pytest.mark.django_db
def test_wrong_token_gets_401(token):
    response = Client().get("/metrics", HTTP_AUTHORIZATION="Bearer nope")
    assert response.status_code == 401


@pytest.mark.django_db
def test_no_token_configured_refuses_any_bearer(settings):
    settings.CARDPOOL = {**settings.CARDPOOL, "METRICS_TOKEN": ""}
    response = Client().get("/metrics", HTTP_AUTHORIZATION="Bearer ")
    assert response.status_code == 401


@pytest.mark.django_db
def test_member_and_finance_get_403(alice, fin):
    for user in (alice, fin):
        client = Client()
        client.force_login(user)
        assert client.get("/metrics").status_code == 403


@pytest.mark.django_db
def test_operator_session_may_scrape(ops):
    client = Client()
    client.force_login(ops)
    response = client.get("/metrics")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain; version=")


@pytest.mark.django_db
def test_token_may_scrape_and_openmetrics_on_request(token):
    response = Client().get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain")
    response = Client().get(
        "/metrics",
        HTTP_AUTHORIZATION=f"Bearer {TOKEN}",
        HTTP_ACCEPT="application/openmetrics-text; version=1.0.0",
    )
    assert response["Content-Type"].startswith("application/openmetrics-text")
    assert response.content.decode().rstrip().endswith("# EOF")


@pytest.mark.django_db
def test_post_is_refused(token):
    response = Client().post("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
    assert response.status_code == 405


# --- what it says --------------------------------------------------------------------------


@pytest.mark.django_db
def test_values_for_a_small_pool(pool, token):
    values = samples(scrape(Client(), HTTP_AUTHORIZATION=f"Bearer {TOKEN}"))

    def card(model, state):
        return values[("cardpool_cards", (("model", model), ("state", state)))]

    # up node: 2 held, 1 faulty, 1 retired, 4 free; maintenance node: 1 held, 3 down.
    assert [card("a100", s) for s in ("free", "held", "faulty", "retired", "down")] == [
        4,
        3,
        1,
        1,
        3,
    ]
    assert [card("h20", s) for s in ("free", "held", "faulty", "retired", "down")] == [
        2,
        0,
        0,
        0,
        0,
    ]

    def leases(state):
        return values[("cardpool_leases", (("state", state),))]

    assert (leases("active"), leases("queued"), leases("pending_approval")) == (3, 2, 1)
    assert leases("scheduled") == 0
    assert values[("cardpool_queue_length", (("model", "a100"),))] == 2
    assert values[("cardpool_queue_cards", (("model", "a100"),))] == 4
    assert values[("cardpool_queue_length", (("model", "h20"),))] == 0

    def bucket(name, le):
        return values[(f"{name}_bucket", (("le", le),))]

    latency = "cardpool_request_to_active_seconds"
    # Active in the last hour: after 10 s and after 20 min; the one 87 min ago is not counted.
    assert bucket(latency, "5.0") == 0
    assert bucket(latency, "15.0") == 1
    assert bucket(latency, "600.0") == 1
    assert bucket(latency, "1800.0") == 2
    assert bucket(latency, "+Inf") == 2
    assert values[(f"{latency}_gcount", ())] == 2
    assert values[(f"{latency}_gsum", ())] == pytest.approx(1210)

    lag = "cardpool_reclamation_lag_seconds"
    assert bucket(lag, "15.0") == 0
    assert bucket(lag, "30.0") == 1
    assert bucket(lag, "300.0") == 2
    assert values[(f"{lag}_gsum", ())] == pytest.approx(260)
    assert values[("cardpool_reclamation_lag_max_seconds", ())] == pytest.approx(240)

    failed = "cardpool_notification_deliveries_failed"
    assert values[(failed, (("channel", "email"),))] == 1
    assert values[(failed, (("channel", "webhook"),))] == 0


@pytest.mark.django_db
def test_an_empty_pool_still_answers(token):
    values = samples(scrape(Client(), HTTP_AUTHORIZATION=f"Bearer {TOKEN}"))
    assert values[("cardpool_reclamation_lag_max_seconds", ())] == 0
    assert values[("cardpool_request_to_active_seconds_bucket", (("le", "+Inf"),))] == 0


@pytest.mark.django_db
def test_scrape_costs_a_fixed_number_of_queries(pool, token, django_assert_max_num_queries):
    a100, _h20 = pool
    for i in range(5):
        extra = CardModelFactory(slug=f"extra{i}")
        make_node(extra, cards=8)
    # Eight for the pool, six for pool health (portal.metrics_health), whatever the pool's size.
    with django_assert_max_num_queries(14):
        response = scrape(Client(), HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
    assert response.status_code == 200


# --- the Grafana dashboard ---------------------------------------------------------------------


@pytest.mark.django_db
def test_grafana_dashboard_uses_only_metrics_we_emit(pool, token):
    dashboard = json.loads(DASHBOARD.read_text())
    assert dashboard["schemaVersion"] >= 36
    exprs = [target["expr"] for panel in dashboard["panels"] for target in panel.get("targets", [])]
    # One card with fresh readings and a reporting node, so the health series are written.
    card = Card.objects.select_related("node", "card_model").first()
    CardModel.objects.filter(pk=card.card_model_id).update(tdp_w=700)
    Node.objects.filter(pk=card.node_id).update(telemetry_seen_at=NOW)
    CardSample.objects.create(
        card=card, at=NOW, utilization_pct=50, temperature_c=70, power_w=400, memory_used_mb=9
    )
    assert len(exprs) >= 6
    referenced = {
        name for expr in exprs for name in re.findall(r"\b(?:cardpool|DCGM_FI)_[A-Za-z_]+", expr)
    }
    emitted = {
        name for name, _labels in samples(scrape(Client(), HTTP_AUTHORIZATION=f"Bearer {TOKEN}"))
    }
    assert referenced, "the dashboard references no metric"
    assert referenced - emitted == set()
    titles = " ".join(panel["title"].lower() for panel in dashboard["panels"])
    for topic in (
        "free cards",
        "leases",
        "queue",
        "request",
        "reclamation",
        "deliver",
        "temperature",
        "power",
        "memory",
        "telemetry age",
        "alerts",
    ):
        assert topic in titles


# --- pool health: DCGM-compatible readings, node ages, alerts ---------------------------------


@pytest.mark.django_db
def test_card_readings_use_dcgm_names_and_labels(token):
    from inventory.telemetry import telemetry_record
    from leasing.health.services import health_evaluate

    h800 = CardModelFactory(slug="h800-t", name="NVIDIA H800", tdp_w=700, memory_gb=80)
    node = make_node(h800, cards=2, hostname="gpu-a01")
    quiet = make_node(h800, cards=1, hostname="gpu-q")
    with time_machine.travel(NOW - timedelta(minutes=10), tick=False):
        telemetry_record(node=quiet, samples=[{"index": 0, "utilization_pct": 5}])
    with time_machine.travel(NOW, tick=False):
        telemetry_record(
            node=node,
            samples=[
                {
                    "index": 1,
                    "utilization_pct": 97,
                    "temperature_c": 92,
                    "power_w": 705,
                    "memory_used_mb": 80000,
                }
            ],
        )
        health_evaluate()
        values = samples(scrape(Client(), HTTP_AUTHORIZATION=f"Bearer {TOKEN}"))
    labels = tuple(
        sorted(
            {
                "gpu": "1",
                "UUID": "gpu-a01-1",
                "device": "card1",
                "modelName": "NVIDIA H800",
                "Hostname": "gpu-a01",
            }.items()
        )
    )
    assert values[("DCGM_FI_DEV_GPU_TEMP", labels)] == 92
    assert values[("DCGM_FI_DEV_POWER_USAGE", labels)] == 705
    assert values[("DCGM_FI_DEV_GPU_UTIL", labels)] == 97
    assert values[("DCGM_FI_DEV_FB_USED", labels)] == 80000
    assert values[("DCGM_FI_DEV_FB_FREE", labels)] == 80 * 1024 - 80000
    assert values[("cardpool_card_power_limit_watts", labels)] == 700
    # A card with no fresh reading has no value (its series goes stale), not an old one.
    assert not any(k[0] == "DCGM_FI_DEV_GPU_TEMP" and ("gpu", "0") in k[1] for k in values)
    assert values[("cardpool_node_telemetry_age_seconds", (("Hostname", "gpu-q"),))] == 600
    silent = (("rule", "node_silent"), ("severity", "critical"), ("status", "open"))
    assert ("cardpool_alerts", silent) in values
    assert values[("cardpool_alerts", silent)] == 1
    assert values[("cardpool_cards_health", (("health", "unknown"), ("model", "h800-t")))] == 1
