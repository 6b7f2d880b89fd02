"""REST API for the inventory: /api/v1/card-models/, /api/v1/nodes/, /api/v1/cards/ (read-only)."""

from __future__ import annotations

from django.db.models import QuerySet
from django.utils import timezone
from django.utils.translation import gettext_lazy as _
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, viewsets
from rest_framework.decorators import action
from rest_framework.response import Response
from rest_framework.routers import BaseRouter

from inventory.filters import CardFilterSet, CardModelFilterSet, NodeFilterSet
from inventory.models import Card, CardModel, Node
from inventory.requirements import PRECISION_FIELDS
from leasing.billing import prices
from leasing.lifecycle import maintenance
from leasing.scheduler import availability
from portal.input import DateTimeField, StrictSerializer

# Hostnames hold dots, which DRF's default lookup pattern ([^/.]+) refuses.
HOSTNAME_LOOKUP = r"[^/]+"

# --- Serializers ----------------------------------------------------------------------

_SPEC_DECIMALS = (
    "memory_gb",
    *PRECISION_FIELDS.values(),
)


class CardModelSerializer(serializers.ModelSerializer):
    total = serializers.IntegerField(read_only=True, help_text=_("Cards not retired."))
    available = serializers.IntegerField(
        read_only=True,
        help_text=_("Healthy cards on nodes taking leases that nobody holds now."),
    )
    price_per_hour = serializers.SerializerMethodField(
        help_text=_(
            "What a card-hour started now is billed to your team (team price over list "
            "price, with the off-peak tariff in force), in `currency`."
        )
    )
    currency = serializers.SerializerMethodField(
        help_text=_("The site's currency code (CARDPOOL_CURRENCY).")
    )

    def get_price_per_hour(self, cm) -> float:
        priced = self.context.get("prices")
        if priced is None or cm.pk not in priced:
            request = self.context.get("request")
            priced = prices.prices_now(
                [cm],
                team_id=prices.reader_team_id(getattr(request, "user", None)),
                at=timezone.now(),
            )
        return float(priced[cm.pk])

    def get_currency(self, cm) -> str:
        return prices.currency()

    class Meta:
        model = CardModel
        fields = [
            "slug",
            "name",
            "vendor",
            "architecture",
            "family",
            "form_factor",
            "memory_gb",
            "memory_bandwidth_gbs",
            *PRECISION_FIELDS.values(),
            "interconnect_kind",
            "interconnect_gbs",
            "tdp_w",
            "software_stack",
            "stack_family",
            "graphics",
            "price_per_hour",
            "currency",
            "source_url",
            "total",
            "available",
        ]
        # Spec-sheet figures are numbers in JSON, not strings.
        extra_kwargs = {name: {"coerce_to_string": False} for name in _SPEC_DECIMALS}


class NodeSerializer(serializers.ModelSerializer):
    region = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    cards_total = serializers.IntegerField(read_only=True, help_text=_("Cards not retired."))
    cards_available = serializers.IntegerField(read_only=True, help_text=_("Cards free now."))

    class Meta:
        model = Node
        fields = [
            "hostname",
            "region",
            "status",
            "drain_at",
            "network_kind",
            "network_gbps",
            "cpu_cores",
            "memory_gb",
            "driver_version",
            "software_versions",
            "labels",
            "cards_total",
            "cards_available",
        ]


class CardSerializer(serializers.ModelSerializer):
    node = serializers.SlugRelatedField(slug_field="hostname", read_only=True)
    region = serializers.CharField(source="node.region.slug", read_only=True)
    card_model = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    busy_until = serializers.DateTimeField(
        read_only=True,
        allow_null=True,
        help_text=_("End of the allocation holding the card now; null when nobody holds it."),
    )

    class Meta:
        model = Card
        fields = [
            "uuid",
            "node",
            "region",
            "index",
            "card_model",
            "interconnect_domain",
            "status",
            "health_note",
            "busy_until",
        ]


class DrainSerializer(StrictSerializer):
    drain_at = DateTimeField(help_text="When the node goes into maintenance (ISO 8601).")


class DrainResultSerializer(serializers.Serializer):
    warned = serializers.IntegerField(help_text="Leases whose holders were warned.")


class UndrainSerializer(StrictSerializer):
    """No fields: an undrain takes none (any sent is named in a 400)."""


class FaultySerializer(StrictSerializer):
    note = serializers.CharField(max_length=200, required=False, allow_blank=True, default="")


class FaultyResultSerializer(serializers.Serializer):
    lease = serializers.ChoiceField(choices=["moved", "ended", "idle"])


# --- Viewsets -------------------------------------------------------------------------


class CardModelViewSet(viewsets.ReadOnlyModelViewSet):
    """Card models (spec sheets) with how many cards exist and how many are free now."""

    queryset = CardModel.objects.all()
    serializer_class = CardModelSerializer
    filterset_class = CardModelFilterSet
    lookup_field = "slug"

    def get_queryset(self) -> QuerySet[CardModel]:
        return availability.card_models_with_counts(timezone.now())

    def get_serializer(self, *args, **kwargs):
        # Price the page's models for the reader's team at once (two queries, not per row).
        if args:
            models = args[0] if kwargs.get("many") else [args[0]]
            self._prices = prices.prices_now(
                list(models),
                team_id=prices.reader_team_id(self.request.user),
                at=timezone.now(),
            )
        return super().get_serializer(*args, **kwargs)

    def get_serializer_context(self):
        return {**super().get_serializer_context(), "prices": getattr(self, "_prices", None)}


class NodeViewSet(viewsets.ReadOnlyModelViewSet):
    """Nodes with their card counts."""

    queryset = Node.objects.all()
    serializer_class = NodeSerializer
    filterset_class = NodeFilterSet
    lookup_field = "hostname"
    lookup_value_regex = HOSTNAME_LOOKUP

    def get_queryset(self) -> QuerySet[Node]:
        return availability.nodes_with_counts(timezone.now())

    @extend_schema(request=DrainSerializer, responses={200: DrainResultSerializer})
    @action(detail=True, methods=["post"])
    def drain(self, request, hostname=None):
        """Operators: no lease may run past ``drain_at``; holders of longer leases are warned."""
        data = DrainSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        warned = maintenance.node_drain(
            user=request.user, node=self.get_object(), drain_at=data.validated_data["drain_at"]
        )
        return Response({"warned": warned})

    @extend_schema(request=UndrainSerializer, responses={200: NodeSerializer})
    @action(detail=True, methods=["post"])
    def undrain(self, request, hostname=None):
        """Operators: take the node out of draining or maintenance; it takes leases again and
        leases its drain cut show their booked end again."""
        UndrainSerializer(data=request.data).is_valid(raise_exception=True)
        maintenance.node_undrain(user=request.user, node=self.get_object())
        node = self.get_queryset().get(hostname=hostname)
        return Response(NodeSerializer(node).data)


class CardViewSet(viewsets.ReadOnlyModelViewSet):
    """Cards, each with the end of the allocation holding it now (if any)."""

    queryset = Card.objects.all()
    serializer_class = CardSerializer
    filterset_class = CardFilterSet
    lookup_field = "uuid"
    lookup_value_regex = r"[^/]+"

    def get_queryset(self) -> QuerySet[Card]:
        return availability.cards_list(timezone.now())

    @extend_schema(request=FaultySerializer, responses={200: FaultyResultSerializer})
    @action(detail=True, methods=["post"])
    def faulty(self, request, uuid=None):
        """Operators: take the card out of service; its lease moves to a spare or ends."""

        data = FaultySerializer(data=request.data)
        data.is_valid(raise_exception=True)
        outcome = maintenance.card_mark_faulty(
            user=request.user, card=self.get_object(), note=data.validated_data["note"]
        )
        return Response({"lease": outcome})


def register(router: BaseRouter) -> None:
    router.register("card-models", CardModelViewSet, basename="card-model")
    router.register("nodes", NodeViewSet, basename="node")
    router.register("cards", CardViewSet, basename="card")
