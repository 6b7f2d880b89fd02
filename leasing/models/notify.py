"""Warnings sent for leases, notices, notification preferences, webhooks and deliveries."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils.translation import gettext_lazy as _

from leasing.choices import Channel, WarningKind
from leasing.models.lease import Lease


class LeaseWarning(models.Model):
    """A warning sent for a lease: the unique constraint makes each one go out exactly once."""

    lease = models.ForeignKey(Lease, on_delete=models.CASCADE, related_name="warnings")
    kind = models.CharField(max_length=16, choices=WarningKind.choices)
    offset_minutes = models.IntegerField(
        default=0, help_text="For expiry warnings: minutes before the end."
    )
    sent_at = models.DateTimeField()

    class Meta:
        verbose_name = _("lease warning")
        verbose_name_plural = _("lease warnings")
        constraints = [
            models.UniqueConstraint(
                fields=["lease", "kind", "offset_minutes"], name="leasewarning_once"
            )
        ]

    def __str__(self) -> str:
        return f"{self.kind}/{self.offset_minutes} for lease {self.lease_id}"


class Notification(models.Model):
    """Something that happened that a person should know; the in-app notification centre."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="notifications"
    )
    lease = models.ForeignKey(
        Lease, null=True, blank=True, on_delete=models.CASCADE, related_name="notifications"
    )
    kind = models.CharField(max_length=40)
    title = models.CharField(max_length=200)
    body = models.TextField(blank=True)
    url = models.CharField(max_length=300, blank=True)
    data = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(db_index=True)
    read_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name = _("notification")
        verbose_name_plural = _("notifications")
        ordering = ["-created_at", "-pk"]
        indexes = [models.Index(fields=["user", "read_at"], name="notification_unread_idx")]

    def __str__(self) -> str:
        return f"{self.kind} for {self.user_id}"


class NotificationPreference(models.Model):
    """Which channels a user wants for one kind of event (no row: the defaults)."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="notification_preferences"
    )
    kind = models.CharField(max_length=40)
    channels = models.JSONField(default=list, blank=True)

    class Meta:
        verbose_name = _("notification preference")
        verbose_name_plural = _("notification preferences")
        constraints = [
            models.UniqueConstraint(fields=["user", "kind"], name="notificationpref_unique")
        ]

    def __str__(self) -> str:
        return f"{self.user_id}:{self.kind}"


class Webhook(models.Model):
    """Where to post events for a user or a team: a signed JSON hook or a group robot."""

    class Format(models.TextChoices):
        GENERIC = "generic", _("Signed JSON")
        WECOM = "wecom", _("WeCom group robot (企业微信)")
        DINGTALK = "dingtalk", _("DingTalk group robot (钉钉)")
        FEISHU = "feishu", _("Feishu group robot (飞书)")

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="webhooks",
    )
    team = models.ForeignKey(
        "portal.Team", null=True, blank=True, on_delete=models.CASCADE, related_name="webhooks"
    )
    name = models.CharField(_("name"), max_length=100)
    url = models.URLField(_("URL"), max_length=500)
    format = models.CharField(
        _("format"), max_length=16, choices=Format.choices, default=Format.GENERIC
    )
    secret = models.CharField(_("signing secret"), max_length=200, blank=True)
    kinds = models.JSONField(
        _("events"), default=list, blank=True, help_text=_("Empty: every event.")
    )
    active = models.BooleanField(_("active"), default=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        verbose_name = _("webhook")
        verbose_name_plural = _("webhooks")
        constraints = [
            models.CheckConstraint(
                condition=Q(user__isnull=False, team__isnull=True)
                | Q(user__isnull=True, team__isnull=False),
                name="webhook_user_xor_team",
            )
        ]

    def __str__(self) -> str:
        return self.name


class Delivery(models.Model):
    """One notification sent over one channel (email or a webhook): attempts and the response."""

    class Status(models.TextChoices):
        PENDING = "pending", _("Pending")
        SENT = "sent", _("Sent")
        FAILED = "failed", _("Failed")

    notification = models.ForeignKey(
        Notification, on_delete=models.CASCADE, related_name="deliveries"
    )
    channel = models.CharField(max_length=16, choices=Channel.choices)
    webhook = models.ForeignKey(
        Webhook, null=True, blank=True, on_delete=models.CASCADE, related_name="deliveries"
    )
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING)
    attempts = models.PositiveSmallIntegerField(default=0)
    last_attempt_at = models.DateTimeField(null=True, blank=True)
    response_code = models.IntegerField(null=True, blank=True)
    response_body = models.TextField(blank=True)
    error = models.TextField(blank=True)
    created_at = models.DateTimeField()

    class Meta:
        verbose_name = _("delivery")
        verbose_name_plural = _("deliveries")
        constraints = [
            models.UniqueConstraint(
                fields=["notification", "channel", "webhook"], name="delivery_once"
            ),
            models.UniqueConstraint(
                fields=["notification", "channel"],
                condition=Q(webhook__isnull=True),
                name="delivery_once_nohook",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.channel} of notification {self.notification_id}: {self.status}"


class DeliveryAttempt(models.Model):
    """One try at a delivery: when, how long it took, and what the other side answered.
    ``Delivery`` keeps the latest of them for the lists; these are every one."""

    class Outcome(models.TextChoices):
        SENT = "sent", _("Sent")
        RETRY = "retry", _("Failed, tried again")
        FAILED = "failed", _("Failed")

    delivery = models.ForeignKey(
        Delivery, on_delete=models.CASCADE, related_name="attempt_rows", verbose_name=_("delivery")
    )
    number = models.PositiveSmallIntegerField(_("attempt"))
    at = models.DateTimeField(_("at"))
    duration_ms = models.PositiveIntegerField(_("took (ms)"))
    outcome = models.CharField(_("outcome"), max_length=16, choices=Outcome.choices)
    response_code = models.IntegerField(_("response code"), null=True, blank=True)
    response_body = models.TextField(_("response"), blank=True)
    error = models.TextField(_("error"), blank=True)

    class Meta:
        verbose_name = _("delivery attempt")
        verbose_name_plural = _("delivery attempts")
        ordering = ["delivery", "number"]
        constraints = [
            models.UniqueConstraint(fields=["delivery", "number"], name="delivery_attempt_once")
        ]

    def __str__(self) -> str:
        return f"attempt {self.number} of delivery {self.delivery_id}: {self.outcome}"
