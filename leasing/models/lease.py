"""Leases, the cards they hold (allocations), their timelines and backend calls.

Some 530 lines: ``Lease`` carries the database's invariants on a lease as constraints (one
per rule, each named), and its related rows are kept beside it so a reader sees them at once.
"""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.db import models
from django.db.models import F, Q
from django.db.models.functions import Coalesce
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from leasing.choices import (
    ENDING_STATES,
    OPEN_STATES,
    PRIORITY_RANK,
    REASONED_STATES,
    EndReason,
    LeaseStatus,
    PreemptWhy,
    Priority,
    Purpose,
    StallReason,
    StartPolicy,
)
from leasing.models.lease_rules import LeaseActions, LeaseQuerySet

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
    environment = models.ForeignKey(
        "leasing.Environment",
        verbose_name=_("environment"),
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="leases",
    )
    description = models.CharField(_("description"), max_length=200, blank=True)
    borrowed = models.BooleanField(
        _("borrowed"),
        default=False,
        help_text=_("Leased beyond the team's concurrent quota on idle cards, as preemptible."),
    )
    approval_reason = models.TextField(_("why it needs approval"), blank=True)
    approval_breaches = models.JSONField(
        _("limits it breaks"),
        default=list,
        blank=True,
        help_text=_("The member limits broken, as parameters: worded for whoever reads them."),
    )
    warning_offsets = models.JSONField(
        _("warn before the end (minutes)"),
        default=list,
        blank=True,
        help_text=_("Empty: the holder's profile setting."),
    )
    warn_at = models.DateTimeField(
        _("next warning due"),
        null=True,
        blank=True,
        help_text=_(
            "When the tick looks at this lease's warnings next: the next one's due time, else "
            "the end. Empty: not worked out yet."
        ),
    )
    idle_since = models.DateTimeField(_("idle since"), null=True, blank=True)
    preempt_at = models.DateTimeField(
        _("preempted at"),
        null=True,
        blank=True,
        help_text=_("When a pending preemption ends this lease (the grace period's end)."),
    )
    preempt_why = models.CharField(
        _("preempted because"),
        max_length=12,
        choices=PreemptWhy.choices,
        blank=True,
        default="",
        db_default="",
        help_text=_("Why the pending preemption takes its cards (what its holder is told)."),
    )
    preempt_cards = models.PositiveSmallIntegerField(
        _("cards taken back"),
        null=True,
        blank=True,
        help_text=_(
            "A partial preemption: how many cards are taken back at the preemption time "
            "(their periods already end then); empty: the whole lease ends."
        ),
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
    lent = models.BooleanField(
        _("on loan"),
        default=False,
        help_text=_(
            "Placed on cards of another team's idle guaranteed share: taken back first when "
            "that team needs them."
        ),
    )
    checkpoint_signal = models.CharField(
        _("checkpoint signal"),
        max_length=10,
        blank=True,
        default="",
        help_text=_("Sent to the job when it is preempted (e.g. USR1), so it can save its state."),
    )
    checkpoint_command = models.CharField(
        _("checkpoint command"),
        max_length=500,
        blank=True,
        default="",
        help_text=_("Run on the lease's node when it is preempted (the local agent runs it)."),
    )
    checkpoint_seconds = models.PositiveIntegerField(
        _("checkpoint time (seconds)"),
        null=True,
        blank=True,
        help_text=_("How long saving takes: the preemption grace is at least this long."),
    )
    requeue = models.BooleanField(
        _("requeue when preempted"),
        default=False,
        help_text=_("When preempted, a new queued lease with the same profile resumes the work."),
    )
    resumes = models.ForeignKey(
        "self",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="resumed_by",
        verbose_name=_("resumes"),
        help_text=_("The preempted lease this one resumes."),
    )
    start_policy = models.CharField(
        _("start"),
        max_length=16,
        choices=StartPolicy.choices,
        blank=True,
        default="",
        db_default="",
    )
    submitted_at = models.DateTimeField(_("submitted"))
    status_changed_at = models.DateTimeField(_("status changed"), null=True, blank=True)
    activated_at = models.DateTimeField(_("active since"), null=True, blank=True)
    ended_at = models.DateTimeField(_("ended"), null=True, blank=True)
    estimated_start = models.DateTimeField(_("estimated start"), null=True, blank=True)
    # The cards the queue plan reserves for a waiting lease at its estimated start: with
    # them, a request that joins the queue is planned around everyone ahead without
    # re-planning the whole queue (scheduler/queueplan.py). Written by the queue pass only.
    planned_cards = models.JSONField(null=True, blank=True, editable=False)
    stall_reason = models.CharField(
        _("why it cannot start"),
        max_length=24,
        choices=StallReason.choices,
        blank=True,
        default="",
        db_default="",
        help_text=_("Set by the queue pass when a waiting lease can never be placed as asked."),
    )
    access = models.JSONField(_("access details"), default=dict, blank=True)
    failure_reason = models.TextField(_("failure reason"), blank=True)
    # Billing's bookmark: the usage records cover the held time before this moment (a month
    # start while the lease runs across months, the last allocation's end once it has ended).
    usage_recorded_until = models.DateTimeField(_("usage recorded until"), null=True, blank=True)
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

    objects = LeaseQuerySet.as_manager()

    class Meta:
        ordering = ["-submitted_at", "-pk"]
        verbose_name = _("lease")
        verbose_name_plural = _("leases")
        constraints = [
            models.CheckConstraint(condition=Q(count__gt=0), name="lease_count_positive"),
            models.CheckConstraint(
                condition=Q(end_at__gt=F("start_at")), name="lease_end_after_start"
            ),
            # Set when the release begins, kept through a failed release to the end.
            models.CheckConstraint(
                condition=Q(status__in=REASONED_STATES, end_reason__gt="")
                | (~Q(status__in=REASONED_STATES) & Q(end_reason="")),
                name="lease_end_reason_iff_ending",
            ),
            # a reason only for a pending preemption
            models.CheckConstraint(
                condition=Q(preempt_why="") | Q(preempt_at__isnull=False),
                name="lease_preempt_why_only_when_preempted",
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
            # The tick's warnings: the active leases whose next warning is due (or not known).
            models.Index(fields=["status", "warn_at"], name="lease_status_warn_idx"),
            models.Index(fields=["user", "status"], name="lease_user_status_idx"),
            # The pool page's queue history reads the last days' submissions (bench/page_scale).
            models.Index(fields=["submitted_at"], name="lease_submitted_idx"),
        ]

    def __str__(self) -> str:
        return f"lease {self.pk} ({self.count}× {self.card_model_id})"

    @property
    def actions(self) -> LeaseActions:
        return LeaseActions(self.status)

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

    @property
    def cards_held(self) -> list[Allocation]:
        """The cards the lease holds now or is booked to hold, else (once its holding is over)
        those it held last: a card swapped out or dropped by a resize is not among them. What
        the lease page, the lists and the API show; reads ``allocations`` as prefetched."""
        allocations = list(self.allocations.all())
        now = timezone.now()
        current = [a for a in allocations if a.end_at > now]
        if current:
            return current
        last = max((a.end_at for a in allocations), default=None)
        return [a for a in allocations if a.end_at == last]


class AllocationQuerySet(models.QuerySet):
    def held(self) -> AllocationQuerySet:
        """The cards each lease holds (or held when its holding ended): the periods that last
        to the lease's end — ``ended_at`` once it ended early, else ``end_at``. A card
        swapped out or dropped by a resize ended before and is not among them."""
        return self.filter(end_at=Coalesce(F("lease__ended_at"), F("lease__end_at")))

    def held_back(self) -> AllocationQuerySet:
        """The last cards of a lease whose release failed (it has a ``failure_reason`` and
        has not ended: release_failed, or releasing again on an operator's retry). The
        backend may still hold them, so they stay out of placement until the release is done
        (``leasing.lifecycle.releases``); usage stopped at ``ended_at`` all the same."""
        return self.held().filter(lease__status__in=ENDING_STATES).exclude(lease__failure_reason="")


class Allocation(models.Model):
    """A card held by a lease for a period ``[start_at, end_at)``.

    On PostgreSQL an exclusion constraint (migration 0002) makes overlapping periods on
    one card impossible; on SQLite, IMMEDIATE transactions serialize every writer.
    """

    card = models.ForeignKey("inventory.Card", on_delete=models.PROTECT, related_name="allocations")
    lease = models.ForeignKey(Lease, on_delete=models.CASCADE, related_name="allocations")
    start_at = models.DateTimeField()
    end_at = models.DateTimeField()

    objects = AllocationQuerySet.as_manager()

    class Meta:
        verbose_name = _("allocation")
        verbose_name_plural = _("allocations")
        ordering = ["lease_id", "card__node__hostname", "card__index"]
        constraints = [
            models.CheckConstraint(
                condition=Q(end_at__gt=F("start_at")), name="allocation_end_after_start"
            ),
        ]
        indexes = [
            models.Index(fields=["card", "end_at"], name="allocation_card_end_idx"),
            # Reports find the held time not yet recorded by its end (billing.accrued).
            models.Index(fields=["end_at"], name="allocation_end_idx"),
        ]

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
        verbose_name = _("lease event")
        verbose_name_plural = _("lease events")
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
        verbose_name = _("backend call")
        verbose_name_plural = _("backend calls")
        ordering = ["started_at", "pk"]

    def __str__(self) -> str:
        return f"{self.backend}.{self.action} #{self.attempt} for lease {self.lease_id}"


class LeaseChange(models.Model):
    """A change to a running lease that waits for the lead: an extension or a resize above a
    member's limit (the team's quota held when it was asked; it is checked again on approval).

    At most one change per lease waits at a time (a partial unique constraint).
    """

    class Kind(models.TextChoices):
        EXTEND = "extend", _("Extend")
        RESIZE = "resize", _("Resize")

    class Status(models.TextChoices):
        PENDING = "pending", _("Waiting for approval")
        APPROVED = "approved", _("Approved")
        REJECTED = "rejected", _("Rejected")
        WITHDRAWN = "withdrawn", _("Withdrawn")
        LAPSED = "lapsed", _("Lapsed (the lease ended first)")

    lease = models.ForeignKey(Lease, on_delete=models.CASCADE, related_name="changes")
    kind = models.CharField(_("change"), max_length=10, choices=Kind.choices)
    minutes = models.PositiveIntegerField(_("extend by (minutes)"), null=True, blank=True)
    count = models.PositiveSmallIntegerField(_("cards"), null=True, blank=True)
    card_model = models.ForeignKey(
        "inventory.CardModel",
        verbose_name=_("card model"),
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="+",
    )
    status = models.CharField(
        _("status"), max_length=10, choices=Status.choices, default=Status.PENDING
    )
    reason = models.TextField(_("why it needs approval"), blank=True)
    breaches = models.JSONField(
        _("limits it breaks"),
        default=list,
        blank=True,
        help_text=_("The member limits broken, as parameters: worded for whoever reads them."),
    )
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+"
    )
    requested_at = models.DateTimeField(_("asked"))
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    decided_at = models.DateTimeField(_("decided"), null=True, blank=True)
    note = models.TextField(_("decision note"), blank=True)

    class Meta:
        ordering = ["-requested_at", "-pk"]
        verbose_name = _("lease change")
        verbose_name_plural = _("lease changes")
        constraints = [
            models.UniqueConstraint(
                fields=["lease"],
                condition=Q(status="pending"),
                name="leasechange_one_pending_per_lease",
            ),
            models.CheckConstraint(
                condition=(Q(kind="extend") & Q(minutes__gt=0) & Q(count__isnull=True))
                | (Q(kind="resize") & Q(count__gt=0) & Q(minutes__isnull=True)),
                name="leasechange_fields_match_kind",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.get_kind_display()} lease {self.lease_id} ({self.status})"


class QueueMark(models.Model):
    """Where a card model's stored queue plan stops being exact.

    A request that joins a queue is planned exactly against the leases ahead of it, and
    answers at once; the waiting leases behind it keep the plan stored before it came, which
    no longer counts it. This row says so: the stored plan (``Lease.estimated_start`` and
    ``planned_cards``) of every waiting lease whose service key (``queueplan.service_key``)
    comes after this one's is stale until the queue is refreshed (``refresh.queue_refresh``,
    right after the commit and on every tick). No row: the whole stored plan is exact."""

    card_model = models.OneToOneField(
        "inventory.CardModel",
        verbose_name=_("card model"),
        on_delete=models.CASCADE,
        primary_key=True,
        related_name="+",
    )
    # the service key (-rank, -fair, virtual submit time, lease id) after which plans are stale
    rank = models.IntegerField(_("priority rank"))
    # null (a mark from before fair share): 1, every team's factor then. Nullable so that
    # SQLite adds the column in place, keeping the table's PlanVersion triggers.
    fair = models.FloatField(_("fair-share factor"), null=True, blank=True)
    virtual_at = models.DateTimeField(_("virtual submit time"))
    lease_id_after = models.BigIntegerField(_("lease"))
    since = models.DateTimeField(_("stale since"))

    class Meta:
        verbose_name = _("stale queue plan")
        verbose_name_plural = _("stale queue plans")

    def __str__(self) -> str:
        return f"{self.card_model_id}: stale after lease {self.lease_id_after}"

    @property
    def key(self) -> tuple:
        fair = 1.0 if self.fair is None else self.fair
        return (-self.rank, -fair, self.virtual_at, self.lease_id_after)


class PlanVersion(models.Model):
    """A counter per card model that the database moves on every change the queue planner
    reads: the model's allocations, its waiting leases (and any lease changing state or
    being marked for preemption), its cards, their nodes, the stale mark. Kept by triggers
    (migration 0025), so no write path can forget it; a process that holds the planner's
    picture of a model made at version N may use it as long as the counter still reads N
    (``scheduler.plancache``). No foreign key: a card model being deleted still counts."""

    card_model_id = models.BigIntegerField(_("card model"), primary_key=True)
    version = models.BigIntegerField(_("version"), default=0)

    class Meta:
        verbose_name = _("queue plan version")
        verbose_name_plural = _("queue plan versions")

    def __str__(self) -> str:
        return f"{self.card_model_id}: {self.version}"
