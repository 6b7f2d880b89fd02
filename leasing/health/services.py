"""Pool health: every write — evaluating the rules into alerts, keeping hot or silent cards
out of placement, acknowledging and silencing, the operators' thresholds.

``health_evaluate`` (beat, every CARDPOOL_HEALTH_SECONDS) is the alert lifecycle: an alert
opens once per rule and subject (a partial unique constraint holds it when two passes race),
is updated while the condition lasts, and resolves by itself when the readings say so. The
operators are told when one opens and when it resolves, on every channel they chose, in their
language; the holders of leases on an affected card are told what it means for them. Then
``cards_health_sync`` sets ``Card.health`` from the lasting alerts, which is what the one
usable-card rule (``Card.objects.usable``) reads.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from django.core.exceptions import PermissionDenied, ValidationError
from django.db import IntegrityError, transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from inventory.models import Card, Node
from leasing.choices import HOLDING_STATES, LASTING_ALERT_STATES, AlertKind, AlertStatus, Kind
from leasing.health import rules as health_rules
from leasing.health.rules import KEEPS_OUT, TOLD_TO_HOLDERS, Finding
from leasing.models import Alert, AlertRule, Allocation, Lease
from leasing.notify.messages import notice_send, notice_to
from portal.audit import audit
from portal.permissions import is_operator, operators

logger = logging.getLogger(__name__)

MAX_SILENCE_MINUTES = 7 * 24 * 60
ALERTS_PAGE = "/alerts/"


# --- evaluation --------------------------------------------------------------------------


def _threshold_text(rule: AlertRule, card: Card | None) -> str:
    t = f"{rule.threshold:g}"
    if rule.kind == AlertKind.CARD_HOT:
        return f"{t} °C, {rule.for_minutes} min"
    if rule.kind == AlertKind.POWER_LIMIT:
        tdp = card.card_model.tdp_w if card is not None else None
        return f"{t} % × {tdp} W, {rule.for_minutes} min" if tdp else f"{t} %"
    if rule.kind == AlertKind.MEMORY_FULL:
        return f"{t} %, {rule.for_minutes} min"
    if rule.kind == AlertKind.NODE_SILENT:
        return f"{rule.for_minutes} min"
    return f"{t} %, {rule.for_minutes} min"


def _params(
    rule: AlertRule, finding: Finding, cards: dict[int, Card], nodes: dict[int, Node]
) -> dict:
    card = cards.get(finding.card_id) if finding.card_id else None
    node = nodes.get(finding.node_id) if finding.node_id else None
    params: dict = {
        "rule": rule.kind,
        "severity": rule.severity,
        "threshold_text": _threshold_text(rule, card),
    }
    if card is not None:
        params.update(
            card=str(card), model=card.card_model.name, node=card.node.hostname, index=card.index
        )
    elif node is not None:
        params["node"] = node.hostname
    if finding.lease_id:
        params["lease"] = finding.lease_id
    return params


def _silences(now: datetime) -> dict[tuple[str, str], Alert]:
    """The latest silence still running per rule and subject: a new alert on a silenced
    subject (a flapping card) inherits it and tells nobody."""
    rows = Alert.objects.filter(silenced_until__gt=now).order_by("silenced_until")
    return {(a.kind, a.subject): a for a in rows}


def _open(
    rule: AlertRule, finding: Finding, params: dict, silence: Alert | None, now
) -> Alert | None:
    try:
        with transaction.atomic():
            return Alert.objects.create(
                kind=rule.kind,
                severity=rule.severity,
                subject=finding.subject,
                card_id=finding.card_id,
                node_id=finding.node_id,
                lease_id=finding.lease_id,
                threshold=rule.threshold,
                value=finding.value,
                peak=finding.value,
                params=params,
                opened_at=now,
                last_seen_at=now,
                silenced_until=silence.silenced_until if silence else None,
                silenced_by_id=silence.silenced_by_id if silence else None,
            )
    except IntegrityError:  # another pass opened it first
        return None


def _told(alert: Alert, now: datetime) -> dict:
    return {**alert.params, "id": alert.pk, "value": alert.value, "at": alert.opened_at}


def _tell_operators(alert: Alert, message: str, key: str, params: dict) -> None:
    for operator in operators():
        notice_to(
            operator,
            kind=Kind.POOL_ALERT,
            message=message,
            params=params,
            key=key,
            url=f"{ALERTS_PAGE}?status=&kind={alert.kind}",
        )


def _holders(alert: Alert, now: datetime):
    held = Allocation.objects.filter(
        start_at__lte=now, end_at__gt=now, lease__status__in=HOLDING_STATES
    )
    if alert.card_id is not None:
        held = held.filter(card_id=alert.card_id)
    elif alert.node_id is not None:
        held = held.filter(card__node_id=alert.node_id)
    else:
        return Lease.objects.none()
    return (
        Lease.objects.filter(pk__in=held.values("lease_id"))
        .select_related("user__profile", "team")
        .order_by("pk")
    )


def _tell_opened(alert: Alert, now: datetime) -> None:
    """Operators hear of it once; the holders of leases on its card or node too, once each."""
    params = _told(alert, now)
    _tell_operators(alert, "alert_opened", f"alert:{alert.pk}:opened", params)
    if alert.kind in TOLD_TO_HOLDERS:
        for lease in _holders(alert, now):
            notice_send(
                lease,
                kind=Kind.CARD_HEALTH,
                message="holder_card_health",
                params={**params, "id": lease.pk, "alert": alert.pk},
                key=f"alert:{alert.pk}:lease:{lease.pk}",
            )
    Alert.objects.filter(pk=alert.pk).update(notified=True)


def _tell_safely(alert: Alert, now: datetime) -> None:
    """``_tell_opened`` in its own transaction: notices that cannot be written leave the alert
    standing un-notified, and the next pass tries again (one bad recipient never stops the
    rules)."""
    try:
        with transaction.atomic():
            _tell_opened(alert, now)
    except Exception:
        logger.exception("alert %s: notices not written; the next pass retries", alert.pk)


def _resolve(alert: Alert, now: datetime, *, by=None) -> bool:
    """Lasting → resolved (compare-and-set); operators told once, unless silenced."""
    with transaction.atomic():
        if not Alert.objects.filter(pk=alert.pk, status__in=LASTING_ALERT_STATES).update(
            status=AlertStatus.RESOLVED, resolved_at=now
        ):
            return False
        silenced = alert.silenced_until is not None and alert.silenced_until > now
        if alert.notified and not silenced:
            params = {**_told(alert, now), "resolved_at": now}
            _tell_operators(alert, "alert_resolved", f"alert:{alert.pk}:resolved", params)
        if by is not None:
            audit(actor=by, action="alert.resolve", target=f"alert {alert.pk}", kind=alert.kind)
    return True


def health_evaluate(*, now: datetime | None = None) -> dict[str, int]:
    """Run every rule once over the readings: open, update and resolve alerts, tell people,
    and set the cards' health. Safe to run twice or at the same time."""
    now = now or timezone.now()
    rules = health_rules.rules_in_force()
    found = health_rules.verdicts(rules, now)
    lasting = {
        (a.kind, a.subject): a for a in Alert.objects.filter(status__in=LASTING_ALERT_STATES)
    }
    new = [
        (kind, finding)
        for kind, verdict in found.items()
        for subject, finding in verdict.breaches.items()
        if (kind, subject) not in lasting
    ]
    cards = Card.objects.select_related("node", "card_model").in_bulk(
        {f.card_id for _k, f in new if f.card_id}
    )
    nodes = Node.objects.in_bulk({f.node_id for _k, f in new if f.node_id})
    silences = _silences(now) if new else {}
    result = {"opened": 0, "updated": 0, "resolved": 0}
    for kind, finding in new:
        silence = silences.get((kind, finding.subject))
        alert = _open(
            rules[kind], finding, _params(rules[kind], finding, cards, nodes), silence, now
        )
        if alert is None:
            continue
        result["opened"] += 1
        if silence is None:
            _tell_safely(alert, now)
    changed = []
    for (kind, subject), alert in lasting.items():
        verdict = found.get(kind)
        finding = verdict.breaches.get(subject) if verdict else None
        if finding is not None:
            alert.value = finding.value
            if finding.value is not None:
                alert.peak = max(alert.peak or finding.value, finding.value)
            alert.last_seen_at = now
            changed.append(alert)
        elif (
            verdict is None
            or not rules[kind].enabled
            or verdict.clear is None
            or subject in verdict.clear
        ):
            result["resolved"] += _resolve(alert, now)
        elif not alert.notified and not (alert.silenced_until and alert.silenced_until > now):
            _tell_safely(alert, now)
    Alert.objects.bulk_update(changed, ["value", "peak", "last_seen_at"], batch_size=500)
    result["updated"] = len(changed)
    for alert in changed:
        if not alert.notified and not (alert.silenced_until and alert.silenced_until > now):
            _tell_safely(alert, now)
    result.update(cards_health_sync())
    return result


def cards_health_sync() -> dict[str, int]:
    """``Card.health`` from the lasting alerts of the rules that keep cards out: a silent
    node's cards are unknown, a hot card is hot, every other card is ok. Three statements."""
    lasting = Alert.objects.filter(status__in=LASTING_ALERT_STATES, kind__in=KEEPS_OUT)
    silent = lasting.filter(kind=AlertKind.NODE_SILENT).values("node_id")
    hot = lasting.filter(kind=AlertKind.CARD_HOT).values("card_id")
    unknown = Card.objects.filter(node_id__in=silent).exclude(health=Card.Health.UNKNOWN)
    made_unknown = unknown.update(health=Card.Health.UNKNOWN)
    made_hot = (
        Card.objects.filter(pk__in=hot)
        .exclude(node_id__in=silent)
        .exclude(health=Card.Health.HOT)
        .update(health=Card.Health.HOT)
    )
    recovered = (
        Card.objects.exclude(health=Card.Health.OK)
        .exclude(node_id__in=silent)
        .exclude(pk__in=hot)
        .update(health=Card.Health.OK)
    )
    return {"cards_unknown": made_unknown, "cards_hot": made_hot, "cards_recovered": recovered}


# --- operators' actions ------------------------------------------------------------------


def _operator(user) -> None:
    if not is_operator(user):
        raise PermissionDenied(_("Only operators can do this."))


def alert_acknowledge(*, alert: Alert, user, now: datetime | None = None) -> Alert:
    """An operator takes the alert on: it stays until it resolves, marked as theirs."""
    _operator(user)
    now = now or timezone.now()
    with transaction.atomic():
        if not Alert.objects.filter(pk=alert.pk, status=AlertStatus.OPEN).update(
            status=AlertStatus.ACKNOWLEDGED, acknowledged_at=now, acknowledged_by=user
        ):
            alert.refresh_from_db()
            raise ValidationError(
                _("This alert is already %(status)s.") % {"status": alert.get_status_display()}
            )
        audit(actor=user, action="alert.acknowledge", target=f"alert {alert.pk}", kind=alert.kind)
    alert.refresh_from_db()
    return alert


def alert_silence(*, alert: Alert, user, minutes: int, now: datetime | None = None) -> Alert:
    """Tell nobody about this rule on this subject for *minutes* (0 lifts the silence): the
    alert itself still opens, shows and keeps its card out of placement."""
    _operator(user)
    if isinstance(minutes, bool) or not isinstance(minutes, int):
        raise ValidationError({"minutes": [_("Give a whole number of minutes.")]})
    if not 0 <= minutes <= MAX_SILENCE_MINUTES:
        raise ValidationError(
            {"minutes": [_("Silence for 0 to %(max)s minutes.") % {"max": MAX_SILENCE_MINUTES}]}
        )
    now = now or timezone.now()
    until = now + timedelta(minutes=minutes) if minutes else None
    with transaction.atomic():
        Alert.objects.filter(pk=alert.pk).update(
            silenced_until=until, silenced_by=user if minutes else None
        )
        audit(
            actor=user,
            action="alert.silence" if minutes else "alert.unsilence",
            target=f"alert {alert.pk}",
            kind=alert.kind,
            until=until,
        )
    alert.refresh_from_db()
    return alert


def alert_rule_set(
    *,
    user,
    kind: str,
    threshold: float,
    for_minutes: int,
    severity: str,
    enabled: bool = True,
) -> AlertRule:
    """An operator's threshold for one rule (used from the next evaluation on)."""
    _operator(user)
    rule = AlertRule(
        kind=kind, threshold=threshold, for_minutes=for_minutes, severity=severity, enabled=enabled
    )
    rule.full_clean(exclude=["kind"], validate_unique=False)
    if kind not in AlertKind.values:
        raise ValidationError({"kind": [_("Unknown rule.")]})
    with transaction.atomic():
        saved, _created = AlertRule.objects.update_or_create(
            kind=kind,
            defaults={
                "threshold": threshold,
                "for_minutes": for_minutes,
                "severity": severity,
                "enabled": enabled,
            },
        )
        audit(
            actor=user,
            action="alert_rule.set",
            target=kind,
            threshold=threshold,
            for_minutes=for_minutes,
            severity=severity,
            enabled=enabled,
        )
    return saved
