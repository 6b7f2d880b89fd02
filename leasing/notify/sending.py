"""Sending a delivery (email or webhook), recording every attempt, retrying with backoff."""

from __future__ import annotations

import logging
import smtplib
from datetime import datetime

from django.conf import settings
from django.core.mail import EmailMessage, get_connection
from django.db.models import Q
from django.utils import timezone, translation
from django.utils.translation import gettext as _

from leasing.choices import Channel, Kind
from leasing.models import Delivery, Notification, Webhook
from leasing.notify import webhooks
from leasing.notify.messages import person_language
from leasing.notify.services import (
    BATCH,
    EMAIL_TIMEOUT,
    ERROR_KEEP_CHARS,
    IN_FLIGHT,
    MAX_ATTEMPTS,
    RESPONSE_KEEP_CHARS,
    RETRY_BASE_SECONDS,
    RETRY_CAP_SECONDS,
    SEVERITY,
    STALLED_FIRST,
    STALLED_RETRY,
)

logger = logging.getLogger(__name__)


def _absolute(url: str) -> str:
    return f"{settings.SITE_URL}{url}" if url.startswith("/") else url


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
    with translation.override(person_language(notification.user)):  # the one rule
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
