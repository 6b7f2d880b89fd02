"""How each lease event is worded for the people told about it, in their language and time zone."""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from django.utils import translation

from leasing.choices import Kind
from leasing.models import Lease, LeaseChange, Notification
from leasing.notify.messages import MESSAGES, holder_zone, person_language, render
from leasing.notify.services import notify, notify_team_leads
from portal.permissions import operators

logger = logging.getLogger(__name__)

# --- lease events, worded here -----------------------------------------------------------

LEGACY_KINDS = {
    "failed": Kind.LEASE_FAILED,
    "approved": Kind.APPROVAL_DECIDED,
    "rejected": Kind.APPROVAL_DECIDED,
}


def _in_language_of(user):
    """Word what follows in *user*'s language (``messages.person_language``, the one rule)."""
    return translation.override(person_language(user))


def notify_lease_event(
    *,
    lease_id: int,
    kind: str,
    now: datetime | None = None,
    lease: Lease | None = None,
    told_start: datetime | None = None,
) -> list[Notification]:
    """Word and send a lease event: to the holder, or to the team's leads for an approval request.

    Takes the kinds above and the older names ``failed``, ``approved``, ``rejected``.
    Idempotent per lease and event (a task that runs twice tells once). A caller that has
    just written the lease passes it (*lease*, with its user, team and model loaded) instead
    of having it read again. *told_start*: the start a queued lease is told
    (``scheduler.eta``, worked out by the caller), else its plan's start.
    """
    if lease is None:
        lease = (
            Lease.objects.select_related("user__profile", "card_model", "team")
            .filter(pk=lease_id)
            .first()
        )
    if lease is None:
        return []
    if kind in (Kind.APPROVAL_REQUESTED, Kind.RELEASE_FAILED):  # told to others, not the holder
        return _notify_lease_event(lease, kind=kind, now=now)
    if told_start is not None:
        lease.estimated_start = told_start  # worded only, never saved
    with _in_language_of(lease.user):  # a worker's own language is the site's, the default
        return _notify_lease_event(lease, kind=kind, now=now)


def _notify_lease_event(lease: Lease, *, kind: str, now: datetime | None) -> list[Notification]:
    """Kept as message "lease" + parameters (``notify.messages._lease``): worded here for email
    and webhooks in the recipient's language and zone, again in the portal for whoever reads."""
    decision = kind if kind in ("approved", "rejected") else ""
    kind = LEGACY_KINDS.get(kind, kind)
    params: dict = {"event": kind, "id": lease.pk, "n": lease.count, "model": lease.card_model.name}
    page = f"/leases/{lease.pk}/"
    key = f"lease:{lease.pk}:{kind}"
    user = lease.user
    data: dict = {"status": lease.status}

    if kind == Kind.APPROVAL_REQUESTED:
        params.update(
            hours=lease.duration / timedelta(hours=1),
            team=lease.team.name,
            user=user.get_username(),
            breaches=lease.approval_breaches or [],
            reason="" if lease.approval_breaches else lease.approval_reason,
        )
        data.update(message="lease", params=params)
        return notify_team_leads(
            team=lease.team,
            kind=kind,
            title="",
            lease=lease,
            url=f"/teams/{lease.team.slug}/",
            data=data,
            now=now,
            key=key,
            word=lambda lead: render(
                "lease", params, language=person_language(lead), zone=holder_zone(lead)
            ),
        )
    if kind == Kind.APPROVAL_DECIDED:
        decision = decision or ("rejected" if lease.status == "rejected" else "approved")
        note = (
            lease.events.filter(kind=decision)
            .order_by("at", "pk")
            .values_list("message", flat=True)
            .last()
            or ""
        )
        params.update(decision=decision, note=note)
        data["decision"] = decision
        key += f":{decision}"
    elif kind == Kind.LEASE_FAILED:
        params["failure"] = lease.failure_reason
    elif kind in (Kind.LEASE_ACTIVE, Kind.LEASE_STARTED_FROM_QUEUE):
        params["end"] = lease.end_at.isoformat()
    elif kind == Kind.LEASE_QUEUED:
        if lease.estimated_start:
            params["estimated_start"] = lease.estimated_start.isoformat()
            data["estimated_start"] = lease.estimated_start
        key += f":{lease.status_changed_at.timestamp() if lease.status_changed_at else ''}"
    elif kind == Kind.LEASE_ENDED:
        params["reason"] = lease.end_reason
        data["reason"] = lease.end_reason
    elif kind == Kind.RELEASE_FAILED:
        params["failure"] = lease.failure_reason
        return _tell_operators_release_failed(lease, key=key, data=data, params=params, now=now)
    elif kind == Kind.CARD_SWAPPED:
        title, body = _card_swapped(lease, data)
        key += f":{data.get('event', '')}"
    else:
        raise ValueError(f"no wording for lease event {kind!r}")
    if kind != Kind.CARD_SWAPPED:
        data.update(message="lease", params=params)
        title, body = render(
            "lease", params, language=person_language(user), zone=holder_zone(user)
        )
    return [
        notify(
            user=user,
            kind=kind,
            title=title,
            body=body,
            lease=lease,
            url=page,
            data=data,
            now=now,
            key=key,
        )
    ]


def _tell_operators_release_failed(
    lease, *, key: str, data: dict, params: dict, now
) -> list[Notification]:
    """Every operator hears of a release the backend failed to do: its cards stay out of the
    pool until one of them retries it or marks it done by hand (docs/operations.md)."""
    sent = []
    for operator in operators():
        title, body = render(
            "lease", params, language=person_language(operator), zone=holder_zone(operator)
        )
        sent.append(
            notify(
                user=operator,
                kind=Kind.RELEASE_FAILED,
                title=title,
                body=body,
                lease=lease,
                url=f"/leases/{lease.pk}/",
                data={**data, "reason": lease.failure_reason, "message": "lease", "params": params},
                now=now,
                key=key,
            )
        )
    return sent


def _card_swapped(lease, data: dict) -> tuple[str, str]:
    """A faulty card was replaced: the last ``card_replaced`` event says which by which. Kept
    as message + parameters, so the portal words it again for whoever reads it."""
    event = lease.events.filter(kind="card_replaced").order_by("at", "pk").last()
    swap = (event.data or {}) if event is not None else {}
    data.update(event=event.pk if event is not None else "", **swap)
    params = {
        "id": lease.pk,
        "old": swap.get("from_card", swap.get("from", "?")),
        "new": swap.get("to_card", "?"),
        "n": lease.count,
    }
    data.update(message="card_swapped", params=params)
    return MESSAGES["card_swapped"](params)


# --- pending lease changes (extend / resize above a member's limit) ---------------------


def notify_change(*, change_id: int, event: str, now: datetime | None = None) -> list:
    """Tell the leads a change waits for them (*event* ``requested``), or the holder what was
    decided (``approved``, ``rejected``, ``lapsed``). Idempotent per change and event."""
    change = (
        LeaseChange.objects.select_related(
            "lease__team",
            "lease__card_model",
            "lease__user__profile",
            "card_model",
            "requested_by",
        )
        .filter(pk=change_id)
        .first()
    )
    if change is None:
        return []
    lease = change.lease
    key = f"change:{change.pk}:{event}"
    params = {
        "id": lease.pk,
        "change": change.pk,
        "kind": change.kind,
        "minutes": change.minutes,
        "count": change.count,
        "model": (change.card_model or lease.card_model).name,
        "user": change.requested_by.get_username(),
        "event": event,
        "text": change.reason if event == "requested" else change.note,
        "breaches": change.breaches if event == "requested" else [],
    }
    data = {"change": change.pk, "kind": change.kind, "decision": event}
    data.update(message="change", params=params)
    if event == "requested":
        return notify_team_leads(
            team=lease.team,
            kind=Kind.APPROVAL_REQUESTED,
            title="",
            lease=lease,
            url=f"/teams/{lease.team.slug}/",
            data=data,
            now=now,
            key=key,
            word=lambda lead: render(
                "change", params, language=person_language(lead), zone=holder_zone(lead)
            ),
        )
    with _in_language_of(lease.user):
        title, body = MESSAGES["change"](params)
    return [
        notify(
            user=lease.user,
            kind=Kind.APPROVAL_DECIDED,
            title=title,
            body=body,
            lease=lease,
            url=f"/leases/{lease.pk}/",
            data=data,
            now=now,
            key=key,
        )
    ]
