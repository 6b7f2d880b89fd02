"""The pool-health rules: their defaults and what each finds in the readings (reads only).

Each detector answers, for one rule, which subjects breach it now (``Finding``) and which
are known to be clear; an alert whose subject is neither stays as it is (a card that sent
nothing since is not a cool card). Card readings are read with one aggregate query over
the recent samples for the three card rules together, whatever the size of the pool.

Defaults come from the source documents (002 §9.4): above 85 °C for 5 minutes, the power
limit, memory above 95 %, a node silent for 5 minutes, a lease failure rate above 20 % in an
hour, a leased card at 0 % for an hour. Operators change them (``AlertRule``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.db.models import Count, F, FloatField, Max, Q, Value
from django.db.models.functions import Cast

from inventory.models import CardSample, Node
from leasing.choices import AlertKind, AlertSeverity, LeaseStatus
from leasing.models import AlertRule, Allocation, LeaseEvent

# How recent the readings that clear an alert (and give its current value) must be: two
# agent rounds. An alert resolves only when every reading of that span is below the line.
RECENT = timedelta(minutes=2)
# How far before a rule's window the reading that covers its start may lie: a window counts
# as covered when the last reading at or before its start is known (within this) and says
# "over the line" too, whatever the source's interval (30 s agents, 60 s exporters).
MAX_GAP = timedelta(minutes=5)
# The failure rate needs this many finished leases in its window before it means anything.
MIN_FINISHED = 5
POOL = "pool"


@dataclass(frozen=True)
class Defaults:
    threshold: float
    for_minutes: int
    severity: str


DEFAULTS: dict[str, Defaults] = {
    AlertKind.CARD_HOT: Defaults(85, 5, AlertSeverity.WARNING),
    AlertKind.POWER_LIMIT: Defaults(98, 5, AlertSeverity.WARNING),
    AlertKind.MEMORY_FULL: Defaults(95, 5, AlertSeverity.WARNING),
    AlertKind.NODE_SILENT: Defaults(0, 5, AlertSeverity.CRITICAL),
    AlertKind.FAILURE_RATE: Defaults(20, 60, AlertSeverity.WARNING),
    AlertKind.CARD_IDLE: Defaults(0, 60, AlertSeverity.INFO),
}
# Cards and nodes an alert of these rules keeps out of placement until it resolves.
KEEPS_OUT = frozenset({AlertKind.CARD_HOT, AlertKind.NODE_SILENT})
# Rules whose alert is told to the holders of leases on the card or node.
TOLD_TO_HOLDERS = frozenset({AlertKind.CARD_HOT, AlertKind.POWER_LIMIT, AlertKind.NODE_SILENT})


def rules_in_force() -> dict[str, AlertRule]:
    """Every rule, as saved by an operator or else with its defaults (an unsaved row)."""
    saved = {rule.kind: rule for rule in AlertRule.objects.all()}
    return {
        kind: saved.get(kind)
        or AlertRule(
            kind=kind,
            threshold=d.threshold,
            for_minutes=d.for_minutes,
            severity=d.severity,
            enabled=True,
        )
        for kind, d in DEFAULTS.items()
    }


@dataclass
class Finding:
    """A subject that breaches a rule now."""

    subject: str
    value: float | None
    card_id: int | None = None
    node_id: int | None = None
    lease_id: int | None = None


@dataclass
class Verdict:
    breaches: dict[str, Finding] = field(default_factory=dict)
    # Subjects known to be fine; None: every subject not breaching is.
    clear: set[str] | None = None


def card_subject(card_id: int) -> str:
    return f"card:{card_id}"


# --- card readings: temperature, power, memory ------------------------------------------


def _card_conditions(rule: AlertRule) -> tuple[str, Q, Q] | None:
    """(reading, breach, fine) of a card rule, as conditions on a sample."""
    share = rule.threshold / 100
    if rule.kind == AlertKind.CARD_HOT:
        return (
            "temperature_c",
            Q(temperature_c__gt=rule.threshold),
            Q(temperature_c__lte=rule.threshold),
        )
    if rule.kind == AlertKind.POWER_LIMIT:
        limit = Cast(F("card__card_model__tdp_w"), FloatField()) * Value(share)
        return "power_w", Q(power_w__gte=limit), Q(power_w__lt=limit)
    if rule.kind == AlertKind.MEMORY_FULL:
        # The spec sheet's GB are GiB as the tools count them (an 80 GB card reports ~81,559 MiB).
        limit = Cast(F("card__card_model__memory_gb"), FloatField()) * Value(1024.0 * share)
        return "memory_used_mb", Q(memory_used_mb__gt=limit), Q(memory_used_mb__lte=limit)
    return None


def card_readings(rules: list[AlertRule], now: datetime) -> dict[str, Verdict]:
    """Temperature, power and memory rules over the recent samples, in one query.

    A card breaches a rule when it has been over the line for the rule's minutes: no reading
    in the window is fine, the last reading at or before the window's start (within MAX_GAP)
    is over the line, and the card still reports over the line (a reading within RECENT). It
    is clear when it has readings within RECENT and none of them is over.
    """
    verdicts: dict[str, Verdict] = {rule.kind: Verdict(clear=set()) for rule in rules}
    if not rules:
        return verdicts
    recent = now - RECENT
    aggregates = {}
    windows = {}
    for rule in rules:
        reading, bad, fine = _card_conditions(rule)  # type: ignore[misc]
        start = now - timedelta(minutes=rule.for_minutes)
        windows[rule.kind] = start
        has = Q(**{f"{reading}__isnull": False})
        if rule.kind == AlertKind.POWER_LIMIT:  # a card model without a TDP has no limit
            has &= Q(card__card_model__tdp_w__isnull=False)
        k = rule.kind
        before = Q(at__lte=start, at__gte=start - MAX_GAP)
        aggregates[f"{k}_fine"] = Count("pk", filter=Q(at__gt=start) & fine)
        aggregates[f"{k}_bad_before"] = Max("at", filter=before & bad & has)
        aggregates[f"{k}_fine_before"] = Max("at", filter=before & fine)
        aggregates[f"{k}_recent_bad"] = Count("pk", filter=Q(at__gte=recent) & bad & has)
        aggregates[f"{k}_recent_n"] = Count("pk", filter=Q(at__gte=recent) & has)
        aggregates[f"{k}_value"] = Max(reading, filter=Q(at__gte=recent))
    since = min(windows.values()) - MAX_GAP
    rows = (
        CardSample.objects.filter(at__gte=since, at__lte=now)
        .values("card_id", "card__node_id")
        .annotate(**aggregates)
        .order_by()
    )
    for row in rows:
        card_id = row["card_id"]
        subject = card_subject(card_id)
        for rule in rules:
            k = rule.kind
            bad_before, fine_before = row[f"{k}_bad_before"], row[f"{k}_fine_before"]
            started_bad = bad_before is not None and (
                fine_before is None or bad_before > fine_before
            )
            if started_bad and not row[f"{k}_fine"] and row[f"{k}_recent_bad"]:
                verdicts[k].breaches[subject] = Finding(
                    subject, row[f"{k}_value"], card_id=card_id, node_id=row["card__node_id"]
                )
            elif row[f"{k}_recent_n"] and not row[f"{k}_recent_bad"]:
                verdicts[k].clear.add(subject)  # type: ignore[union-attr]
    return verdicts


# --- nodes, the pool, leased cards -------------------------------------------------------


def node_silent(rule: AlertRule, now: datetime) -> Verdict:
    """Nodes that reported before and have sent nothing for the rule's minutes. Only nodes in
    service are watched: one an operator took into maintenance or offline is expected to be
    quiet (its alert resolves)."""
    silent_since = now - timedelta(minutes=rule.for_minutes)
    rows = Node.objects.filter(
        status__in=[Node.Status.ACTIVE, Node.Status.DRAINING],
        telemetry_seen_at__isnull=False,
        telemetry_seen_at__lt=silent_since,
    ).values_list("pk", "telemetry_seen_at")
    verdict = Verdict()
    for pk, seen in rows:
        minutes = (now - seen).total_seconds() / 60
        verdict.breaches[f"node:{pk}"] = Finding(f"node:{pk}", round(minutes, 1), node_id=pk)
    return verdict


def failure_rate(rule: AlertRule, now: datetime) -> Verdict:
    """Leases that failed, as a share of those that finished (ended or failed) in the window."""
    since = now - timedelta(minutes=max(rule.for_minutes, 1))
    counts = LeaseEvent.objects.filter(
        at__gte=since, at__lte=now, to_status__in=[LeaseStatus.ENDED, LeaseStatus.FAILED]
    ).aggregate(
        finished=Count("lease_id", distinct=True),
        failed=Count("lease_id", filter=Q(to_status=LeaseStatus.FAILED), distinct=True),
    )
    verdict = Verdict()
    finished = counts["finished"] or 0
    if finished >= MIN_FINISHED:
        rate = 100 * (counts["failed"] or 0) / finished
        if rate > rule.threshold:
            verdict.breaches[POOL] = Finding(POOL, round(rate, 1))
    return verdict


def card_idle(rule: AlertRule, now: datetime) -> Verdict:
    """Cards held by an active lease for longer than the rule's window whose utilisation
    stayed at or below the threshold throughout it (the last reading before the window idle
    too, and one within RECENT: a silent agent is not an idle card)."""
    window = timedelta(minutes=max(rule.for_minutes, 1))
    start = now - window
    held = Allocation.objects.filter(
        start_at__lte=start,
        end_at__gt=now,
        lease__status=LeaseStatus.ACTIVE,
    )
    leases = dict(held.values_list("card_id", "lease_id"))
    verdict = Verdict()
    if not leases:
        return verdict
    busy = Q(utilization_pct__gt=rule.threshold)
    idle = Q(utilization_pct__lte=rule.threshold)
    rows = (
        CardSample.objects.filter(
            card_id__in=held.values("card_id"), at__gte=start - MAX_GAP, at__lte=now
        )
        .values("card_id", "card__node_id")
        .annotate(
            busy=Count("pk", filter=Q(at__gt=start) & busy),
            recent=Count("pk", filter=Q(at__gte=now - RECENT) & idle),
            idle_before=Max("at", filter=Q(at__lte=start) & idle),
            busy_before=Max("at", filter=Q(at__lte=start) & busy),
            peak=Max("utilization_pct", filter=Q(at__gt=start)),
        )
        .order_by()
    )
    for row in rows:
        idle_before, busy_before = row["idle_before"], row["busy_before"]
        covered = idle_before is not None and (busy_before is None or idle_before > busy_before)
        if covered and not row["busy"] and row["recent"]:
            card_id, lease_id = row["card_id"], leases.get(row["card_id"])
            subject = f"lease:{lease_id}:card:{card_id}"
            verdict.breaches[subject] = Finding(
                subject,
                row["peak"],
                card_id=card_id,
                node_id=row["card__node_id"],
                lease_id=lease_id,
            )
    return verdict


POOL_DETECTORS: dict[str, Callable[[AlertRule, datetime], Verdict]] = {
    AlertKind.NODE_SILENT: node_silent,
    AlertKind.FAILURE_RATE: failure_rate,
    AlertKind.CARD_IDLE: card_idle,
}
CARD_RULES = (AlertKind.CARD_HOT, AlertKind.POWER_LIMIT, AlertKind.MEMORY_FULL)


def verdicts(rules: dict[str, AlertRule], now: datetime) -> dict[str, Verdict]:
    """What every enabled rule finds now; a switched-off rule finds everything clear."""
    enabled = {kind: rule for kind, rule in rules.items() if rule.enabled}
    found = card_readings([enabled[k] for k in CARD_RULES if k in enabled], now)
    for kind, detect in POOL_DETECTORS.items():
        if kind in enabled:
            found[kind] = detect(enabled[kind], now)
    for kind in rules:
        found.setdefault(kind, Verdict())
    return found
