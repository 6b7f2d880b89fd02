"""The pool-health part of ``/metrics``: each card's latest readings under the DCGM
exporter's names and labels (``DCGM_FI_DEV_GPU_TEMP{gpu, UUID, Hostname, modelName}`` …), so a
dashboard or alert rule written for dcgm-exporter reads the portal's cards too (whatever
their vendor, since the agent reports Ascend and others the same way), plus what the rules
in deploy/prometheus/cardpool-rules.yml need beside them: each card's power limit and
whether it is leased, each node's telemetry age, the leases finished in the last hour, the
cards by health and the lasting alerts. Six queries, whatever the size of the pool."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from datetime import datetime, timedelta

from django.db.models import Count, Exists, OuterRef, Q
from prometheus_client.core import GaugeMetricFamily, Metric

from inventory.models import Card, CardSample, Node
from leasing.choices import (
    HOLDING_STATES,
    LASTING_ALERT_STATES,
    AlertKind,
    AlertSeverity,
    LeaseStatus,
)
from leasing.models import Alert, Allocation, LeaseEvent

# A reading older than this is not shown: a silent card has no value rather than a stale one
# (Prometheus then sees the series go stale, as with a dcgm-exporter that stopped).
FRESH = timedelta(minutes=2)
WINDOW = timedelta(hours=1)
DCGM_LABELS = ["gpu", "UUID", "device", "modelName", "Hostname"]
# (DCGM field, reading, help) — the help texts are dcgm-exporter's own.
DCGM_FIELDS = (
    ("DCGM_FI_DEV_GPU_UTIL", "utilization_pct", "GPU utilization (in %)."),
    ("DCGM_FI_DEV_GPU_TEMP", "temperature_c", "GPU temperature (in C)."),
    ("DCGM_FI_DEV_POWER_USAGE", "power_w", "Power draw (in W)."),
    ("DCGM_FI_DEV_FB_USED", "memory_used_mb", "Framebuffer memory used (in MiB)."),
)


def _latest(now: datetime) -> dict[int, dict]:
    """Each card's latest value of each reading within FRESH (one query, in time order)."""
    latest: dict[int, dict] = {}
    rows = (
        CardSample.objects.filter(at__gt=now - FRESH, at__lte=now)
        .order_by("at")
        .values_list("card_id", "utilization_pct", "temperature_c", "power_w", "memory_used_mb")
    )
    for card_id, util, temp, power, memory in rows.iterator(chunk_size=5000):
        seen = latest.setdefault(card_id, {})
        for key, value in (
            ("utilization_pct", util),
            ("temperature_c", temp),
            ("power_w", power),
            ("memory_used_mb", memory),
        ):
            if value is not None:
                seen[key] = value
    return latest


def _card_families(now: datetime) -> Iterator[Metric]:
    latest = _latest(now)
    families = {
        reading: GaugeMetricFamily(name, doc, labels=DCGM_LABELS)
        for name, reading, doc in DCGM_FIELDS
    }
    free = GaugeMetricFamily(
        "DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB).", labels=DCGM_LABELS
    )
    limit = GaugeMetricFamily(
        "cardpool_card_power_limit_watts",
        "The card model's power limit (TDP) from the spec sheet.",
        labels=DCGM_LABELS,
    )
    leased = GaugeMetricFamily(
        "cardpool_card_leased", "1 while a lease holds the card.", labels=DCGM_LABELS
    )
    held = Allocation.objects.filter(
        card=OuterRef("pk"), start_at__lte=now, end_at__gt=now, lease__status__in=HOLDING_STATES
    )
    cards = (
        Card.objects.in_service()
        .annotate(leased=Exists(held))
        .values_list(
            "pk",
            "index",
            "uuid",
            "node__hostname",
            "card_model__name",
            "card_model__tdp_w",
            "card_model__memory_gb",
            "leased",
        )
        .order_by("pk")
    )
    for pk, index, uuid, host, model, tdp, memory_gb, is_leased in cards.iterator(chunk_size=5000):
        labels = [str(index), uuid, f"card{index}", model, host]
        leased.add_metric(labels, 1 if is_leased else 0)
        if tdp:
            limit.add_metric(labels, float(tdp))
        values = latest.get(pk)
        if not values:
            continue
        for reading, family in families.items():
            if reading in values:
                family.add_metric(labels, values[reading])
        if "memory_used_mb" in values and memory_gb:
            free.add_metric(labels, max(float(memory_gb) * 1024 - values["memory_used_mb"], 0.0))
    yield from families.values()
    yield free
    yield limit
    yield leased


def health_metrics(now: datetime, models: Iterable[str]) -> Iterator[Metric]:
    """Every pool-health family (see the module's docstring)."""
    yield from _card_families(now)

    age = GaugeMetricFamily(
        "cardpool_node_telemetry_age_seconds",
        "Seconds since the node's last telemetry, for nodes in service that have reported.",
        labels=["Hostname"],
    )
    for host, seen in Node.objects.filter(
        status__in=[Node.Status.ACTIVE, Node.Status.DRAINING], telemetry_seen_at__isnull=False
    ).values_list("hostname", "telemetry_seen_at"):
        age.add_metric([host], max((now - seen).total_seconds(), 0.0))
    yield age

    finished = GaugeMetricFamily(
        "cardpool_leases_finished_last_hour",
        "Leases that ended or failed in the last hour, by outcome.",
        labels=["outcome"],
    )
    counts = LeaseEvent.objects.filter(
        at__gt=now - WINDOW, at__lte=now, to_status__in=[LeaseStatus.ENDED, LeaseStatus.FAILED]
    ).aggregate(
        ended=Count("lease_id", filter=Q(to_status=LeaseStatus.ENDED), distinct=True),
        failed=Count("lease_id", filter=Q(to_status=LeaseStatus.FAILED), distinct=True),
    )
    for outcome in ("ended", "failed"):
        finished.add_metric([outcome], counts[outcome] or 0)
    yield finished

    health = GaugeMetricFamily(
        "cardpool_cards_health",
        "Cards in service by what their readings say (hot and unknown take no new lease).",
        labels=["model", "health"],
    )
    by_health = {
        (slug, state): n
        for slug, state, n in Card.objects.in_service()
        .values_list("card_model__slug", "health")
        .annotate(n=Count("pk"))
        .order_by()
    }
    for slug in models:
        for state in Card.Health.values:
            health.add_metric([slug, state], by_health.get((slug, state), 0))
    yield health

    alerts = GaugeMetricFamily(
        "cardpool_alerts",
        "Pool alerts still lasting (open or acknowledged), by rule and severity.",
        labels=["rule", "severity", "status"],
    )
    lasting = {
        (kind, severity, status): n
        for kind, severity, status, n in Alert.objects.filter(status__in=LASTING_ALERT_STATES)
        .values_list("kind", "severity", "status")
        .annotate(n=Count("pk"))
        .order_by()
    }
    for kind in AlertKind.values:
        for severity in AlertSeverity.values:
            for status in LASTING_ALERT_STATES:
                alerts.add_metric(
                    [kind, severity, status.value], lasting.get((kind, severity, status), 0)
                )
    yield alerts
