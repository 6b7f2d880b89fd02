"""``/metrics`` for Prometheus: the pool read from the database at scrape time.

A custom collector runs a fixed number of aggregate queries per scrape (eight, and the
pool-health families of ``portal.metrics_health``), however
large the pool or its history: counts are grouped in the database, and the two latency
histograms look only at the last hour of lease events (``LeaseEvent.at`` is indexed).

The histograms are *gauge histograms* over that sliding hour, not ever-growing counters:
``histogram_quantile(0.95, sum by (le) (cardpool_request_to_active_seconds_bucket))``
gives the p95 of the last hour directly, with no ``rate()``.

Who may scrape: a request with ``Authorization: Bearer <CARDPOOL_METRICS_TOKEN>`` (when
that setting is set), or a signed-in operator. Anyone else gets 401 (no or wrong
credentials) or 403 (signed in, not an operator).
"""

from __future__ import annotations

import hmac
from collections.abc import Iterator
from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import (
    Case,
    CharField,
    Count,
    DurationField,
    Exists,
    ExpressionWrapper,
    F,
    Max,
    Q,
    Sum,
    Value,
    When,
)
from django.http import HttpRequest, HttpResponse
from django.utils import timezone
from django.views.decorators.http import require_GET
from prometheus_client import CollectorRegistry
from prometheus_client.core import GaugeHistogramMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import choose_encoder

from inventory.models import Card, CardModel, node_takes_leases_q
from leasing.choices import OPEN_STATES, Channel, LeaseStatus
from leasing.models import Delivery, Lease, LeaseEvent
from leasing.scheduler.availability import covering_allocations, held_back_allocations
from portal.metrics_health import health_metrics
from portal.permissions import is_operator

CARD_STATES = ("free", "held", "faulty", "retired", "down")
WINDOW = timedelta(hours=1)
# Upper bounds, in seconds: request → active spans a queue wait; reclaim lag should be short.
LATENCY_BUCKETS = (1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 7200, 14400, 43200, 86400)
LAG_BUCKETS = (1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600)
DELIVERY_CHANNELS = (Channel.EMAIL, Channel.WEBHOOK)


def card_state(now: datetime) -> Case:
    """A card's state now, first match wins: retired, faulty, held, down (node not taking
    leases), free — so the states of one model add up to all its cards."""
    return Case(
        When(status=Card.Status.RETIRED, then=Value("retired")),
        When(status=Card.Status.FAULTY, then=Value("faulty")),
        When(Exists(covering_allocations(now)), then=Value("held")),
        When(Exists(held_back_allocations()), then=Value("held")),  # a failed release's
        When(~node_takes_leases_q(now), then=Value("down")),
        default=Value("free"),
        output_field=CharField(),
    )


def _histogram(
    name: str,
    doc: str,
    events,
    since_field: str,
    buckets: tuple[int, ...],
) -> tuple[GaugeHistogramMetricFamily, float]:
    """A gauge histogram of ``at - <since_field>`` over *events*, counted in one query.

    Returns the family and the largest value seen (0 when there is none).
    """
    elapsed = ExpressionWrapper(F("at") - F(since_field), output_field=DurationField())
    counts = events.aggregate(
        total=Count("pk"),
        seconds=Sum(elapsed),
        longest=Max(elapsed),
        **{
            f"le_{le}": Count("pk", filter=Q(at__lte=F(since_field) + timedelta(seconds=le)))
            for le in buckets
        },
    )
    total = counts["total"]
    cumulative = [(str(float(le)), counts[f"le_{le}"]) for le in buckets]
    cumulative.append(("+Inf", total))
    seconds = counts["seconds"].total_seconds() if counts["seconds"] else 0.0
    family = GaugeHistogramMetricFamily(name, doc, buckets=cumulative, gsum_value=seconds)
    longest = counts["longest"].total_seconds() if counts["longest"] else 0.0
    return family, max(longest, 0.0)


class PoolCollector:
    """Everything ``/metrics`` says, read at *now*."""

    def __init__(self, now: datetime):
        self.now = now

    def describe(self) -> list[Metric]:
        return []  # nothing to register up front: collect() runs once, at scrape time

    def collect(self) -> Iterator[Metric]:
        now = self.now
        models = list(CardModel.objects.order_by("slug").values_list("slug", flat=True))

        cards = GaugeMetricFamily(
            "cardpool_cards", "Cards by card model and state.", labels=["model", "state"]
        )
        by_state = {
            (row["card_model__slug"], row["state"]): row["n"]
            for row in Card.objects.annotate(state=card_state(now))
            .values("card_model__slug", "state")
            .annotate(n=Count("pk"))
            .order_by()
        }
        for slug in models:
            for state in CARD_STATES:
                cards.add_metric([slug, state], by_state.get((slug, state), 0))
        yield cards

        leases = GaugeMetricFamily("cardpool_leases", "Open leases by state.", labels=["state"])
        by_status = dict(
            Lease.objects.filter(status__in=OPEN_STATES)
            .values_list("status")
            .annotate(n=Count("pk"))
            .order_by()
        )
        for status in OPEN_STATES:
            leases.add_metric([status.value], by_status.get(status, 0))
        yield leases

        queue = GaugeMetricFamily(
            "cardpool_queue_length",
            "Leases waiting in the queue, per card model.",
            labels=["model"],
        )
        queue_cards = GaugeMetricFamily(
            "cardpool_queue_cards",
            "Cards asked for by the waiting leases, per card model.",
            labels=["model"],
        )
        waiting = {
            row["card_model__slug"]: row
            for row in Lease.objects.filter(status=LeaseStatus.QUEUED)
            .values("card_model__slug")
            .annotate(n=Count("pk"), cards=Sum("count"))
            .order_by()
        }
        for slug in models:
            row = waiting.get(slug, {"n": 0, "cards": 0})
            queue.add_metric([slug], row["n"])
            queue_cards.add_metric([slug], row["cards"] or 0)
        yield queue
        yield queue_cards

        recent = LeaseEvent.objects.filter(at__gt=now - WINDOW, at__lte=now)
        latency, _longest = _histogram(
            "cardpool_request_to_active_seconds",
            "Submission to active, of the leases that became active in the last hour.",
            recent.filter(kind="active"),
            "lease__submitted_at",
            LATENCY_BUCKETS,
        )
        yield latency

        lag, longest_lag = _histogram(
            "cardpool_reclamation_lag_seconds",
            "Booked end to reclaim, of the leases reclaimed at expiry in the last hour.",
            recent.filter(kind="expire"),
            "lease__end_at",
            LAG_BUCKETS,
        )
        yield lag
        yield GaugeMetricFamily(
            "cardpool_reclamation_lag_max_seconds",
            "The longest reclamation lag in the last hour (0 when nothing was reclaimed).",
            value=longest_lag,
        )

        failed = GaugeMetricFamily(
            "cardpool_notification_deliveries_failed",
            "Notification deliveries that failed for good, per channel.",
            labels=["channel"],
        )
        by_channel = dict(
            Delivery.objects.filter(status=Delivery.Status.FAILED)
            .values_list("channel")
            .annotate(n=Count("pk"))
            .order_by()
        )
        for channel in DELIVERY_CHANNELS:
            failed.add_metric([channel.value], by_channel.get(channel, 0))
        yield failed
        yield from health_metrics(now, models)


def _refusal(request: HttpRequest) -> HttpResponse | None:
    """None when the request may scrape; else the 401 or 403 to answer."""
    token = settings.CARDPOOL.get("METRICS_TOKEN") or ""
    header = request.headers.get("Authorization", "")
    if header.startswith("Bearer "):
        offered = header.removeprefix("Bearer ").strip()
        if token and hmac.compare_digest(offered.encode(), token.encode()):
            return None
    elif request.user.is_authenticated:
        if is_operator(request.user):
            return None
        return HttpResponse("Operators only.\n", status=403, content_type="text/plain")
    response = HttpResponse("Authentication required.\n", status=401, content_type="text/plain")
    response["WWW-Authenticate"] = 'Bearer realm="cardpool-metrics"'
    return response


@require_GET
def metrics(request: HttpRequest) -> HttpResponse:
    """The Prometheus exposition (or OpenMetrics, when the scraper asks for it)."""
    refusal = _refusal(request)
    if refusal is not None:
        return refusal
    registry = CollectorRegistry(auto_describe=False)
    registry.register(PoolCollector(timezone.now()))
    encoder, content_type = choose_encoder(request.headers.get("Accept", ""))
    response = HttpResponse(encoder(registry), content_type=content_type)
    response["Cache-Control"] = "no-store"
    return response
