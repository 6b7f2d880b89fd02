"""Card telemetry: node tokens, POST /api/v1/telemetry/ (all or nothing), the DCGM pull,
hourly summaries and retention, utilisation stats for idle detection, the lease chart."""

from __future__ import annotations

import hashlib
import io
import json
import threading
from datetime import UTC, datetime, timedelta
from io import StringIO
from pathlib import Path

import pytest
import time_machine
from django.core.cache import cache
from django.core.exceptions import ImproperlyConfigured
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connections
from django.utils import translation

from inventory import api_telemetry, selectors, tasks, telemetry
from inventory.models import Card, CardHourly, CardSample, Node
from leasing.lifecycle import provisioning, utilisation
from leasing.lifecycle import requests as lease_requests
from portal.tokens.services import token_create
from tests.factories import CardModelFactory, make_node

NOW = datetime(2026, 3, 2, 8, 0, tzinfo=UTC)
H100_0 = "GPU-5b1c2a7e-0d3f-4a51-9e6b-8c2f1d7a3e01"  # card 0 of gpu-a01 in the DCGM fixture
DCGM_PAGE = (
    Path(__file__).resolve().parent.parent / "fixtures" / "telemetry" / "dcgm-exporter.txt"
).read_text()
URL = "/api/v1/telemetry/"


@pytest.fixture(autouse=True)
def frozen():
    with time_machine.travel(NOW, tick=False) as traveller:
        yield traveller


@pytest.fixture(autouse=True)
def english_and_fresh_throttles():
    cache.clear()
    with translation.override("en"):
        yield


@pytest.fixture
def h100(db):
    return CardModelFactory(slug="h100-t", name="H100 test")


@pytest.fixture
def node(h100) -> Node:
    node = make_node(h100, cards=4, hostname="gpu-a01")
    Card.objects.filter(node=node, index=0).update(uuid=H100_0)
    return node


@pytest.fixture
def token(node) -> str:
    return telemetry.node_token_issue(node=node)


def post(api, body, token=None, **extra):
    extra.setdefault("HTTP_ACCEPT_LANGUAGE", "en")
    if token:
        extra["HTTP_AUTHORIZATION"] = f"Node {token}"
    data = body if isinstance(body, str) else json.dumps(body)
    return api.post(URL, data=data, content_type="application/json", **extra)


def at(minutes_ago: float) -> str:
    return (NOW - timedelta(minutes=minutes_ago)).isoformat()


def messages(response) -> str:
    return json.dumps(response.json(), ensure_ascii=False)


# --- Node tokens -----------------------------------------------------------------------------


def test_token_is_shown_once_and_only_its_hash_is_kept(node):
    token = telemetry.node_token_issue(node=node)
    node.refresh_from_db()
    assert token.startswith("cpn_") and len(token) > 40
    assert node.agent_token_hash == hashlib.sha256(token.encode()).hexdigest()
    assert token not in Node.objects.values_list("agent_token_hash", flat=True)
    assert telemetry.node_by_token(token) == node
    assert telemetry.node_by_token(token + "x") is None
    assert telemetry.node_by_token("") is None


def test_rotating_a_token_ends_the_old_one(node):
    old = telemetry.node_token_issue(node=node)
    new = telemetry.node_token_issue(node=node)
    assert telemetry.node_by_token(old) is None and telemetry.node_by_token(new) == node


def test_node_token_command(node):
    out, err = StringIO(), StringIO()
    call_command("node_token", "gpu-a01", stdout=out, stderr=err)
    first = out.getvalue().strip()
    assert telemetry.node_by_token(first) == node and "shown once" in err.getvalue()
    with pytest.raises(CommandError, match="already has an agent token.*--rotate"):
        call_command("node_token", "gpu-a01", stdout=StringIO(), stderr=StringIO())
    out = StringIO()
    call_command("node_token", "gpu-a01", "--rotate", stdout=out, stderr=StringIO())
    second = out.getvalue().strip()
    assert second != first and telemetry.node_by_token(first) is None
    call_command("node_token", "gpu-a01", "--revoke", stdout=StringIO(), stderr=StringIO())
    assert telemetry.node_by_token(second) is None
    with pytest.raises(CommandError, match="No node 'nope'"):
        call_command("node_token", "nope", stdout=StringIO(), stderr=StringIO())


# --- POST /api/v1/telemetry/ -----------------------------------------------------------------


def test_agent_posts_readings(api, node, token):
    body = {
        "node": "gpu-a01",
        "samples": [
            {"uuid": H100_0, "at": at(1), "utilization_pct": 97, "memory_used_mb": 61234.5},
            {"index": 1, "at": at(1), "utilization_pct": 0, "temperature_c": 33, "power_w": 70},
            {"index": "2", "utilization_pct": 12.5},  # no time: now
        ],
    }
    response = post(api, body, token)
    assert response.status_code == 201, response.content
    assert response.json() == {"count": 3, "received": 3, "node": "gpu-a01"}
    rows = {s.card.index: s for s in CardSample.objects.select_related("card")}
    assert rows[0].utilization_pct == 97 and rows[0].memory_used_mb == 61234.5
    assert rows[1].power_w == 70 and rows[1].memory_used_mb is None
    assert rows[2].at == NOW
    node.refresh_from_db()
    assert node.telemetry_seen_at == NOW


def test_duplicates_are_skipped_not_refused(api, node, token):
    sample = {"index": 0, "at": at(1), "utilization_pct": 50}
    # the same reading twice in one call, once more in a second call
    assert post(api, {"samples": [sample, sample]}, token).json()["count"] == 1
    again = post(api, {"samples": [sample, {**sample, "at": at(0.5)}]}, token)
    assert again.status_code == 201 and again.json()["count"] == 1
    assert CardSample.objects.count() == 2


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        (
            {"index": 9, "utilization_pct": 1},
            "Node gpu-a01 has no card with index 9 (it has 0, 1, 2, 3)",
        ),
        ({"uuid": "GPU-nope", "utilization_pct": 1}, "Node gpu-a01 has no card with UUID GPU-nope"),
        ({"utilization_pct": 1}, "Name the card by its uuid or index"),
        ({"index": 0, "utilization_pct": 120}, "utilization_pct 120 is outside 0–100"),
        ({"index": 0, "utilization_pct": -1}, "utilization_pct -1 is outside 0–100"),
        ({"index": 0, "temperature_c": 400}, "temperature_c 400 is outside"),
        ({"index": 0, "power_w": 10**400}, "power_w 1000"),  # too big for a float
        ({"index": 0, "power_w": "lots"}, "power_w must be a number"),
        ({"index": 0}, "A sample needs at least one reading"),
        ({"index": 0, "utilization_pct": 1, "at": at(-60)}, "is in the future"),
        ({"index": 0, "utilization_pct": 1, "at": "2026-03-02T07:59:00"}, "has no time zone"),
        ({"index": 0, "utilization_pct": 1, "at": "yesterday"}, "is not an ISO 8601 time"),
        ({"index": 0, "utilization_pct": 1, "at": at(49 * 60)}, "older than the 48 hours"),
        ({"index": True, "utilization_pct": 1}, "index must be a whole number"),
        ({"index": "²", "utilization_pct": 1}, "index must be a whole number"),  # issue #15
        ({"index": "٣", "utilization_pct": 1}, "index must be a whole number"),
        ({"index": 0, "utilization_pct": 1, "gpu_temp": 50}, "does not take “gpu_temp”"),
    ],
)
def test_bad_samples_get_400_and_nothing_is_written(api, node, token, bad, message):
    good = {"index": 1, "utilization_pct": 40}
    response = post(api, {"samples": [good, bad]}, token)
    assert response.status_code == 400
    (error,) = response.json()["samples"]
    assert error.startswith("samples[1]: ") and message in error
    assert CardSample.objects.count() == 0  # not even the good sample
    node.refresh_from_db()
    assert node.telemetry_seen_at is None


@pytest.mark.parametrize(
    "body",
    [
        "{not json",
        [],
        {"samples": []},
        {"samples": "lots"},
        {"samples": ["x"]},
        {"samples": [{"index": 0, "utilization_pct": 1}] * (telemetry.MAX_SAMPLES + 1)},
    ],
)
def test_malformed_bodies_get_400(api, node, token, body):
    response = post(api, body, token)
    assert response.status_code == 400
    assert CardSample.objects.count() == 0


def test_errors_speak_the_sites_language_by_default(api, node, token):
    body = {"samples": [{"index": 9, "utilization_pct": 1}]}
    response = post(api, body, token, HTTP_ACCEPT_LANGUAGE="")
    assert response.json() == {
        "samples": ["samples[0]: 节点 gpu-a01 上没有序号为 9 的卡（现有：0, 1, 2, 3）。"]
    }


def test_every_bad_sample_is_named_and_the_list_is_capped(api, node, token):
    bad = [{"index": 9, "utilization_pct": 1}] * 30
    response = post(api, {"samples": bad}, token)
    found = response.json()["samples"]
    assert len(found) == telemetry.MAX_ERRORS_SHOWN + 1 and found[-1] == "… and 10 more."


def test_token_of_another_node_cannot_write_this_one(api, node, token, h100):
    make_node(h100, cards=1, hostname="gpu-b02")
    response = post(
        api, {"node": "gpu-b02", "samples": [{"index": 0, "utilization_pct": 1}]}, token
    )
    assert response.status_code == 403
    assert "belongs to node gpu-a01, not gpu-b02" in messages(response)
    assert CardSample.objects.count() == 0


def test_only_node_tokens_are_accepted_here(api, node, token, alice):
    body = {"samples": [{"index": 0, "utilization_pct": 1}]}
    assert post(api, body).status_code == 401
    assert post(api, body, "cpn_wrong").status_code == 401
    _api_token, key = token_create(user=alice, name="script")
    assert post(api, body, HTTP_AUTHORIZATION=f"Token {key}").status_code == 401
    api.force_login(alice)
    assert post(api, body).status_code == 401
    assert CardSample.objects.count() == 0


def test_node_tokens_work_nowhere_else(api, node, token):
    response = api.get("/api/v1/nodes/", HTTP_AUTHORIZATION=f"Node {token}")
    assert response.status_code in (401, 403)


def test_revoked_token_is_refused(api, node, token):
    telemetry.node_token_revoke(node=node)
    response = post(api, {"samples": [{"index": 0, "utilization_pct": 1}]}, token)
    assert response.status_code == 401 and "revoked" in messages(response)


def test_posts_are_throttled_per_node(api, node, token, monkeypatch):
    monkeypatch.setattr(api_telemetry.NodeRateThrottle, "rate", "2/min", raising=False)
    codes = [
        post(api, {"samples": [{"index": 0, "utilization_pct": 1, "at": at(i)}]}, token).status_code
        for i in range(3)
    ]
    assert codes == [201, 201, 429]


def test_openapi_schema_documents_the_endpoint_without_warnings(db, tmp_path):
    schema = tmp_path / "schema.yml"
    call_command("spectacular", "--validate", "--fail-on-warn", "--file", str(schema))
    text = schema.read_text()
    assert "/api/v1/telemetry/" in text and "nodeToken" in text


# --- DCGM pull -------------------------------------------------------------------------------


class Page(io.BytesIO):
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def test_pull_task_reads_each_exporter_and_skips_broken_ones(node, h100, monkeypatch, caplog):
    Node.objects.filter(pk=node.pk).update(
        dcgm_url="http://gpu-a01:9400/metrics", telemetry_seen_at=NOW - timedelta(minutes=1)
    )
    # never seen, so pulled first: its exporter is down, and must not stop the others
    make_node(h100, cards=2, hostname="gpu-c03", dcgm_url="http://gpu-c03:9400/metrics")
    make_node(h100, cards=2, hostname="no-exporter")
    opened = []

    def opener(request, timeout):
        opened.append((request.full_url, timeout))
        if "gpu-c03" in request.full_url:
            raise OSError("Connection refused")
        return Page(DCGM_PAGE.encode())

    monkeypatch.setattr("inventory.agent.urlopen", opener)
    result = tasks.pull_dcgm()
    assert result == {"nodes": 2, "samples": 2, "failed": 1}
    assert sorted(opened) == [
        ("http://gpu-a01:9400/metrics", telemetry.PULL_TIMEOUT),
        ("http://gpu-c03:9400/metrics", telemetry.PULL_TIMEOUT),
    ]
    rows = {s.card.index: s for s in CardSample.objects.select_related("card")}
    assert rows[0].utilization_pct == 97 and rows[0].memory_used_mb == 61234  # by UUID
    assert rows[1].power_w == pytest.approx(69.871) and rows[1].card.node == node  # by index
    assert "gpu-c03" in caplog.text and "Connection refused" in caplog.text
    node.refresh_from_db()
    assert node.telemetry_seen_at == NOW


def test_pull_ignores_gpus_the_node_does_not_list(node, caplog):
    Card.objects.filter(node=node, index=1).delete()
    stored = telemetry.telemetry_pull_node(node=node, text=DCGM_PAGE)
    assert stored == 1
    assert "reports GPU 1" in caplog.text


# --- Summaries -------------------------------------------------------------------------------


def make_samples(card, start, count, step=timedelta(seconds=30), util=lambda i: 10.0, **fields):
    CardSample.objects.bulk_create(
        CardSample(card=card, at=start + i * step, utilization_pct=util(i), **fields)
        for i in range(count)
    )


def test_summarise_rolls_whole_old_hours_and_is_idempotent(node):
    card = node.cards.get(index=0)
    # a recent sample first (lower id) that must stay, then two old hours that must go
    recent = NOW - timedelta(hours=2)
    make_samples(card, recent, 1)
    old = datetime(2026, 2, 27, 10, 0, tzinfo=UTC)
    make_samples(card, old, 120, util=lambda i: float(i % 2 * 50), power_w=100.0)
    make_samples(card, old + timedelta(hours=1), 60, util=lambda i: 0.0, memory_used_mb=1.0)
    before = NOW - telemetry.retention()
    assert telemetry.telemetry_summarise(before=before) == 180
    first, second = CardHourly.objects.filter(card=card).order_by("hour")
    assert (first.hour, first.samples) == (old, 120)
    assert (first.utilization_avg, first.utilization_max, first.power_avg_w) == (25.0, 50.0, 100.0)
    assert (second.samples, second.utilization_max, second.memory_used_max_mb) == (60, 0.0, 1.0)
    assert list(CardSample.objects.values_list("at", flat=True)) == [recent]
    # Twice is the same as once.
    assert telemetry.telemetry_summarise(before=before) == 0
    assert CardHourly.objects.count() == 2
    first.refresh_from_db()
    assert first.samples == 120


def test_summarise_merges_late_samples_into_an_existing_hour(node):
    card = node.cards.get(index=0)
    hour = datetime(2026, 2, 27, 10, 0, tzinfo=UTC)
    make_samples(card, hour, 2, util=lambda i: 20.0)
    telemetry.telemetry_summarise(before=hour + timedelta(hours=1))
    make_samples(card, hour + timedelta(minutes=30), 2, util=lambda i: 80.0)
    telemetry.telemetry_summarise(before=hour + timedelta(hours=1))
    row = CardHourly.objects.get(card=card)
    assert (row.samples, row.utilization_avg, row.utilization_max) == (4, 50.0, 80.0)


def test_summarise_only_takes_whole_hours(node):
    card = node.cards.get(index=0)
    hour = datetime(2026, 2, 27, 10, 0, tzinfo=UTC)
    make_samples(card, hour, 4, step=timedelta(minutes=15))
    # "before" in the middle of the hour: the hour is left whole for the next run
    assert telemetry.telemetry_summarise(before=hour + timedelta(minutes=40)) == 0
    assert CardSample.objects.count() == 4


def test_summarise_task_keeps_the_retention(node, settings):
    settings.CARDPOOL = {**settings.CARDPOOL, "TELEMETRY_RETENTION_HOURS": 3}
    card = node.cards.get(index=0)
    make_samples(card, NOW - timedelta(hours=5), 1)
    make_samples(card, NOW - timedelta(hours=2), 1)
    assert tasks.summarise_telemetry() == 1
    assert CardSample.objects.get().at == NOW - timedelta(hours=2)
    assert CardHourly.objects.get().hour == NOW - timedelta(hours=5)
    settings.CARDPOOL = {**settings.CARDPOOL, "TELEMETRY_RETENTION_HOURS": 0}
    with pytest.raises(ImproperlyConfigured, match="at least 2"):
        tasks.summarise_telemetry()


@pytest.mark.postgres
def test_two_summaries_at_once_count_each_sample_once(transactional_db, h100):
    """Two workers running the hourly job together: every sample lands in exactly one sum."""
    node = make_node(h100, cards=2, hostname="gpu-pg")
    hour = datetime(2026, 2, 27, 10, 0, tzinfo=UTC)
    for card in node.cards.all():
        # more than one chunk in all, so the runs meet at the chunk boundary too
        make_samples(card, hour, 3000, step=timedelta(seconds=1))
    start, results = threading.Barrier(2), []

    def run():
        try:
            start.wait()
            results.append(telemetry.telemetry_summarise(before=NOW))
        finally:
            connections.close_all()

    threads = [threading.Thread(target=run) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sum(results) == 6000
    assert sorted(CardHourly.objects.values_list("samples", flat=True)) == [3000, 3000]
    assert not CardSample.objects.exists()


# --- Reads -----------------------------------------------------------------------------------


def test_utilization_stats_for_idle_detection(node, django_assert_max_num_queries):
    busy, idle, silent = (node.cards.get(index=i) for i in range(3))
    since = NOW - timedelta(minutes=30)
    make_samples(busy, since, 61, util=lambda i: 80.0 if i == 30 else 1.0)
    make_samples(idle, since, 61, util=lambda i: 2.0)
    with django_assert_max_num_queries(2):
        stats = selectors.utilization_stats([busy.pk, idle.pk, silent.pk], since, NOW)
    assert stats["cards"][busy.pk]["max"] == 80.0
    assert stats["cards"][idle.pk] | {"avg": None} == {
        "samples": 61,
        "max": 2.0,
        "avg": None,
        "first_at": since,
        "last_at": NOW,
        "covered": True,
    }
    assert stats["cards"][idle.pk]["avg"] == pytest.approx(2.0)
    assert stats["cards"][silent.pk] == {
        "samples": 0,
        "max": None,
        "avg": None,
        "first_at": None,
        "last_at": None,
        "covered": False,
    }
    assert stats["max"] == 80.0 and stats["samples"] == 122
    assert stats["covered"] is False  # a silent card is not an idle card
    assert selectors.utilization_stats([idle.pk], since, NOW)["covered"] is True


def test_a_gap_in_the_readings_is_not_coverage(node):
    card = node.cards.get(index=0)
    since = NOW - timedelta(minutes=60)
    make_samples(card, since, 20)  # the first ten minutes
    make_samples(card, NOW - timedelta(minutes=10), 21)  # the last ten
    assert selectors.utilization_stats([card.pk], since, NOW)["covered"] is False
    assert selectors.utilization_stats([card.pk], since, NOW, max_gap=timedelta(minutes=41))[
        "covered"
    ]


def test_stats_use_hourly_rows_once_samples_are_summarised(node):
    card = node.cards.get(index=0)
    since = datetime(2026, 2, 27, 10, 0, tzinfo=UTC)
    make_samples(card, since, 240, util=lambda i: 30.0 if i < 120 else 10.0)
    telemetry.telemetry_summarise(before=NOW - telemetry.retention())
    stats = selectors.utilization_stats([card.pk], since, since + timedelta(hours=2))
    assert stats["cards"][card.pk] | {"avg": 0} == {
        "samples": 240,
        "max": 30.0,
        "avg": 0,
        "first_at": since,
        "last_at": since + timedelta(hours=2),
        "covered": True,
    }
    assert stats["avg"] == pytest.approx(20.0)


# --- Lease chart -----------------------------------------------------------------------------


@pytest.fixture
def lease(node, alice, vision, h100):
    lease = lease_requests.lease_request(
        user=alice, team=vision, card_model=h100, count=2, duration=timedelta(hours=4)
    )
    assert provisioning.provision_step(lease_id=lease.pk)
    lease.refresh_from_db()
    return lease


def test_lease_series_shows_only_this_leases_time_on_its_cards(lease, frozen):
    cards = [a.card for a in lease.allocations.select_related("card")]
    # the previous holder's work on the first card, before this lease began
    make_samples(cards[0], NOW - timedelta(minutes=30), 10, util=lambda i: 99.0)
    frozen.shift(timedelta(minutes=20))
    for card in cards:
        make_samples(card, NOW + timedelta(minutes=1), 30, util=lambda i: 40.0)
    series = utilisation.lease_series(lease, NOW - timedelta(hours=1))
    assert [s["label"] for s in series] == [f"gpu-a01#{c.index}" for c in cards]
    assert all(len(s["points"]) == 30 for s in series)
    assert {value for s in series for _at, value in s["points"]} == {40.0}
    downsampled = utilisation.lease_series(lease, NOW - timedelta(hours=1), max_points=10)
    assert len(downsampled[0]["points"]) == 10


def test_lease_page_partial_draws_the_chart(client, lease, alice, bob, frozen):
    client.force_login(alice)
    client.cookies["django_language"] = "en"
    empty = client.get(f"/leases/{lease.pk}/utilisation/").content.decode()
    assert "No readings from these cards yet" in empty and "Plotly" not in empty
    frozen.shift(timedelta(minutes=30))
    for allocation in lease.allocations.select_related("card"):
        make_samples(allocation.card, NOW, 50, util=lambda i: 7.0)
    page = client.get(f"/leases/{lease.pk}/utilisation/").content.decode()
    assert 'class="plotly-chart" data-figure=' in page and "gpu-a01#" in page
    assert "Peak 7 %, average 7 %." in page
    assert 'hx-trigger="every 60s"' in page  # an active lease's chart keeps itself fresh
    client.force_login(bob)  # another team's member
    assert client.get(f"/leases/{lease.pk}/utilisation/").status_code == 404
