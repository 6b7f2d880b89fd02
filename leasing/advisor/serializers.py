"""DRF serializers for asking by task: the profile in, the estimate and ranked options out.

Shape only; the rules are in ``leasing.advisor.estimator`` (what a profile may say)
and ``leasing.advisor.recommend`` (what fits).
"""

from __future__ import annotations

from dataclasses import asdict
from urllib.parse import urlencode

from django.conf import settings
from django.urls import reverse
from django.utils.translation import gettext as _
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from inventory.serializers import RequirementsSerializer
from leasing.advisor.estimator import (
    LIMITS,
    EstimateError,
    ModelPrecision,
    Optimizer,
    Task,
    TaskProfile,
)
from leasing.billing import prices
from leasing.choices import Priority, Purpose, StartPolicy
from portal.input import DateTimeField, StrictSerializer
from portal.models import Team


class TaskProfileSerializer(StrictSerializer):
    """What you want to run; leave a field out for the task's default."""

    task = serializers.ChoiceField(choices=Task.choices)
    params_b = serializers.FloatField(
        required=False,
        allow_null=True,
        min_value=LIMITS["params_b"][0],
        max_value=LIMITS["params_b"][1],
        help_text="Model size in billions of parameters (all tasks but rendering).",
    )
    precision = serializers.ChoiceField(
        choices=ModelPrecision.choices,
        required=False,
        allow_null=True,
        help_text="Inference: the weights. Training: the compute precision (mixed precision "
        "for bf16/fp16). LoRA: the frozen base. QLoRA: the compute precision (the base is "
        "4-bit). Default bf16 (rendering fp32).",
    )
    seq_len = serializers.IntegerField(
        required=False,
        allow_null=True,
        min_value=LIMITS["seq_len"][0],
        max_value=LIMITS["seq_len"][1],
        help_text="Tokens per sequence; default 2048 for training, 4096 for inference.",
    )
    batch = serializers.IntegerField(
        required=False,
        allow_null=True,
        min_value=LIMITS["batch"][0],
        max_value=LIMITS["batch"][1],
        help_text="Sequences per micro-batch (training, default 4) or served at once "
        "(inference, default 2).",
    )
    optimizer = serializers.ChoiceField(choices=Optimizer.choices, default=Optimizer.ADAM)
    checkpointing = serializers.BooleanField(
        default=True, help_text="Gradient (activation) checkpointing, for training tasks."
    )
    lora_rank = serializers.IntegerField(
        default=16, min_value=LIMITS["lora_rank"][0], max_value=LIMITS["lora_rank"][1]
    )
    scene_gb = serializers.FloatField(
        required=False,
        allow_null=True,
        min_value=LIMITS["scene_gb"][0],
        max_value=LIMITS["scene_gb"][1],
        help_text="Rendering: the scene's size in GB.",
    )

    def validate(self, attrs):
        try:
            TaskProfile(**attrs)
        except EstimateError as exc:
            raise serializers.ValidationError(exc.errors) from exc
        return attrs


def _duration_field():
    return serializers.IntegerField(
        min_value=1, help_text="How long you need the cards, in minutes."
    )


def _check_duration(minutes: int) -> int:
    most = settings.CARDPOOL["MAX_LEASE_MINUTES"]
    if minutes > most:
        raise serializers.ValidationError(
            _("The longest lease is %(hours)s hours; ask for less and extend later.")
            % {"hours": most // 60}
        )
    return minutes


class EstimateRequestSerializer(StrictSerializer):
    profile = TaskProfileSerializer()
    requirements = RequirementsSerializer(
        required=False, help_text="What the cards must have: stack, region, vendor…"
    )
    duration_minutes = _duration_field()
    start_at = DateTimeField(required=False, allow_null=True)
    priority = serializers.ChoiceField(choices=Priority.choices, default=Priority.NORMAL)
    start_policy = serializers.ChoiceField(
        choices=StartPolicy.choices,
        required=False,
        allow_blank=True,
        default="",
        help_text="next_off_peak or off_peak_only: start (and price) where the policy allows.",
    )

    def validate_duration_minutes(self, value: int) -> int:
        return _check_duration(value)


class LeaseByProfileSerializer(StrictSerializer):
    """POST /api/v1/leases/ with a ``profile`` instead of ``card_model``: the top option is asked for."""

    profile = TaskProfileSerializer()
    requirements = RequirementsSerializer(
        required=False, help_text="What the cards must have: stack, region, vendor…"
    )
    duration_minutes = _duration_field()
    start_at = DateTimeField(required=False, allow_null=True)
    team = serializers.SlugRelatedField(
        slug_field="slug",
        queryset=Team.objects.all(),
        required=False,
        error_messages={"does_not_exist": "Unknown team “{value}”."},
    )
    priority = serializers.ChoiceField(choices=Priority.choices, default=Priority.NORMAL)
    purpose = serializers.ChoiceField(
        choices=Purpose.choices,
        required=False,
        allow_null=True,
        help_text="Default: from the task (training, fine_tuning, inference, rendering).",
    )
    description = serializers.CharField(
        max_length=200, required=False, allow_blank=True, default=""
    )

    def validate_duration_minutes(self, value: int) -> int:
        return _check_duration(value)


# --- out -----------------------------------------------------------------------------------


class RoundedFloatField(serializers.FloatField):
    def to_representation(self, value):
        return round(float(value), 2)


class PartSerializer(serializers.Serializer):
    key = serializers.CharField()
    label = serializers.CharField()
    gb = RoundedFloatField()
    formula = serializers.CharField()


class EstimateSerializer(serializers.Serializer):
    profile = serializers.SerializerMethodField()
    layers = serializers.IntegerField(allow_null=True)
    hidden = serializers.IntegerField(allow_null=True)
    trainable_params = serializers.IntegerField()
    required_precision = serializers.CharField(
        help_text="The spec-sheet figure a card must publish."
    )
    parts = PartSerializer(source="all_parts", many=True)
    breakdown = serializers.DictField(child=RoundedFloatField(), help_text="GB per part.")
    total_gb = RoundedFloatField()
    formula = serializers.CharField()
    notes = serializers.ListField(child=serializers.CharField())

    def get_profile(self, est) -> dict:
        return asdict(est.profile)


class OptionSerializer(serializers.Serializer):
    card_model = serializers.CharField(source="card_model.slug")
    card_model_name = serializers.CharField(source="card_model.name")
    count = serializers.IntegerField()
    nodes = serializers.IntegerField(
        help_text="Nodes the cards span (more than 1: a plan across nodes)."
    )
    network = serializers.CharField(help_text="A plan across nodes: the nodes' network.")
    efficiency = RoundedFloatField(
        allow_null=True, help_text="Training on several cards: share of the time computing."
    )
    fit = RoundedFloatField(help_text="The task's figure over the best option's (0–1).")
    score = RoundedFloatField(
        help_text="Fit, cost and start weighed for the task (docs/estimator.md)."
    )
    energy_cost = serializers.DecimalField(
        max_digits=14,
        decimal_places=2,
        allow_null=True,
        help_text="Where the region's price is known.",
    )
    memory_gb = RoundedFloatField(help_text="Memory of one card.")
    per_card_gb = RoundedFloatField(help_text="Estimated need on each card.")
    headroom = RoundedFloatField(help_text="Share of each card's memory left free.")
    interconnect = serializers.CharField(source="card_model.interconnect_kind")
    start = serializers.DateTimeField()
    starts_now = serializers.BooleanField(
        help_text="Free at the wanted start: now, or start_at for a reservation."
    )
    price_per_hour = serializers.DecimalField(
        max_digits=12,
        decimal_places=4,
        help_text="The price per card-hour in force for your team at the start (off-peak "
        "tariff and preemptible discount included), in `currency`.",
    )
    currency = serializers.SerializerMethodField()

    def get_currency(self, option) -> str:
        return prices.currency()

    cost = serializers.DecimalField(max_digits=14, decimal_places=2)
    off_peak = serializers.BooleanField(
        help_text="Starts in an off-peak window: its tariff is in the cost."
    )
    explanation = serializers.CharField()
    request_url = serializers.SerializerMethodField()

    def get_request_url(self, option) -> str:
        return request_url(self.context["recommendation"], option)


class LeftOutSerializer(serializers.Serializer):
    card_model = serializers.CharField(source="card_model.slug")
    card_model_name = serializers.CharField(source="card_model.name")
    reason = serializers.CharField()


class ShortfallSerializer(serializers.Serializer):
    card_model = serializers.CharField(source="card_model.slug")
    card_model_name = serializers.CharField(source="card_model.name")
    cards = serializers.IntegerField(help_text="Cards the task needs of this model.")
    nodes = serializers.IntegerField(help_text="Nodes they span (1: one node).")
    per_node = serializers.IntegerField(help_text="Cards on each of those nodes.")
    pool_has = serializers.IntegerField(
        source="have",
        help_text="What the pool has for it: such nodes (nodes > 1), else cards.",
    )


class AlternativeSerializer(serializers.Serializer):
    task = serializers.CharField(source="profile.task")
    precision = serializers.CharField(source="profile.precision", allow_null=True)
    method = serializers.CharField(help_text="The smaller method, worded.")
    card_model = serializers.CharField(source="option.card_model.slug")
    card_model_name = serializers.CharField(source="option.card_model.name")
    count = serializers.IntegerField(source="option.count")
    nodes = serializers.IntegerField(source="option.nodes")
    start = serializers.DateTimeField(source="option.start")
    starts_now = serializers.BooleanField(source="option.starts_now")
    cost = serializers.DecimalField(source="option.cost", max_digits=14, decimal_places=2)
    request_url = serializers.SerializerMethodField()

    def get_request_url(self, alt) -> str:
        return request_url(alt.rec, alt.option)


class RecommendationSerializer(serializers.Serializer):
    estimate = EstimateSerializer()
    requirements = serializers.DictField(help_text="The requirements the options meet.")
    duration_minutes = serializers.SerializerMethodField()
    purpose = serializers.CharField()
    options = serializers.SerializerMethodField()
    left_out = LeftOutSerializer(many=True)
    message = serializers.CharField(help_text="Empty when the best option is free now.")
    shortfalls = ShortfallSerializer(
        many=True,
        help_text="Nothing fits: the models of the pool that would with more cards or nodes, "
        "closest first.",
    )
    alternatives = AlternativeSerializer(
        many=True,
        help_text="Nothing fits: the smaller methods (LoRA, QLoRA, quantized weights) that do, "
        "each with its best option.",
    )

    def get_duration_minutes(self, rec) -> int:
        return int(rec.duration.total_seconds() // 60)

    @extend_schema_field(OptionSerializer(many=True))
    def get_options(self, rec) -> list[dict]:
        return OptionSerializer(
            rec.options, many=True, context={**self.context, "recommendation": rec}
        ).data


def request_url(rec, option) -> str:
    """The request form, pre-filled with *option*."""
    return f"{reverse('leasing:new')}?{urlencode(rec.request_params(option))}"
