"""Who holds which cards, when: leases, their allocations and their timelines."""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.db import models
from django.db.models import F, Q
from django.utils.translation import gettext_lazy as _


class LeaseStatus(models.TextChoices):
    PENDING_APPROVAL = "pending_approval", _("Pending approval")
    QUEUED = "queued", _("Queued")
    SCHEDULED = "scheduled", _("Scheduled")
    PROVISIONING = "provisioning", _("Provisioning")
    ACTIVE = "active", _("Active")
    RELEASING = "releasing", _("Releasing")
    ENDED = "ended", _("Ended")
    REJECTED = "rejected", _("Rejected")
    CANCELLED = "cancelled", _("Cancelled")
    FAILED = "failed", _("Failed")


# Named groups of states (NetBox core/choices.py style).
WAITING_STATES = (LeaseStatus.PENDING_APPROVAL, LeaseStatus.QUEUED)
HOLDING_STATES = (
    LeaseStatus.SCHEDULED,
    LeaseStatus.PROVISIONING,
    LeaseStatus.ACTIVE,
    LeaseStatus.RELEASING,
)
RUNNING_STATES = (LeaseStatus.PROVISIONING, LeaseStatus.ACTIVE)
OPEN_STATES = WAITING_STATES + HOLDING_STATES
TERMINAL_STATES = (
    LeaseStatus.ENDED,
    LeaseStatus.REJECTED,
    LeaseStatus.CANCELLED,
    LeaseStatus.FAILED,
)


class EndReason(models.TextChoices):
    EXPIRED = "expired", _("Expired")
    RELEASED = "released", _("Released")
    PREEMPTED = "preempted", _("Preempted")
    IDLE = "idle", _("Idle")
    ADMIN = "admin", _("Ended by an operator")
    FAILED = "failed", _("Failed")


class Priority(models.TextChoices):
    CRITICAL = "critical", _("Critical")
    HIGH = "high", _("High")
    NORMAL = "normal", _("Normal")
    PREEMPTIBLE = "preemptible", _("Preemptible")


# Higher rank is served first.
PRIORITY_RANK = {
    Priority.CRITICAL: 300,
    Priority.HIGH: 200,
    Priority.NORMAL: 100,
    Priority.PREEMPTIBLE: 0,
}


class Purpose(models.TextChoices):
    TRAINING = "training", _("Training")
    FINE_TUNING = "fine_tuning", _("Fine-tuning")
    INFERENCE = "inference", _("Inference")
    RENDERING = "rendering", _("Rendering / simulation")
    DEVELOPMENT = "development", _("Development")


REQUEST_KEY_MAX = 80


class Lease(models.Model):
    """*count* cards of one card model for a time window, held by a user on behalf of a team.

    While waiting (queued / pending approval) ``start_at``/``end_at`` are the earliest
    wanted window; once placed they are the booked window, matching the allocations.
    """

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        verbose_name=_("user"),
        on_delete=models.PROTECT,
        related_name="leases",
    )
    team = models.ForeignKey(
        "portal.Team", verbose_name=_("team"), on_delete=models.PROTECT, related_name="leases"
    )
    card_model = models.ForeignKey(
        "inventory.CardModel",
        verbose_name=_("card model"),
        on_delete=models.PROTECT,
        related_name="leases",
    )
    requirements = models.JSONField(
        _("requirements"),
        default=dict,
        blank=True,
        help_text=_(
            "When asked by requirements rather than by model: what the chosen model had to meet."
        ),
    )
    count = models.PositiveSmallIntegerField(_("cards"))
    duration = models.DurationField(_("duration"))
    start_at = models.DateTimeField(_("start"))
    end_at = models.DateTimeField(_("end"))
    status = models.CharField(
        _("status"), max_length=20, choices=LeaseStatus.choices, db_index=True
    )
    end_reason = models.CharField(
        _("end reason"), max_length=16, choices=EndReason.choices, blank=True
    )
    priority = models.CharField(
        _("priority"), max_length=16, choices=Priority.choices, default=Priority.NORMAL
    )
    priority_rank = models.SmallIntegerField(default=PRIORITY_RANK[Priority.NORMAL], editable=False)
    purpose = models.CharField(
        _("purpose"), max_length=16, choices=Purpose.choices, default=Purpose.DEVELOPMENT
    )
    same_node = models.BooleanField(_("all cards on one node"), default=True)
    description = models.CharField(_("description"), max_length=200, blank=True)
    borrowed = models.BooleanField(
        _("borrowed"),
        default=False,
        help_text=_("Leased beyond the team's concurrent quota on idle cards, as preemptible."),
    )
    approval_reason = models.TextField(_("why it needs approval"), blank=True)
    warning_offsets = models.JSONField(
        _("warn before the end (minutes)"),
        default=list,
        blank=True,
        help_text=_("Empty: the holder's profile setting."),
    )
    idle_since = models.DateTimeField(_("idle since"), null=True, blank=True)
    preempt_at = models.DateTimeField(
        _("preempted at"),
        null=True,
        blank=True,
        help_text=_("When a pending preemption ends this lease (the grace period's end)."),
    )
    replaces = models.ForeignKey(
        "self",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        verbose_name=_("replaces"),
        help_text=_("The lease this one resizes; released once this one is active."),
    )
    preempted_for = models.ForeignKey(
        "self",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        verbose_name=_("preempted for"),
    )
    submitted_at = models.DateTimeField(_("submitted"))
    status_changed_at = models.DateTimeField(_("status changed"), null=True, blank=True)
    activated_at = models.DateTimeField(_("active since"), null=True, blank=True)
    ended_at = models.DateTimeField(_("ended"), null=True, blank=True)
    estimated_start = models.DateTimeField(_("estimated start"), null=True, blank=True)
    access = models.JSONField(_("access details"), default=dict, blank=True)
    failure_reason = models.TextField(_("failure reason"), blank=True)
    request_key = models.CharField(
        _("request key"),
        max_length=REQUEST_KEY_MAX,
        blank=True,
        default="",
        db_default="",
        help_text=_(
            "The client's Idempotency-Key (or the request form's): the same request sent "
            "again with it gets this lease back instead of a second one."
        ),
    )

    # Set on the lease lease_request returns when its request key found an earlier one.
    replayed = False

    class Meta:
        ordering = ["-submitted_at", "-pk"]
        verbose_name = _("lease")
        verbose_name_plural = _("leases")
        constraints = [
            models.CheckConstraint(condition=Q(count__gt=0), name="lease_count_positive"),
            models.CheckConstraint(
                condition=Q(end_at__gt=F("start_at")), name="lease_end_after_start"
            ),
            models.CheckConstraint(
                condition=Q(status="ended", end_reason__gt="")
                | (~Q(status="ended") & Q(end_reason="")),
                name="lease_end_reason_iff_ended",
            ),
            models.UniqueConstraint(
                fields=["user", "request_key"],
                condition=~Q(request_key=""),
                name="lease_request_key_once_per_user",
            ),
        ]
        indexes = [
            models.Index(
                fields=["status", "card_model", "priority_rank", "submitted_at"],
                name="lease_queue_idx",
            ),
            models.Index(fields=["status", "end_at"], name="lease_status_end_idx"),
            models.Index(fields=["user", "status"], name="lease_user_status_idx"),
            # The pool page's queue history reads the last days' submissions (bench/page_scale).
            models.Index(fields=["submitted_at"], name="lease_submitted_idx"),
        ]

    def __str__(self) -> str:
        return f"lease {self.pk} ({self.count}× {self.card_model_id})"

    @property
    def card_hours(self) -> float:
        return self.count * (self.end_at - self.start_at) / timedelta(hours=1)

    @property
    def hours(self) -> float:
        """The requested duration in hours (for display)."""
        return self.duration / timedelta(hours=1)

    @property
    def is_open(self) -> bool:
        return self.status in OPEN_STATES


class Allocation(models.Model):
    """A card held by a lease for a period ``[start_at, end_at)``.

    On PostgreSQL an exclusion constraint (migration 0002) makes overlapping periods on
    one card impossible; on SQLite, IMMEDIATE transactions serialize every writer.
    """

    card = models.ForeignKey("inventory.Card", on_delete=models.PROTECT, related_name="allocations")
    lease = models.ForeignKey(Lease, on_delete=models.CASCADE, related_name="allocations")
    start_at = models.DateTimeField()
    end_at = models.DateTimeField()

    class Meta:
        ordering = ["lease_id", "card__node__hostname", "card__index"]
        constraints = [
            models.CheckConstraint(
                condition=Q(end_at__gt=F("start_at")), name="allocation_end_after_start"
            ),
            models.UniqueConstraint(
                fields=["lease", "card"], name="allocation_unique_card_per_lease"
            ),
        ]
        indexes = [models.Index(fields=["card", "end_at"], name="allocation_card_end_idx")]

    def __str__(self) -> str:
        return f"card {self.card_id} for lease {self.lease_id} [{self.start_at:%Y-%m-%d %H:%M}, {self.end_at:%Y-%m-%d %H:%M})"


class LeaseEvent(models.Model):
    """One line of a lease's timeline; every state change writes one (the audit trail)."""

    lease = models.ForeignKey(Lease, on_delete=models.CASCADE, related_name="events")
    at = models.DateTimeField(db_index=True)
    kind = models.CharField(max_length=40)
    from_status = models.CharField(max_length=20, blank=True)
    to_status = models.CharField(max_length=20, blank=True)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    message = models.TextField(blank=True)
    data = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["at", "pk"]

    def __str__(self) -> str:
        return f"{self.at:%Y-%m-%d %H:%M:%S} {self.kind}"


class BackendCall(models.Model):
    """A durable record of each attempt to talk to a provisioning backend."""

    lease = models.ForeignKey(Lease, on_delete=models.CASCADE, related_name="backend_calls")
    backend = models.CharField(max_length=40)
    action = models.CharField(max_length=20)
    attempt = models.PositiveSmallIntegerField(default=1)
    started_at = models.DateTimeField()
    finished_at = models.DateTimeField(null=True, blank=True)
    ok = models.BooleanField(default=False)
    detail = models.TextField(blank=True)

    class Meta:
        ordering = ["started_at", "pk"]

    def __str__(self) -> str:
        return f"{self.backend}.{self.action} #{self.attempt} for lease {self.lease_id}"


class QuotaLimits(models.Model):
    """The limits a quota rule or a member limit may set; empty means no limit."""

    max_concurrent_cards = models.PositiveIntegerField(_("concurrent cards"), null=True, blank=True)
    card_hours_per_month = models.DecimalField(
        _("card-hours per month"), max_digits=12, decimal_places=1, null=True, blank=True
    )
    max_lease_hours = models.PositiveIntegerField(_("longest lease (hours)"), null=True, blank=True)

    class Meta:
        abstract = True

    LIMIT_FIELDS = ("max_concurrent_cards", "card_hours_per_month", "max_lease_hours")


class Quota(QuotaLimits):
    """A team's limits for one card model, or — with no model — for all models together."""

    team = models.ForeignKey(
        "portal.Team", verbose_name=_("team"), on_delete=models.CASCADE, related_name="quotas"
    )
    card_model = models.ForeignKey(
        "inventory.CardModel",
        verbose_name=_("card model"),
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="quotas",
        help_text=_("Empty: the rule applies to all card models together."),
    )
    money_per_month = models.DecimalField(
        _("money per month (CNY)"), max_digits=14, decimal_places=2, null=True, blank=True
    )

    class Meta:
        verbose_name = _("team quota")
        verbose_name_plural = _("team quotas")
        constraints = [
            models.UniqueConstraint(fields=["team", "card_model"], name="quota_unique_team_model"),
            models.UniqueConstraint(
                fields=["team"],
                condition=Q(card_model__isnull=True),
                name="quota_unique_team_all_models",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.team} / {self.card_model or 'all models'}"


class MemberLimit(QuotaLimits):
    """A member's limits inside the team's, set by the lead; going above them needs approval."""

    membership = models.ForeignKey(
        "portal.Membership",
        verbose_name=_("member"),
        on_delete=models.CASCADE,
        related_name="limits",
    )
    card_model = models.ForeignKey(
        "inventory.CardModel",
        verbose_name=_("card model"),
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="member_limits",
    )

    class Meta:
        verbose_name = _("member limit")
        verbose_name_plural = _("member limits")
        constraints = [
            models.UniqueConstraint(
                fields=["membership", "card_model"], name="memberlimit_unique_model"
            ),
            models.UniqueConstraint(
                fields=["membership"],
                condition=Q(card_model__isnull=True),
                name="memberlimit_unique_all_models",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.membership} / {self.card_model or 'all models'}"


class WarningKind(models.TextChoices):
    EXPIRY = "expiry", _("Lease ending")
    IDLE = "idle", _("Cards idle")
    PREEMPTION = "preemption", _("Preemption")
    DRAIN = "drain", _("Node draining")
    FAULT = "fault", _("Card faulty")


class LeaseWarning(models.Model):
    """A warning sent for a lease: the unique constraint makes each one go out exactly once."""

    lease = models.ForeignKey(Lease, on_delete=models.CASCADE, related_name="warnings")
    kind = models.CharField(max_length=16, choices=WarningKind.choices)
    offset_minutes = models.IntegerField(
        default=0, help_text="For expiry warnings: minutes before the end."
    )
    sent_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["lease", "kind", "offset_minutes"], name="leasewarning_once"
            )
        ]

    def __str__(self) -> str:
        return f"{self.kind}/{self.offset_minutes} for lease {self.lease_id}"


class Channel(models.TextChoices):
    INAPP = "inapp", _("In the portal")
    EMAIL = "email", _("Email")
    WEBHOOK = "webhook", _("Webhooks")


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


# --- prices and usage --------------------------------------------------------------------


class PricePeriod(models.Model):
    """A price per card-hour in force from ``effective_from`` until the next row's."""

    price_per_hour = models.DecimalField(_("price per card-hour"), max_digits=10, decimal_places=2)
    effective_from = models.DateTimeField(_("effective from"))

    class Meta:
        abstract = True


class Price(PricePeriod):
    """A card model's list price per card-hour from ``effective_from`` on.

    The price in force at time *t* is the latest row with ``effective_from <= t``; with none,
    the card model's ``price_per_hour``. Usage already recorded never changes, so a price set
    for next month leaves last month's bills alone.
    """

    card_model = models.ForeignKey(
        "inventory.CardModel",
        verbose_name=_("card model"),
        on_delete=models.CASCADE,
        related_name="prices",
    )

    class Meta:
        ordering = ["card_model", "-effective_from"]
        verbose_name = _("price")
        verbose_name_plural = _("prices")
        constraints = [
            models.UniqueConstraint(
                fields=["card_model", "effective_from"], name="price_unique_model_from"
            ),
            models.CheckConstraint(condition=Q(price_per_hour__gte=0), name="price_not_negative"),
        ]

    def __str__(self) -> str:
        return (
            f"{self.card_model_id}: {self.price_per_hour} from {self.effective_from:%Y-%m-%d %H:%M}"
        )


class TeamPrice(PricePeriod):
    """A price one team pays for a card model from ``effective_from`` on, instead of the list price."""

    team = models.ForeignKey(
        "portal.Team", verbose_name=_("team"), on_delete=models.CASCADE, related_name="prices"
    )
    card_model = models.ForeignKey(
        "inventory.CardModel",
        verbose_name=_("card model"),
        on_delete=models.CASCADE,
        related_name="team_prices",
    )

    class Meta:
        ordering = ["team", "card_model", "-effective_from"]
        verbose_name = _("team price")
        verbose_name_plural = _("team prices")
        constraints = [
            models.UniqueConstraint(
                fields=["team", "card_model", "effective_from"], name="teamprice_unique"
            ),
            models.CheckConstraint(
                condition=Q(price_per_hour__gte=0), name="teamprice_not_negative"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.team_id}/{self.card_model_id}: {self.price_per_hour}"


class UsageRecord(models.Model):
    """Card-time a lease held on one node within one month and one price period, and its cost.

    Written once when the lease ends (``leasing.usage``), from its allocations; never
    rewritten. Who, what and where are copied in so reports group without joins.
    ``cost = round(card_minutes × price / 60, 2)``; every total is a sum of ``cost``.
    """

    lease = models.ForeignKey(Lease, on_delete=models.CASCADE, related_name="usage_records")
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="usage_records"
    )
    team = models.ForeignKey("portal.Team", on_delete=models.PROTECT, related_name="usage_records")
    department = models.ForeignKey(
        "portal.Department",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="usage_records",
    )
    card_model = models.ForeignKey(
        "inventory.CardModel", on_delete=models.PROTECT, related_name="usage_records"
    )
    vendor = models.CharField(max_length=20)
    node = models.ForeignKey("inventory.Node", on_delete=models.PROTECT, related_name="+")
    region = models.ForeignKey("inventory.Region", on_delete=models.PROTECT, related_name="+")
    priority = models.CharField(max_length=16, choices=Priority.choices)
    month = models.DateField(help_text="First day of the month (site time zone).")
    start_at = models.DateTimeField()
    end_at = models.DateTimeField()
    cards = models.PositiveSmallIntegerField()
    minutes = models.PositiveIntegerField(help_text="Wall-clock minutes from start to end.")
    card_minutes = models.PositiveIntegerField()
    list_price = models.DecimalField(max_digits=10, decimal_places=2)
    discount = models.DecimalField(max_digits=5, decimal_places=4, default=1)
    price = models.DecimalField(
        max_digits=12, decimal_places=4, help_text="Per card-hour, after override and discount."
    )
    cost = models.DecimalField(max_digits=14, decimal_places=2)
    wait_seconds = models.PositiveIntegerField(
        null=True, blank=True, help_text="Queue wait; on the lease's first record only."
    )

    class Meta:
        ordering = ["start_at", "lease_id", "node_id"]
        constraints = [
            models.UniqueConstraint(
                fields=["lease", "node", "start_at"], name="usagerecord_unique_piece"
            ),
            models.CheckConstraint(
                condition=Q(end_at__gt=F("start_at")), name="usagerecord_end_after_start"
            ),
        ]
        indexes = [
            models.Index(fields=["month", "team"], name="usage_month_team_idx"),
            models.Index(fields=["start_at"], name="usage_start_idx"),
            models.Index(fields=["team", "start_at"], name="usage_team_start_idx"),
        ]

    def __str__(self) -> str:
        return f"lease {self.lease_id} {self.start_at:%Y-%m-%d %H:%M}: {self.card_minutes} card-min"

    @property
    def card_hours(self):
        from decimal import Decimal

        return (Decimal(self.card_minutes) / 60).quantize(Decimal("0.01"))


def _record_usage_on_end(sender, instance: LeaseEvent, created: bool, **kwargs) -> None:
    """A lease reached ended or failed: record its usage once the transaction commits."""
    if created and instance.to_status in (LeaseStatus.ENDED, LeaseStatus.FAILED):
        from django.db import transaction

        from leasing import usage

        lease_id = instance.lease_id
        transaction.on_commit(lambda: usage.usage_record_lease_safely(lease_id))


models.signals.post_save.connect(
    _record_usage_on_end, sender=LeaseEvent, dispatch_uid="leasing_usage_on_end"
)
