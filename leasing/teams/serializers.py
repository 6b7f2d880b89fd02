"""The team API's shapes: teams, quota rules and their use this month."""

from __future__ import annotations

from rest_framework import serializers

from inventory.models import CardModel
from portal.input import MAX_LIMIT_CARDS, StrictSerializer, validate_lease_hours
from portal.models import Team


class TeamSerializer(serializers.ModelSerializer):
    department = serializers.CharField(source="department.slug", default=None, read_only=True)

    class Meta:
        model = Team
        fields = ["slug", "name", "department", "allow_borrowing"]


class ShareSerializer(StrictSerializer):
    """A guaranteed share: cards of a card model (or of a family) the team gets within a
    stated time; lent to others while it does not use them."""

    card_model = serializers.SlugRelatedField(
        slug_field="slug",
        queryset=CardModel.objects.all(),
        allow_null=True,
        required=False,
        default=None,
        error_messages={"does_not_exist": "Unknown card model “{value}”."},
    )
    family = serializers.CharField(max_length=40, required=False, allow_blank=True, default="")
    cards = serializers.IntegerField(min_value=1, max_value=MAX_LIMIT_CARDS)
    within_minutes = serializers.IntegerField(min_value=1, max_value=24 * 60)


class QuotaRuleSerializer(StrictSerializer):
    card_model = serializers.SlugRelatedField(
        slug_field="slug",
        queryset=CardModel.objects.all(),
        allow_null=True,
        required=False,
        default=None,
        error_messages={"does_not_exist": "Unknown card model “{value}”."},
    )
    max_concurrent_cards = serializers.IntegerField(
        min_value=0, max_value=MAX_LIMIT_CARDS, allow_null=True, required=False, default=None
    )
    card_hours_per_month = serializers.DecimalField(
        max_digits=12, decimal_places=1, min_value=0, allow_null=True, required=False, default=None
    )
    max_lease_hours = serializers.IntegerField(
        min_value=1,
        allow_null=True,
        required=False,
        default=None,
        validators=[validate_lease_hours],
    )
    money_per_month = serializers.DecimalField(
        max_digits=14, decimal_places=2, min_value=0, allow_null=True, required=False, default=None
    )


class QuotaUseSerializer(serializers.Serializer):
    """A quota rule (or a model in use) with this month's use."""

    card_model = serializers.CharField(source="card_model.slug", default=None)
    max_concurrent_cards = serializers.IntegerField(
        source="rule.max_concurrent_cards", default=None
    )
    card_hours_per_month = serializers.DecimalField(
        source="rule.card_hours_per_month", max_digits=12, decimal_places=1, default=None
    )
    max_lease_hours = serializers.IntegerField(source="rule.max_lease_hours", default=None)
    money_per_month = serializers.DecimalField(
        source="rule.money_per_month", max_digits=14, decimal_places=2, default=None
    )
    used_card_hours = serializers.DecimalField(source="used_hours", max_digits=14, decimal_places=2)
    booked_card_hours = serializers.DecimalField(
        source="booked_hours", max_digits=14, decimal_places=2
    )
    waiting_card_hours = serializers.DecimalField(
        source="waiting_hours",
        max_digits=14,
        decimal_places=2,
        help_text="Requests still waiting (queue or approval): admitted, counted against the "
        "budget, neither used nor booked yet.",
    )
    left_card_hours = serializers.DecimalField(
        source="left_hours", max_digits=14, decimal_places=2, allow_null=True
    )
    cost = serializers.DecimalField(
        source="money",
        max_digits=16,
        decimal_places=2,
        help_text="This month's cost as the money budget counts it: spent so far + booked ahead.",
    )
    cost_so_far = serializers.DecimalField(
        source="money_spent",
        max_digits=16,
        decimal_places=2,
        help_text="Held up to now, at the bill's prices (the reports' recorded + accrued).",
    )
    cards_held_now = serializers.IntegerField(source="concurrent_now")


class MemberSerializer(serializers.Serializer):
    """A member of a team as the API shows one."""

    username = serializers.CharField(source="user.username", read_only=True)
    role = serializers.CharField(read_only=True)
    joined_at = serializers.DateTimeField(read_only=True)


class MemberAddSerializer(StrictSerializer):
    username = serializers.CharField(max_length=150)


class FairShareSerializer(StrictSerializer):
    """A team's fair share: the weight operators set (PUT), and what the last recomputation
    found (read only): its share of the pool, recent use, factor and work ahead."""

    weight = serializers.FloatField(min_value=0.000001, max_value=1_000_000)
    share = serializers.FloatField(read_only=True, help_text="Its weight over every team's.")
    use = serializers.FloatField(
        read_only=True, help_text="Decayed card-hours weighted by list price."
    )
    use_fraction = serializers.FloatField(read_only=True, help_text="Of every team's use.")
    factor = serializers.FloatField(
        read_only=True, help_text="2^(-use fraction / share): 1 no use, 0.5 at its share."
    )
    ahead = serializers.FloatField(
        read_only=True,
        help_text="Other teams' recent demand up to their shares, of the pool: a queued "
        "lease's planned wait is told over (1 - ahead).",
    )
    computed_at = serializers.DateTimeField(read_only=True, allow_null=True)


class FairSharePolicySerializer(StrictSerializer):
    """The site's fair-share settings; PUT changes the fields given."""

    half_life_hours = serializers.FloatField(min_value=0.001, max_value=24 * 365, required=False)
    every_minutes = serializers.IntegerField(min_value=1, max_value=24 * 60, required=False)
    reclaim = serializers.BooleanField(
        required=False,
        help_text="Whether a team below its share takes cards back from teams above theirs "
        "(leases that agreed to be requeued, with 6 h left, that ran 1 h).",
    )
    computed_at = serializers.DateTimeField(read_only=True, allow_null=True)
