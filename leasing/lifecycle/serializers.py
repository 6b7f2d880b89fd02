"""DRF serializers for leases: input validation of shape only; rules live in services."""

from __future__ import annotations

from rest_framework import serializers

from inventory.models import CardModel, InterconnectKind, Precision, Vendor
from leasing.choices import Priority, Purpose
from leasing.models import Allocation, Lease, LeaseEvent
from portal.models import Team


class AllocationSerializer(serializers.ModelSerializer):
    node = serializers.CharField(source="card.node.hostname")
    card_index = serializers.IntegerField(source="card.index")
    card_uuid = serializers.CharField(source="card.uuid")

    class Meta:
        model = Allocation
        fields = ["node", "card_index", "card_uuid", "start_at", "end_at"]


class LeaseSerializer(serializers.ModelSerializer):
    card_model = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    team = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    user = serializers.CharField(source="user.username", read_only=True)
    duration_minutes = serializers.SerializerMethodField()
    # The cards it holds now (or held last), not those swapped out or dropped before.
    allocations = AllocationSerializer(many=True, read_only=True, source="cards_held")

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
            "submitted_at",
            "activated_at",
            "ended_at",
            "allocations",
            "access",
            "failure_reason",
            "replaces",
        ]
        read_only_fields = fields

    def get_duration_minutes(self, lease: Lease) -> int:
        return int(lease.duration.total_seconds() // 60)


class RequirementsSerializer(serializers.Serializer):
    """Ask for any card model meeting these, instead of naming one."""

    vendor = serializers.ChoiceField(choices=Vendor.choices, required=False)
    min_memory_gb = serializers.DecimalField(
        max_digits=7, decimal_places=1, min_value=0, required=False
    )
    precision = serializers.ChoiceField(choices=Precision.choices, required=False)
    interconnect = serializers.ChoiceField(choices=InterconnectKind.choices, required=False)


class LeaseRequestSerializer(serializers.Serializer):
    card_model = serializers.SlugRelatedField(
        required=False,
        slug_field="slug",
        queryset=CardModel.objects.all(),
        error_messages={
            "does_not_exist": "Unknown card model “{value}”; see GET /api/v1/card-models/ for the slugs."
        },
    )
    count = serializers.IntegerField(min_value=1, max_value=4096)
    duration_minutes = serializers.IntegerField(min_value=1)
    start_at = serializers.DateTimeField(required=False, allow_null=True)
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
    override_reason = serializers.CharField(
        max_length=500,
        required=False,
        allow_blank=True,
        default="",
        help_text="Operators only: go past the team's quota, recording why.",
    )

    def validate(self, attrs):
        if bool(attrs.get("card_model")) == bool(attrs.get("requirements")):
            raise serializers.ValidationError(
                {
                    "card_model": "Give either card_model (a slug) or requirements, not both and not neither."
                }
            )
        return attrs


class ExtendSerializer(serializers.Serializer):
    minutes = serializers.IntegerField(min_value=1, max_value=60 * 24 * 90)


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


class DecisionSerializer(serializers.Serializer):
    reason = serializers.CharField(max_length=500, required=False, allow_blank=True, default="")


class ResolveSerializer(serializers.Serializer):
    note = serializers.CharField(max_length=500, required=False, allow_blank=True, default="")


class ResizeSerializer(serializers.Serializer):
    count = serializers.IntegerField(min_value=1, max_value=4096, required=False)
    card_model = serializers.SlugRelatedField(
        slug_field="slug",
        queryset=CardModel.objects.all(),
        required=False,
        error_messages={"does_not_exist": "Unknown card model “{value}”."},
    )

    def validate(self, attrs):
        if not attrs:
            raise serializers.ValidationError("Give count, card_model or both.")
        return attrs
