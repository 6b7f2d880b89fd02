"""Pool health: the operators' alert rules and the alerts they raise (``leasing.health``)."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils.translation import gettext_lazy as _

from leasing.choices import LASTING_ALERT_STATES, AlertKind, AlertSeverity, AlertStatus
from leasing.models.lease import Lease


class AlertRule(models.Model):
    """An operator's threshold for one pool-health rule. A rule without a row runs with its
    defaults (``leasing.health.rules.DEFAULTS``); saving one changes it for the next pass."""

    kind = models.CharField(_("rule"), max_length=20, choices=AlertKind.choices, unique=True)
    threshold = models.FloatField(
        _("threshold"),
        help_text=_(
            "°C for temperature; % of the card's power limit (TDP) or memory; % of leases "
            "failed; utilisation % at or below which a leased card counts as idle. "
            "Not used for a silent node."
        ),
    )
    for_minutes = models.PositiveIntegerField(
        _("for (minutes)"),
        help_text=_(
            "How long the condition must last before the alert opens (for the failure rate: "
            "the window it is counted over)."
        ),
    )
    severity = models.CharField(_("severity"), max_length=10, choices=AlertSeverity.choices)
    enabled = models.BooleanField(_("enabled"), default=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["kind"]
        verbose_name = _("alert rule")
        verbose_name_plural = _("alert rules")
        constraints = [
            models.CheckConstraint(condition=Q(threshold__gte=0), name="alertrule_threshold_gte_0")
        ]

    def __str__(self) -> str:
        return str(self.get_kind_display())


class Alert(models.Model):
    """One occurrence of a rule's condition on one subject (a card, a node, the pool): opened
    once, updated while it lasts, resolved by itself (or when its rule is switched off);
    operators acknowledge or silence it, and who did so when is kept here and in the audit
    trail."""

    kind = models.CharField(_("rule"), max_length=20, choices=AlertKind.choices)
    severity = models.CharField(_("severity"), max_length=10, choices=AlertSeverity.choices)
    # "card:12", "node:3", "pool", "lease:7:card:12": one lasting alert per rule and subject.
    subject = models.CharField(max_length=60)
    status = models.CharField(
        _("status"), max_length=16, choices=AlertStatus.choices, default=AlertStatus.OPEN
    )
    card = models.ForeignKey(
        "inventory.Card", null=True, blank=True, on_delete=models.CASCADE, related_name="alerts"
    )
    node = models.ForeignKey(
        "inventory.Node", null=True, blank=True, on_delete=models.CASCADE, related_name="alerts"
    )
    lease = models.ForeignKey(
        Lease, null=True, blank=True, on_delete=models.SET_NULL, related_name="alerts"
    )
    threshold = models.FloatField(null=True, blank=True)
    value = models.FloatField(_("value"), null=True, blank=True)
    peak = models.FloatField(_("peak"), null=True, blank=True)
    params = models.JSONField(default=dict, blank=True)  # what the notices are worded from
    opened_at = models.DateTimeField(_("opened"), db_index=True)
    last_seen_at = models.DateTimeField(_("last seen"))
    resolved_at = models.DateTimeField(_("resolved"), null=True, blank=True)
    acknowledged_at = models.DateTimeField(_("acknowledged"), null=True, blank=True)
    acknowledged_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    silenced_until = models.DateTimeField(_("silenced until"), null=True, blank=True)
    silenced_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    notified = models.BooleanField(default=False)  # operators were told it opened

    class Meta:
        ordering = ["-opened_at", "-pk"]
        verbose_name = _("alert")
        verbose_name_plural = _("alerts")
        constraints = [
            models.UniqueConstraint(
                fields=["kind", "subject"],
                condition=Q(status__in=LASTING_ALERT_STATES),
                name="alert_one_lasting_per_subject",
            ),
            models.CheckConstraint(
                condition=Q(status=AlertStatus.RESOLVED) | Q(resolved_at__isnull=True),
                name="alert_resolved_at_iff_resolved",
            ),
        ]
        indexes = [models.Index(fields=["status", "kind"], name="alert_status_kind_idx")]

    def __str__(self) -> str:
        return f"{self.kind} {self.subject} ({self.status})"
