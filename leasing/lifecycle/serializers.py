"""DRF serializers for leases: input validation of shape only; rules live in services."""

from __future__ import annotations

from datetime import datetime

from django.utils.translation import gettext_lazy as _
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from inventory.models import CardModel
from inventory.serializers import RequirementsSerializer
from leasing.choices import WAITING_STATES, Priority, Purpose, StartPolicy
from leasing.lifecycle.change_requests import pending_change
from leasing.lifecycle.selectors import LeaseTruth, lease_truth
from leasing.lifecycle.validation import extension_minutes
from leasing.lifecycle.waiting import KINDS as WAITING_KINDS
from leasing.lifecycle.waiting import waiting_because_many
from leasing.models import Allocation, Environment, Lease, LeaseChange, LeaseEvent
from leasing.notify.messages import breaches_text
from leasing.teams.approvals import approvers
from leasing.workbench.access import access_for
from portal.input import DateTimeField, StrictSerializer, validate_lease_minutes
from portal.models import Team


class AllocationSerializer(serializers.ModelSerializer):
    node = serializers.CharField(source="card.node.hostname")
    card_index = serializers.IntegerField(source="card.index")
    card_uuid = serializers.CharField(source="card.uuid")

    class Meta:
        model = Allocation
        fields = ["node", "card_index", "card_uuid", "start_at", "end_at"]


def _when(moment: datetime | None):
    """A time as the serializer's other times are written (the active time zone, ISO 8601)."""
    return None if moment is None else serializers.DateTimeField().to_representation(moment)


class LeaseChangeSerializer(serializers.ModelSerializer):
    """A change to a lease that waits for (or got) the lead's decision."""

    lease = serializers.PrimaryKeyRelatedField(read_only=True)
    card_model = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    requested_by = serializers.CharField(source="requested_by.username", read_only=True)
    decided_by = serializers.CharField(
        source="decided_by.username", read_only=True, allow_null=True, default=None
    )

    reason = serializers.SerializerMethodField(
        help_text="The member limits the change breaks, worded in the reader's language."
    )
    waiting_for = serializers.SerializerMethodField(
        help_text="Who decides a pending change (the team's leads, by username); empty once decided."
    )

    class Meta:
        model = LeaseChange
        fields = [
            "id",
            "lease",
            "kind",
            "minutes",
            "count",
            "card_model",
            "status",
            "reason",
            "waiting_for",
            "requested_by",
            "requested_at",
            "decided_by",
            "decided_at",
            "note",
        ]
        read_only_fields = fields

    def get_reason(self, change: LeaseChange) -> str:
        return breaches_text(change.breaches) or change.reason

    def get_waiting_for(self, change: LeaseChange) -> list[str]:
        if change.status != LeaseChange.Status.PENDING:
            return []
        return approvers(change.lease.team)


class CheckpointSerializer(StrictSerializer):
    """How a preemptible job saves its state when preempted (a signal and/or a command on its
    node, the seconds saving takes) and whether a new lease resumes it."""

    signal = serializers.CharField(
        max_length=10,
        required=False,
        allow_blank=True,
        default="",
        help_text="Sent to the job's processes when it is preempted: USR1, USR2, TERM, INT, HUP, QUIT or CONT.",
    )
    command = serializers.CharField(
        max_length=500,
        required=False,
        allow_blank=True,
        default="",
        help_text="Run on the lease's node(s) when it is preempted (Slurm: as you, in the job).",
    )
    seconds = serializers.IntegerField(
        min_value=1,
        required=False,
        allow_null=True,
        default=None,
        help_text="How long saving takes; the preemption grace is at least this long.",
    )
    requeue = serializers.BooleanField(
        default=False,
        help_text="When preempted, queue a new lease with the same profile, linked by `resumes`.",
    )


class WaitingBecauseSerializer(serializers.Serializer):
    kind = serializers.ChoiceField(choices=WAITING_KINDS)
    params = serializers.DictField(
        help_text=(
            "approval: approvers; requirements: reason, same_node; ahead_in_queue: count, "
            "card_hours; fair_share: count, factor; taken_back: count, at, why (priority, share, "
            "fair_share); cards_in_use: count, until, leases (those you may see), others; "
            "off_peak: from, policy; unhealthy_cards, drain: count."
        )
    )
    text = serializers.CharField(help_text="The reason worded in your language.")


class LeaseSerializer(serializers.ModelSerializer):
    card_model = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    team = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    user = serializers.CharField(source="user.username", read_only=True)
    environment = serializers.SlugRelatedField(
        slug_field="slug", read_only=True, help_text="The lease's environment (null: none)."
    )
    duration_minutes = serializers.SerializerMethodField()
    # The cards it holds now (or held last), not those swapped out or dropped before.
    allocations = AllocationSerializer(many=True, read_only=True, source="cards_held")
    pending_change = serializers.SerializerMethodField()
    effective_start = serializers.SerializerMethodField(
        help_text=(
            "When it starts: while it waits, the start it is told: the queue plan's start "
            "(estimated_start) plus room for smaller work that may still pass it within its "
            "slack (null: unknown)."
        )
    )
    effective_end = serializers.SerializerMethodField(
        help_text=(
            "When it ends as things stand: earlier than end_at when a drain or a preemption "
            "cuts it short; for a waiting lease its start + duration (null: unknown)."
        )
    )
    ends_early = serializers.SerializerMethodField(
        help_text="Why effective_end is before the booked end: drain or preemption, and for a "
        "preemption `because`: priority, share (a guaranteed share) or fair_share (null: it is not)."
    )
    cards_taken_back = serializers.SerializerMethodField(
        help_text="A partial preemption: how many cards go back, when, and `because` (as in "
        "ends_early) (null: none)."
    )
    waiting_reason = serializers.SerializerMethodField(
        help_text=(
            "Deprecated: read waiting_because (its kind `requirements`). Why a queued lease "
            "cannot start as asked, and what you can do (null: it can)."
        )
    )
    waiting_because = serializers.SerializerMethodField(
        help_text=(
            "Why a waiting lease waits, worded for you: approval, requirements (can never "
            "start as asked), ahead_in_queue, fair_share, cards_in_use, off_peak, unhealthy_cards, drain. "
            "Empty when it does not wait."
        )
    )
    checkpoint = serializers.SerializerMethodField()

    class Meta:
        model = Lease
        fields = [
            "id",
            "status",
            "end_reason",
            "user",
            "team",
            "card_model",
            "count",
            "duration_minutes",
            "start_at",
            "end_at",
            "estimated_start",
            "priority",
            "purpose",
            "same_node",
            "description",
            "environment",
            "submitted_at",
            "activated_at",
            "ended_at",
            "allocations",
            "access",
            "failure_reason",
            "replaces",
            "pending_change",
            "effective_start",
            "effective_end",
            "ends_early",
            "cards_taken_back",
            "waiting_reason",
            "waiting_because",
            "start_policy",
            "lent",
            "checkpoint",
            "resumes",
        ]
        read_only_fields = fields
        extra_kwargs = {
            "estimated_start": {
                "help_text": (
                    "The queue plan's start for a waiting lease, where its planned cards "
                    "begin (the card model's timeline); effective_start is the start told."
                )
            }
        }

    # Access details only the holder may read: the Kubernetes exec token (kubeconfig) is the
    # holder's own, not their lead's or an operator's.
    HOLDER_ONLY_ACCESS = ("kubeconfig",)

    def to_representation(self, lease: Lease) -> dict:
        data = super().to_representation(lease)
        access = access_for(lease) if isinstance(data.get("access"), dict) else data.get("access")
        request = self.context.get("request")
        holder = request is not None and getattr(request.user, "pk", None) == lease.user_id
        if isinstance(access, dict):
            data["access"] = (
                access
                if holder
                else {k: v for k, v in access.items() if k not in self.HOLDER_ONLY_ACCESS}
            )
        return data

    @extend_schema_field(CheckpointSerializer(allow_null=True))
    def get_checkpoint(self, lease: Lease) -> dict | None:
        """How the job saves its state when preempted, and whether it is requeued (null: not
        declared)."""
        if not (lease.checkpoint_signal or lease.checkpoint_command):
            return None
        return {
            "signal": lease.checkpoint_signal,
            "command": lease.checkpoint_command,
            "seconds": lease.checkpoint_seconds,
            "requeue": lease.requeue,
        }

    def _truth(self, lease: Lease) -> LeaseTruth:
        truth = getattr(lease, "truth", None)
        if truth is None:
            truth = lease.truth = lease_truth(lease)
        return truth

    def get_effective_start(self, lease: Lease) -> datetime | None:
        return _when(self._truth(lease).start)

    def get_effective_end(self, lease: Lease) -> datetime | None:
        return _when(self._truth(lease).end)

    def get_ends_early(self, lease: Lease) -> dict | None:
        truth = self._truth(lease)
        if not truth.cut:
            return None
        return {
            "why": truth.cut,
            "at": _when(truth.end),
            "node": truth.cut_node or None,
            "because": truth.cut_why or None,
        }

    def get_cards_taken_back(self, lease: Lease) -> dict | None:
        truth = self._truth(lease)
        if not truth.cards_lost:
            return None
        return {
            "cards": truth.cards_lost,
            "at": _when(truth.cards_lost_at),
            "because": truth.cut_why or None,
        }

    @extend_schema_field(WaitingBecauseSerializer(many=True))
    def get_waiting_because(self, lease: Lease) -> list[dict]:
        if lease.status not in WAITING_STATES:
            return []
        cache = self.context.setdefault("_waiting_because", {})
        if lease.pk not in cache:
            # a list's page at once (a few queries per card model, not per lease)
            page = getattr(self.parent, "instance", None) if self.parent is not None else None
            leases = list(page) if page is not None and not isinstance(page, Lease) else [lease]
            request = self.context.get("request")
            cache.update(
                waiting_because_many(leases, user=getattr(request, "user", None) or lease.user)
            )
        return [
            {"kind": b.kind, "params": b.params, "text": b.text} for b in cache.get(lease.pk, [])
        ]

    @extend_schema_field(
        {
            "type": "object",
            "nullable": True,
            "deprecated": True,
            "description": "Deprecated: use waiting_because (kind `requirements`).",
            "properties": {
                "code": {"type": "string"},
                "message": {"type": "string"},
                "what_you_can_do": {"type": "string"},
            },
        }
    )
    def get_waiting_reason(self, lease: Lease) -> dict | None:
        truth = self._truth(lease)
        if not truth.stall:
            return None
        return {
            "code": truth.stall,
            "message": truth.stall_why,
            "what_you_can_do": truth.stall_todo,
        }

    def get_duration_minutes(self, lease: Lease) -> int:
        return int(lease.duration.total_seconds() // 60)

    @extend_schema_field(LeaseChangeSerializer(allow_null=True))
    def get_pending_change(self, lease: Lease) -> dict | None:
        """The extension or resize waiting for the lead's decision (null when none)."""
        change = getattr(lease, "pending_change", None)
        if change is None:
            prefetched = getattr(lease, "pending_changes", None)  # selectors.with_pending_change
            change = prefetched[0] if prefetched else None
            if prefetched is None:
                change = pending_change(lease.pk)
        return LeaseChangeSerializer(change).data if change else None


class LeaseRequestSerializer(StrictSerializer):
    card_model = serializers.SlugRelatedField(
        required=False,
        slug_field="slug",
        queryset=CardModel.objects.all(),
        error_messages={
            "does_not_exist": "Unknown card model “{value}”; see GET /api/v1/card-models/ for the slugs."
        },
    )
    count = serializers.IntegerField(min_value=1, max_value=4096)
    duration_minutes = serializers.IntegerField(min_value=1, validators=[validate_lease_minutes])
    start_at = DateTimeField(required=False, allow_null=True)
    team = serializers.SlugRelatedField(
        slug_field="slug",
        queryset=Team.objects.all(),
        required=False,
        error_messages={"does_not_exist": "Unknown team “{value}”."},
    )
    priority = serializers.ChoiceField(choices=Priority.choices, default=Priority.NORMAL)
    purpose = serializers.ChoiceField(choices=Purpose.choices, default=Purpose.DEVELOPMENT)
    same_node = serializers.BooleanField(default=True)
    description = serializers.CharField(
        max_length=200, required=False, allow_blank=True, default=""
    )

    requirements = RequirementsSerializer(required=False)
    checkpoint = CheckpointSerializer(required=False)
    start_policy = serializers.ChoiceField(
        choices=StartPolicy.choices,
        required=False,
        default="",
        allow_blank=True,
        help_text=(
            "next_off_peak: start in the next off-peak window (from start_at, or now); "
            "off_peak_only: start and end inside off-peak time."
        ),
    )
    environment = serializers.SlugRelatedField(
        required=False,
        allow_null=True,
        slug_field="slug",
        queryset=Environment.objects.filter(active=True),
        error_messages={
            "does_not_exist": "Unknown environment “{value}”; see GET /api/v1/environments/."
        },
    )
    override_reason = serializers.CharField(
        max_length=500,
        required=False,
        allow_blank=True,
        default="",
        help_text="Operators only: go past the team's quota, recording why.",
    )

    def validate(self, attrs):
        if not attrs.get("card_model") and not attrs.get("requirements"):
            raise serializers.ValidationError(
                {"card_model": _("Give card_model (a slug), requirements, or both.")}
            )
        return attrs


class ExtendSerializer(StrictSerializer):
    """How long to extend by: ``minutes``, or ``duration`` with its ``unit``."""

    minutes = serializers.IntegerField(
        min_value=1,
        max_value=10**9,
        required=False,
        help_text=_("Minutes to extend by (or give duration and unit)."),
    )
    duration = serializers.IntegerField(
        min_value=1,
        max_value=10**9,
        required=False,
        help_text=_("How long to extend by, in unit."),
    )
    unit = serializers.ChoiceField(
        choices=["minutes", "hours", "days"],
        required=False,
        help_text=_("The unit of duration: minutes, hours or days (default hours)."),
    )

    def validate(self, attrs):
        if "unit" in attrs and "duration" not in attrs:
            raise serializers.ValidationError({"unit": [_("Give a duration with the unit.")]})
        minutes, errors = extension_minutes(
            minutes=attrs.get("minutes"),
            duration=attrs.get("duration"),
            unit=attrs.get("unit", "hours"),
        )
        if errors:
            raise serializers.ValidationError(errors)
        return {"minutes": minutes}


class LeaseEventSerializer(serializers.ModelSerializer):
    actor = serializers.CharField(source="actor.username", default=None, read_only=True)

    class Meta:
        model = LeaseEvent
        fields = ["at", "kind", "from_status", "to_status", "actor", "message", "data"]


class ApprovalSerializer(serializers.ModelSerializer):
    user = serializers.CharField(source="user.username")
    team = serializers.CharField(source="team.slug")
    card_model = serializers.CharField(source="card_model.slug")
    duration_minutes = serializers.SerializerMethodField()

    approval_reason = serializers.SerializerMethodField()

    class Meta:
        model = Lease
        fields = [
            "id",
            "user",
            "team",
            "card_model",
            "count",
            "duration_minutes",
            "start_at",
            "submitted_at",
            "approval_reason",
        ]

    def get_duration_minutes(self, lease: Lease) -> int:
        return int(lease.duration.total_seconds() // 60)

    def get_approval_reason(self, lease: Lease) -> str:
        """The member limits the request breaks, worded in the reader's language."""
        return breaches_text(lease.approval_breaches) or lease.approval_reason


class DecisionSerializer(StrictSerializer):
    reason = serializers.CharField(max_length=500, required=False, allow_blank=True, default="")


class ResolveSerializer(StrictSerializer):
    note = serializers.CharField(max_length=500, required=False, allow_blank=True, default="")


class ResizeSerializer(StrictSerializer):
    count = serializers.IntegerField(min_value=1, max_value=4096, required=False)
    card_model = serializers.SlugRelatedField(
        slug_field="slug",
        queryset=CardModel.objects.all(),
        required=False,
        error_messages={"does_not_exist": _("Unknown card model “{value}”.")},
    )

    def validate(self, attrs):
        if not attrs:
            raise serializers.ValidationError(_("Give count, card_model or both."))
        return attrs
