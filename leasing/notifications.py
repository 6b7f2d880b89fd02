"""Telling people what happened: the in-app centre, email and webhooks, through one entry point.

``notify()`` writes the in-app :class:`Notification` and, in the same transaction, one
:class:`Delivery` row per outside channel the recipient wants for that kind of event
(email; each matching active webhook). After commit each delivery is queued on
``leasing.tasks_notify.deliver``, which sends it, records every attempt and retries with
backoff; ``deliveries_sweep`` re-queues any whose task was lost. See docs/notifications.md.

Who gets what:

- In the portal: always.
- Email: the user's choice per kind; by default for warnings, failures, approvals and
  budget alerts.
- The user's own webhooks: when the user wants webhooks for the kind (default: yes) and the
  hook listens to it (a hook with no events chosen hears every event).
- A team's webhooks (a group robot in the team's chat): team events — approval requests
  and budget alerts, sent to the leads with ``notify_team_leads`` — go to every team hook
  that listens to them (no events chosen: all team events), once per event however many
  leads the team has. A member's lease event goes to the team hooks of the lease's team
  only when a hook names that event explicitly (e.g. a team that wants preemption
  warnings in its group).
"""

from __future__ import annotations

import json
import logging
import smtplib
from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

from django.conf import settings
from django.core.exceptions import PermissionDenied, ValidationError
from django.core.mail import EmailMessage, get_connection
from django.core.serializers.json import DjangoJSONEncoder
from django.core.validators import URLValidator
from django.db import models, transaction
from django.db.models import Q, QuerySet
from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from leasing import webhooks
from leasing.models import (
    Channel,
    Delivery,
    Lease,
    Notification,
    NotificationPreference,
    Webhook,
)
from portal.models import Membership, Team
from portal.permissions import is_operator

logger = logging.getLogger(__name__)


class Kind(models.TextChoices):
    """The events people can be told about (``Notification.kind``)."""

    LEASE_ACTIVE = "lease_active", gettext_lazy("Lease active")
    LEASE_QUEUED = "lease_queued", gettext_lazy("Lease queued")
    LEASE_STARTED_FROM_QUEUE = (
        "lease_started_from_queue",
        gettext_lazy("Lease started from the queue"),
    )
    LEASE_EXPIRING = "lease_expiring", gettext_lazy("Lease ending soon")
    LEASE_ENDED = "lease_ended", gettext_lazy("Lease ended")
    LEASE_FAILED = "lease_failed", gettext_lazy("Lease failed")
    IDLE_WARNING = "idle_warning", gettext_lazy("Cards idle")
    PREEMPTION_WARNING = "preemption_warning", gettext_lazy("Preemption warning")
    DRAIN_WARNING = "drain_warning", gettext_lazy("Node maintenance")
    APPROVAL_REQUESTED = "approval_requested", gettext_lazy("Approval requested")
    APPROVAL_DECIDED = "approval_decided", gettext_lazy("Approval decided")
    BUDGET_80 = "budget_80", gettext_lazy("Team budget at 80%")
    BUDGET_100 = "budget_100", gettext_lazy("Team budget used up")


# A test message from the settings page; not an event anyone subscribes to.
WEBHOOK_TEST = "webhook_test"
KIND_LABELS = {**dict(Kind.choices), WEBHOOK_TEST: gettext_lazy("Webhook test")}

EMAIL_BY_DEFAULT = frozenset(
    {
        Kind.LEASE_EXPIRING,
        Kind.LEASE_FAILED,
        Kind.IDLE_WARNING,
        Kind.PREEMPTION_WARNING,
        Kind.DRAIN_WARNING,
        Kind.APPROVAL_REQUESTED,
        Kind.APPROVAL_DECIDED,
        Kind.BUDGET_80,
        Kind.BUDGET_100,
    }
)
# Events about a team rather than one person's lease: they go to its leads and team hooks.
TEAM_KINDS = frozenset({Kind.APPROVAL_REQUESTED, Kind.BUDGET_80, Kind.BUDGET_100})
SEVERITY = {
    Kind.LEASE_ACTIVE: "success",
    Kind.LEASE_STARTED_FROM_QUEUE: "success",
    Kind.LEASE_EXPIRING: "warning",
    Kind.IDLE_WARNING: "warning",
    Kind.DRAIN_WARNING: "warning",
    Kind.APPROVAL_REQUESTED: "warning",
    Kind.BUDGET_80: "warning",
    Kind.LEASE_FAILED: "danger",
    Kind.PREEMPTION_WARNING: "danger",
    Kind.BUDGET_100: "danger",
}
# Channels a user may switch per kind; in the portal is always on.
OPTIONAL_CHANNELS = (Channel.EMAIL, Channel.WEBHOOK)

MAX_ATTEMPTS = 6
RETRY_BASE_SECONDS = 30
RETRY_CAP_SECONDS = 600
# A pending delivery nobody has tried for this long lost its task (broker or worker died).
STALLED_FIRST = timedelta(minutes=5)
STALLED_RETRY = timedelta(seconds=RETRY_CAP_SECONDS) + timedelta(minutes=5)
# Longer than an attempt can take (the webhook timeout), shorter than the first backoff.
IN_FLIGHT = timedelta(seconds=20)
EMAIL_TIMEOUT = 10
BATCH = 500
MAX_WEBHOOKS_PER_OWNER = 20
RESPONSE_KEEP_CHARS = 2000
ERROR_KEEP_CHARS = 1000


# --- preferences -------------------------------------------------------------------------


def default_channels(kind: str) -> set[str]:
    """In the portal always; email for warnings, failures, approvals and budgets; webhooks."""
    channels = {Channel.INAPP.value, Channel.WEBHOOK.value}
    if kind in EMAIL_BY_DEFAULT:
        channels.add(Channel.EMAIL.value)
    return channels


def preferences_for(user) -> dict[str, set[str]]:
    """Every kind with the channels the user gets it on (their choice, else the default)."""
    chosen = dict(NotificationPreference.objects.filter(user=user).values_list("kind", "channels"))
    return {
        kind: ({Channel.INAPP.value} | set(chosen[kind]))
        if kind in chosen
        else default_channels(kind)
        for kind in Kind.values
    }


def channels_for(user, kind: str) -> set[str]:
    if kind == WEBHOOK_TEST:
        return {Channel.INAPP.value}
    row = NotificationPreference.objects.filter(user=user, kind=kind).first()
    if row is None:
        return default_channels(kind)
    return {Channel.INAPP.value} | set(row.channels)


def preferences_set(*, user, choices: Mapping[str, Iterable[str]]) -> None:
    """Save which outside channels the user wants per kind (in the portal is always on).

    A choice equal to the default is stored as no row, so a later change of the defaults
    reaches everyone who never changed that kind.
    """
    unknown = set(choices) - set(Kind.values)
    if unknown:
        raise ValidationError(_("Unknown event: %(kinds)s") % {"kinds": ", ".join(sorted(unknown))})
    with transaction.atomic():
        for kind, wanted in choices.items():
            channels = set(wanted) - {Channel.INAPP.value}
            if channels - set(OPTIONAL_CHANNELS):
                raise ValidationError(_("Unknown channel."))
            full = channels | {Channel.INAPP.value}
            if full == default_channels(kind):
                NotificationPreference.objects.filter(user=user, kind=kind).delete()
            else:
                NotificationPreference.objects.update_or_create(
                    user=user, kind=kind, defaults={"channels": sorted(full)}
                )


# --- notify ------------------------------------------------------------------------------


def _absolute(url: str) -> str:
    return f"{settings.SITE_URL}{url}" if url.startswith("/") else url


def _clean_data(data: Mapping | None, key: str) -> dict:
    clean = json.loads(json.dumps(dict(data or {}), cls=DjangoJSONEncoder))
    if key:
        clean["key"] = key
    return clean


def _hears(hook: Webhook, kind: str, *, by_default: bool) -> bool:
    """A hook with no events chosen hears what *by_default* says; else the events it names."""
    return kind in hook.kinds if hook.kinds else by_default


def _hooks_for(user, kind: str, channels: set[str], team: Team | None, team_event: bool):
    hooks: list[Webhook] = []
    if Channel.WEBHOOK in channels:
        hooks += [
            h
            for h in Webhook.objects.filter(user=user, active=True).order_by("pk")
            if _hears(h, kind, by_default=True)
        ]
    if team is not None:
        hooks += [
            h
            for h in Webhook.objects.filter(team=team, active=True).order_by("pk")
            if _hears(h, kind, by_default=team_event and kind in TEAM_KINDS)
        ]
    return hooks


def _enqueue(delivery_ids: list[int]) -> None:
    from leasing.enqueue import enqueue
    from leasing.tasks_notify import deliver

    for delivery_id in delivery_ids:
        # The row is durable: deliveries_sweep sends it once the broker is back.
        enqueue(deliver, delivery_id)


def _create(
    *,
    user,
    kind: str,
    title: str,
    body: str,
    lease: Lease | None,
    url: str,
    data: Mapping | None,
    now: datetime | None,
    key: str,
    team: Team | None,
    team_event: bool,
) -> Notification:
    now = now or timezone.now()
    if len(url) > 300:
        raise ValueError("notification url longer than 300 characters")
    with transaction.atomic():
        if key:
            existing = Notification.objects.filter(user=user, kind=kind, data__key=key).first()
            if existing is not None:
                return existing
        notification = Notification.objects.create(
            user=user,
            lease=lease,
            kind=kind,
            title=title[:200],
            body=body,
            url=url,
            data=_clean_data(data, key),
            created_at=now,
        )
        channels = channels_for(user, kind)
        ids = []
        if Channel.EMAIL in channels and user.email:
            ids.append(
                Delivery.objects.create(
                    notification=notification, channel=Channel.EMAIL, created_at=now
                ).pk
            )
        for hook in _hooks_for(user, kind, channels, team, team_event):
            ids.append(
                Delivery.objects.create(
                    notification=notification, channel=Channel.WEBHOOK, webhook=hook, created_at=now
                ).pk
            )
        if ids:
            transaction.on_commit(lambda: _enqueue(ids))
    return notification


def notify(
    *,
    user,
    kind: str,
    title: str,
    body: str = "",
    lease: Lease | None = None,
    url: str = "",
    data: Mapping | None = None,
    now: datetime | None = None,
    key: str = "",
) -> Notification:
    """Tell *user* about an event: in the portal now, by email and webhooks after commit.

    *url* is a site path (``/leases/5/#extend``) or an absolute URL; *data* is kept with the
    notification and sent in the generic webhook. A *key* makes the call idempotent: a second
    call with the same user, kind and key returns the first notification and sends nothing.
    Team webhooks of the lease's team hear the event only if they name it explicitly.
    """
    return _create(
        user=user,
        kind=kind,
        title=title,
        body=body,
        lease=lease,
        url=url,
        data=data,
        now=now,
        key=key,
        team=lease.team if lease is not None else None,
        team_event=False,
    )


def team_leads(team: Team) -> list:
    return [
        m.user
        for m in Membership.objects.filter(team=team, role=Membership.Role.LEAD)
        .select_related("user")
        .order_by("user_id")
    ]


def notify_team_leads(
    *,
    team: Team,
    kind: str,
    title: str,
    body: str = "",
    lease: Lease | None = None,
    url: str = "",
    data: Mapping | None = None,
    now: datetime | None = None,
    key: str = "",
) -> list[Notification]:
    """Tell each lead of *team*; the team's webhooks get the event once (with the first lead's).

    For team events: approval requests, budget alerts. A team without leads hears nothing.
    """
    made = []
    for i, lead in enumerate(team_leads(team)):
        made.append(
            _create(
                user=lead,
                kind=kind,
                title=title,
                body=body,
                lease=lease,
                url=url,
                data=data,
                now=now,
                key=key,
                team=team if i == 0 else None,
                team_event=True,
            )
        )
    return made


# --- lease events, worded here -----------------------------------------------------------

LEGACY_KINDS = {
    "failed": Kind.LEASE_FAILED,
    "approved": Kind.APPROVAL_DECIDED,
    "rejected": Kind.APPROVAL_DECIDED,
}


def _local(dt: datetime | None, user) -> str:
    if dt is None:
        return "—"
    name = getattr(getattr(user, "profile", None), "timezone", "") or settings.TIME_ZONE
    try:
        zone = ZoneInfo(name)
    except (KeyError, ValueError):
        zone = ZoneInfo(settings.TIME_ZONE)
    return f"{timezone.localtime(dt, zone):%Y-%m-%d %H:%M} ({zone.key})"


def _hours(delta: timedelta) -> str:
    return f"{delta / timedelta(hours=1):.1f}".removesuffix(".0")


def notify_lease_event(
    *, lease_id: int, kind: str, now: datetime | None = None
) -> list[Notification]:
    """Word and send a lease event: to the holder, or to the team's leads for an approval request.

    Takes the kinds above and the older names ``failed``, ``approved``, ``rejected``.
    Idempotent per lease and event (a task that runs twice tells once).
    """
    lease = (
        Lease.objects.select_related("user__profile", "card_model", "team")
        .filter(pk=lease_id)
        .first()
    )
    if lease is None:
        return []
    decision = kind if kind in ("approved", "rejected") else ""
    kind = LEGACY_KINDS.get(kind, kind)
    what = {"id": lease.pk, "n": lease.count, "model": lease.card_model.name}
    page = f"/leases/{lease.pk}/"
    key = f"lease:{lease.pk}:{kind}"
    user = lease.user
    data: dict = {"status": lease.status}

    if kind == Kind.APPROVAL_REQUESTED:
        body = _("%(n)s × %(model)s for %(hours)s h, charged to %(team)s.") % {
            **what,
            "hours": _hours(lease.duration),
            "team": lease.team.name,
        }
        if lease.approval_reason:
            body += "\n" + lease.approval_reason
        return notify_team_leads(
            team=lease.team,
            kind=kind,
            title=_("%(user)s asks for approval: lease %(id)s")
            % {**what, "user": user.get_username()},
            body=body,
            lease=lease,
            url=f"/teams/{lease.team.slug}/",
            data=data,
            now=now,
            key=key,
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
        title = (
            _("Lease %(id)s approved") if decision == "approved" else _("Lease %(id)s rejected")
        ) % what
        body = note
        data["decision"] = decision
        key += f":{decision}"
    elif kind == Kind.LEASE_FAILED:
        title = _("Lease %(id)s failed") % what
        body = lease.failure_reason
    elif kind == Kind.LEASE_ACTIVE:
        title = _("Lease %(id)s is active") % what
        body = _("%(n)s × %(model)s are yours until %(end)s.") % {
            **what,
            "end": _local(lease.end_at, user),
        }
    elif kind == Kind.LEASE_STARTED_FROM_QUEUE:
        title = _("Lease %(id)s has started") % what
        body = _("Your wait is over: %(n)s × %(model)s are yours until %(end)s.") % {
            **what,
            "end": _local(lease.end_at, user),
        }
    elif kind == Kind.LEASE_QUEUED:
        title = _("Lease %(id)s is queued") % what
        if lease.estimated_start:
            body = _("Estimated start: %(at)s.") % {"at": _local(lease.estimated_start, user)}
            data["estimated_start"] = lease.estimated_start
        else:
            body = _("No estimated start yet: the cards it waits for have no known end.")
        key += f":{lease.status_changed_at.timestamp() if lease.status_changed_at else ''}"
    elif kind == Kind.LEASE_ENDED:
        title = _("Lease %(id)s has ended") % what
        body = _("Reason: %(reason)s.") % {"reason": lease.get_end_reason_display() or "—"}
        data["reason"] = lease.end_reason
    else:
        raise ValueError(f"no wording for lease event {kind!r}")
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


# --- the notification centre -------------------------------------------------------------


def notifications_of(user, *, unread: bool = False) -> QuerySet[Notification]:
    notes = Notification.objects.filter(user=user)
    return notes.filter(read_at__isnull=True) if unread else notes


def unread_count(user) -> int:
    return notifications_of(user, unread=True).count()


def notification_read(*, user, notification_id: int, now: datetime | None = None) -> Notification:
    """Mark one of the user's own notifications read (someone else's: DoesNotExist)."""
    notification = Notification.objects.get(pk=notification_id, user=user)
    if notification.read_at is None:
        notification.read_at = now or timezone.now()
        Notification.objects.filter(pk=notification.pk, read_at__isnull=True).update(
            read_at=notification.read_at
        )
    return notification


def notifications_read_all(*, user, now: datetime | None = None) -> int:
    return notifications_of(user, unread=True).update(read_at=now or timezone.now())


# --- webhooks ----------------------------------------------------------------------------


def teams_managed_by(user) -> QuerySet[Team]:
    """Teams whose webhooks the user may manage: those they lead (operators: all)."""
    if is_operator(user):
        return Team.objects.order_by("slug")
    led = Membership.objects.filter(user=user, role=Membership.Role.LEAD).values("team_id")
    return Team.objects.filter(pk__in=led).order_by("slug")


def webhooks_managed_by(user) -> QuerySet[Webhook]:
    return Webhook.objects.filter(Q(user=user) | Q(team__in=teams_managed_by(user))).select_related(
        "team"
    )


def _may_manage(user, hook: Webhook) -> bool:
    if hook.user_id is not None:
        return hook.user_id == user.pk
    return teams_managed_by(user).filter(pk=hook.team_id).exists()


def webhook_create(
    *,
    user,
    name: str,
    url: str,
    format: str = Webhook.Format.GENERIC,
    secret: str = "",
    kinds: Iterable[str] = (),
    team: Team | None = None,
) -> Webhook:
    """Add a webhook for the user, or — for a lead of *team* or an operator — for the team."""
    if team is not None and not teams_managed_by(user).filter(pk=team.pk).exists():
        raise PermissionDenied(_("Only a lead of the team may manage its webhooks."))
    kinds = sorted(set(kinds))
    errors: dict[str, list[str]] = {}
    if set(kinds) - set(Kind.values):
        errors["kinds"] = [_("Unknown event.")]
    try:
        URLValidator(schemes=["http", "https"])(url)
    except ValidationError:
        errors["url"] = [_("Enter the full http:// or https:// address of the webhook.")]
    else:
        try:
            webhooks.check_destination(url)
        except webhooks.BlockedDestination:
            errors["url"] = [
                _(
                    "This address is inside the network (loopback, private or link-local); "
                    "webhooks may not reach it unless an operator allows it."
                )
            ]
    if format == Webhook.Format.WECOM and secret:
        errors["secret"] = [_("WeCom group robots are not signed: leave the secret empty.")]
    owner = Q(team=team) if team is not None else Q(user=user)
    if Webhook.objects.filter(owner).count() >= MAX_WEBHOOKS_PER_OWNER:
        errors["name"] = [
            _("At most %(n)s webhooks per owner: delete one first.") % {"n": MAX_WEBHOOKS_PER_OWNER}
        ]
    if errors:
        raise ValidationError(errors)
    hook = Webhook(
        user=None if team is not None else user,
        team=team,
        name=name.strip(),
        url=url.strip(),
        format=format,
        secret=secret.strip(),
        kinds=kinds,
    )
    hook.full_clean()
    hook.save()
    return hook


def webhook_delete(*, user, webhook: Webhook) -> None:
    if not _may_manage(user, webhook):
        raise PermissionDenied(_("You may not change this webhook."))
    webhook.delete()


def webhook_test(*, user, webhook: Webhook, now: datetime | None = None) -> Delivery:
    """Send a test message to one webhook (recorded like any delivery, shown on the page)."""
    if not _may_manage(user, webhook):
        raise PermissionDenied(_("You may not change this webhook."))
    now = now or timezone.now()
    with transaction.atomic():
        notification = Notification.objects.create(
            user=user,
            kind=WEBHOOK_TEST,
            title=_("Test message from Cardpool"),
            body=_("If you can read this, the webhook “%(name)s” works.") % {"name": webhook.name},
            url="/notifications/settings/",
            created_at=now,
            read_at=now,
        )
        delivery = Delivery.objects.create(
            notification=notification, channel=Channel.WEBHOOK, webhook=webhook, created_at=now
        )
        transaction.on_commit(lambda: _enqueue([delivery.pk]))
    return delivery


# --- sending -----------------------------------------------------------------------------


def retry_delay(attempt: int) -> int:
    """Seconds to wait after failed attempt *attempt* (1-based): 30, 60, 120, 240, 480, cap 600."""
    return min(RETRY_BASE_SECONDS * 2 ** (attempt - 1), RETRY_CAP_SECONDS)


def _severity(notification: Notification) -> str:
    if notification.kind == Kind.APPROVAL_DECIDED:
        return "success" if notification.data.get("decision") == "approved" else "warning"
    return SEVERITY.get(notification.kind, "info")


def public_data(notification: Notification) -> dict:
    """The notification's data without our bookkeeping (the idempotency key)."""
    return {k: v for k, v in notification.data.items() if k != "key"}


def message_for(notification: Notification) -> webhooks.Message:
    return webhooks.Message(
        event=notification.kind,
        title=notification.title,
        body=notification.body,
        url=_absolute(notification.url),
        lease=notification.lease_id,
        id=notification.pk,
        data=public_data(notification),
        open_label=_("Open in Cardpool"),
        severity=_severity(notification),
    )


def _send_email(notification: Notification) -> tuple[webhooks.Verdict, webhooks.HttpResponse]:
    address = notification.user.email
    if not address:
        return webhooks.Verdict(
            ok=False, error="the user has no email address"
        ), webhooks.HttpResponse(None)
    text = notification.body.strip()
    if notification.url:
        text += f"\n\n{_absolute(notification.url)}"
    text += "\n\n-- \n" + _("Choose what you are told, and where: %(url)s") % {
        "url": _absolute("/notifications/settings/")
    }
    # A hung SMTP server must not hold the worker (Django's default is no timeout).
    connection = get_connection(timeout=getattr(settings, "EMAIL_TIMEOUT", None) or EMAIL_TIMEOUT)
    mail = EmailMessage(
        subject=f"[Cardpool] {notification.title}",
        body=text.strip(),
        to=[address],
        connection=connection,
    )
    try:
        mail.send(fail_silently=False)
    except smtplib.SMTPRecipientsRefused as exc:
        return webhooks.Verdict(ok=False, error=f"recipient refused: {exc}"), webhooks.HttpResponse(
            None
        )
    except (smtplib.SMTPException, OSError) as exc:
        return webhooks.Verdict(
            ok=False, retry=True, error=f"{type(exc).__name__}: {exc}"
        ), webhooks.HttpResponse(None)
    return webhooks.Verdict(ok=True), webhooks.HttpResponse(None)


def _send_webhook(
    notification: Notification, hook: Webhook, delivery_id: int, now: datetime
) -> tuple[webhooks.Verdict, webhooks.HttpResponse]:
    request = webhooks.build(
        hook.format, url=hook.url, secret=hook.secret, message=message_for(notification), now=now
    )
    headers = {**request.headers, "X-Cardpool-Delivery": str(delivery_id)}
    response = webhooks.http_post(webhooks.HttpRequest(request.url, request.body, headers))
    return webhooks.judge(hook.format, response), response


def delivery_attempt(*, delivery_id: int, now: datetime | None = None) -> int | None:
    """Make one attempt at a pending delivery; return seconds until the next one, or None.

    Safe to call twice or concurrently: an attempt is claimed by a compare-and-set on the
    attempt counter, and a delivery that is sent (or has failed for good) is left alone.
    Every attempt is recorded: attempts, last_attempt_at, response code and body, error.
    """
    now = now or timezone.now()
    delivery = (
        Delivery.objects.select_related("notification__user", "webhook")
        .filter(pk=delivery_id, status=Delivery.Status.PENDING)
        .first()
    )
    if delivery is None:
        return None
    if delivery.attempts >= MAX_ATTEMPTS:
        Delivery.objects.filter(pk=delivery.pk, status=Delivery.Status.PENDING).update(
            status=Delivery.Status.FAILED,
            error=(delivery.error or "gave up")[:ERROR_KEEP_CHARS],
        )
        return None
    attempt = delivery.attempts + 1
    # The claim: the attempt count must not have moved, and no attempt may be in flight
    # (one started less than IN_FLIGHT ago) — so two copies of the task send once.
    claimed = (
        Delivery.objects.filter(
            pk=delivery.pk, status=Delivery.Status.PENDING, attempts=delivery.attempts
        )
        .filter(Q(last_attempt_at__isnull=True) | Q(last_attempt_at__lte=now - IN_FLIGHT))
        .update(attempts=attempt, last_attempt_at=now)
    )
    if claimed != 1:
        return None  # another worker is on it
    hook = delivery.webhook
    if delivery.channel == Channel.EMAIL:
        verdict, response = _send_email(delivery.notification)
    elif hook is None or not hook.active:
        verdict, response = (
            webhooks.Verdict(ok=False, error="the webhook is switched off"),
            webhooks.HttpResponse(None),
        )
    else:
        verdict, response = _send_webhook(delivery.notification, hook, delivery.pk, now)
    if verdict.ok:
        status = Delivery.Status.SENT
    elif verdict.retry and attempt < MAX_ATTEMPTS:
        status = Delivery.Status.PENDING
    else:
        status = Delivery.Status.FAILED
    Delivery.objects.filter(pk=delivery.pk, attempts=attempt).update(
        status=status,
        response_code=response.status,
        response_body=response.body[:RESPONSE_KEEP_CHARS],
        error="" if verdict.ok else (verdict.error or response.error)[:ERROR_KEEP_CHARS],
    )
    if status != Delivery.Status.PENDING:
        if status == Delivery.Status.FAILED:
            logger.warning(
                "delivery %s failed after %s attempts: %s", delivery.pk, attempt, verdict.error
            )
        return None
    delay = retry_delay(attempt)
    if response.retry_after:
        delay = min(max(delay, response.retry_after), RETRY_CAP_SECONDS)
    return delay


def deliveries_stalled(*, now: datetime | None = None, limit: int = BATCH) -> list[int]:
    """Pending deliveries whose task was lost: never tried for 5 min, or not retried in time."""
    now = now or timezone.now()
    stalled = Delivery.objects.filter(status=Delivery.Status.PENDING).filter(
        Q(last_attempt_at__isnull=True, created_at__lt=now - STALLED_FIRST)
        | Q(last_attempt_at__lt=now - STALLED_RETRY)
    )
    return list(stalled.order_by("pk").values_list("pk", flat=True)[:limit])
