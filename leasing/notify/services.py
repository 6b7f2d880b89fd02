"""Telling people what happened: the in-app centre, email and webhooks, through one entry point.

``notify()`` writes the in-app :class:`Notification` and, in the same transaction, one
:class:`Delivery` row per outside channel the recipient wants for that kind of event
(email; each matching active webhook). After commit each delivery is queued on
the task ``leasing.tasks_notify.deliver`` (``leasing.notify.tasks``), which sends it, records every attempt and retries with
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
from collections.abc import Callable, Iterable, Mapping
from contextlib import nullcontext
from datetime import datetime, timedelta

from django.conf import settings
from django.core.exceptions import PermissionDenied, ValidationError
from django.core.serializers.json import DjangoJSONEncoder
from django.core.validators import URLValidator
from django.db import IntegrityError, transaction
from django.db.models import Q
from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from leasing.choices import Channel, Kind
from leasing.enqueue import enqueue
from leasing.models import (
    Delivery,
    Lease,
    LeaseWarning,
    Notification,
    NotificationPreference,
    Webhook,
)
from leasing.notify import webhooks
from leasing.notify.selectors import notifications_of, teams_managed_by
from portal.models import Membership, Team
from portal.ratelimit import rate_consume

logger = logging.getLogger(__name__)


# A test message from the settings page; not an event anyone subscribes to.
WEBHOOK_TEST = "webhook_test"
KIND_LABELS = {**dict(Kind.choices), WEBHOOK_TEST: gettext_lazy("Webhook test")}

EMAIL_BY_DEFAULT = frozenset(
    {
        Kind.LEASE_EXPIRING,
        Kind.LEASE_FAILED,
        Kind.CARD_SWAPPED,
        Kind.RELEASE_FAILED,
        Kind.IDLE_WARNING,
        Kind.PREEMPTION_WARNING,
        Kind.DRAIN_WARNING,
        Kind.LEASE_STALLED,
        Kind.APPROVAL_REQUESTED,
        Kind.APPROVAL_DECIDED,
        Kind.DIRECTORY,
        Kind.BUDGET_80,
        Kind.BUDGET_100,
        Kind.POOL_ALERT,
        Kind.CARD_HEALTH,
        Kind.STATEMENT_ISSUED,
        Kind.WORKSPACE_NEAR_LIMIT,
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
    Kind.LEASE_STALLED: "warning",
    Kind.APPROVAL_REQUESTED: "warning",
    Kind.BUDGET_80: "warning",
    Kind.WORKSPACE_NEAR_LIMIT: "warning",
    Kind.LEASE_FAILED: "danger",
    Kind.PREEMPTION_WARNING: "danger",
    Kind.BUDGET_100: "danger",
    Kind.POOL_ALERT: "danger",
    Kind.CARD_HEALTH: "warning",
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


def _clean_data(data: Mapping | None, key: str) -> dict:
    clean = json.loads(json.dumps(dict(data or {}), cls=DjangoJSONEncoder))
    if key:
        clean["key"] = key
    return clean


def _hears(hook: Webhook, kind: str, *, by_default: bool) -> bool:
    """A hook with no events chosen hears what *by_default* says; else the events it names."""
    return kind in hook.kinds if hook.kinds else by_default


def _hooks_for(user, kind: str, channels: set[str], team: Team | None, team_event: bool):
    """The user's own webhooks that hear *kind* (if the user wants webhooks), then the team's
    that hear it; each in the order they were made. One query for both."""
    mine = Channel.WEBHOOK in channels
    if not mine and team is None:
        return []
    scope = Q(user=user) if mine else Q()
    if team is not None:
        scope = (scope | Q(team=team)) if mine else Q(team=team)
    found = list(Webhook.objects.filter(scope, active=True).order_by("pk"))
    hooks: list[Webhook] = []
    if mine:
        hooks += [h for h in found if h.user_id == user.pk and _hears(h, kind, by_default=True)]
    if team is not None:
        by_default = team_event and kind in TEAM_KINDS
        hooks += [
            h for h in found if h.team_id == team.pk and _hears(h, kind, by_default=by_default)
        ]
    return hooks


def _enqueue(delivery_ids: list[int]) -> None:
    for delivery_id in delivery_ids:
        # The row is durable: deliveries_sweep sends it once the broker is back.
        enqueue("leasing.tasks_notify.deliver", delivery_id)


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
    if key:
        existing = Notification.objects.filter(user=user, kind=kind, data__key=key).first()
        if existing is not None:
            return existing
    channels = channels_for(user, kind)
    email = Channel.EMAIL in channels and bool(user.email)
    hooks = _hooks_for(user, kind, channels, team, team_event)
    # The notice and its deliveries are written together; a notice that goes nowhere else
    # is one row, which needs no transaction of its own.
    with transaction.atomic() if email or hooks else nullcontext():
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
        ids = []
        if email:
            ids.append(
                Delivery.objects.create(
                    notification=notification, channel=Channel.EMAIL, created_at=now
                ).pk
            )
        for hook in hooks:
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
    word: Callable[[object], tuple[str, str]] | None = None,
) -> list[Notification]:
    """Tell each lead of *team*; the team's webhooks get the event once (with the first lead's).

    For team events: approval requests, budget alerts. A team without leads hears nothing.
    *word* gives the title and body for one lead (in their language), instead of *title*/*body*.
    """
    made = []
    for i, lead in enumerate(team_leads(team)):
        if word is not None:
            title, body = word(lead)
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
    """Send a test message to one webhook (recorded like any delivery, shown on the page).

    At most CARDPOOL_WEBHOOK_TEST_RATE per user, counted in the shared cache: each test may
    be retried several times, and the button must not turn the portal into a sender of floods.
    """
    if not _may_manage(user, webhook):
        raise PermissionDenied(_("You may not change this webhook."))
    if not rate_consume(
        scope="webhook-test", key=str(user.pk), rate=settings.CARDPOOL_WEBHOOK_TEST_RATE
    ):
        raise ValidationError(
            _("Too many test messages in a short time; try again later."), code="rate_limited"
        )
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


# --- a lease's holder ----------------------------------------------------------------


def notify_holder(
    lease: Lease, kind: str, title: str, body: str = "", *, anchor: str = "", key: str = ""
) -> None:
    """Send a notification to the holder through the configured channels (once per *key*)."""
    notify(
        user=lease.user,
        kind=kind,
        title=title,
        body=body,
        lease=lease,
        url=f"/leases/{lease.pk}/{anchor}",
        key=key,
    )


def warning_with_notice(
    lease: Lease, kind: str, offset: int, now: datetime, send: Callable[[], object]
) -> bool:
    """Record the warning and write its notice (``send``) in one transaction: both or neither.

    False if it was already sent, or if the notice could not be written — then the warning
    row is rolled back too, and the next sweep tries again.
    """
    try:
        with transaction.atomic():
            if not warning_record_once(lease, kind, offset, now):
                return False
            send()
    except Exception:
        logger.exception("warning %s for lease %s not sent; the next sweep retries", kind, lease.pk)
        return False
    return True


def warning_record_once(lease: Lease, kind: str, offset: int, now: datetime) -> bool:
    """Record the warning; False if it was already sent (by this or another worker)."""
    try:
        with transaction.atomic():
            LeaseWarning.objects.create(lease=lease, kind=kind, offset_minutes=offset, sent_at=now)
    except IntegrityError:
        return False
    return True
