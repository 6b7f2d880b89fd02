"""One FilterSet per list, shared by the page and the API (NetBox's ``filtersets`` style).

A page binds the FilterSet to its query string and shows its form (an invalid field is
reported on the form and left out of the filter); the API's ``DjangoFilterBackend`` answers
an invalid one with a 400 that names it. The same names work in both places.
"""

from __future__ import annotations

import django_filters
from django import forms
from django.db.models import QuerySet
from django.utils.translation import gettext_lazy as _

from inventory.models import Card, CardModel, InterconnectKind, Node, Precision, Region, Vendor

# The spec-sheet field that holds the peak figure for each precision.
PRECISION_FIELDS: dict[str, str] = {
    Precision.FP64: "fp64_tflops",
    Precision.FP32: "fp32_tflops",
    Precision.TF32: "tf32_tflops",
    Precision.FP16: "fp16_tflops",
    Precision.BF16: "bf16_tflops",
    Precision.FP8: "fp8_tflops",
    Precision.INT8: "int8_tops",
}


class CardModelFilterSet(django_filters.FilterSet):
    """The catalogue (page and ``/api/v1/card-models/``) and asking by requirements."""

    vendor = django_filters.ChoiceFilter(
        label=_("Vendor"), choices=Vendor.choices, empty_label=_("All vendors")
    )
    min_memory_gb = django_filters.NumberFilter(
        label=_("Memory at least (GB)"),
        field_name="memory_gb",
        lookup_expr="gte",
        min_value=0,
        widget=forms.NumberInput(attrs={"step": "any"}),
    )
    precision = django_filters.ChoiceFilter(
        label=_("Supports precision"),
        choices=Precision.choices,
        method="filter_precision",
        empty_label=_("Any precision"),
    )
    interconnect = django_filters.ChoiceFilter(
        label=_("Interconnect"),
        field_name="interconnect_kind",
        choices=InterconnectKind.choices,
        empty_label=_("Any interconnect"),
    )

    pool = django_filters.ChoiceFilter(
        label=_("Show"),
        choices=[("in", _("Models in this pool")), ("all", _("Every model in the catalogue"))],
        method="filter_pool",
        empty_label=None,
    )

    class Meta:
        model = CardModel
        fields: list[str] = []

    def filter_pool(self, queryset: QuerySet, name: str, value: str) -> QuerySet:
        """``in``: models this pool has cards of (the queryset counts them as ``total``)."""
        return queryset.filter(total__gt=0) if value == "in" else queryset

    def filter_precision(self, queryset: QuerySet, name: str, value: str) -> QuerySet:
        """Models whose spec sheet lists a figure for the precision."""
        return queryset.filter(**{f"{PRECISION_FIELDS[value]}__isnull": False})


class NodeFilterSet(django_filters.FilterSet):
    """The node list (page and ``/api/v1/nodes/``)."""

    region = django_filters.ModelChoiceFilter(
        label=_("Region"),
        queryset=Region.objects.all(),
        to_field_name="slug",
        empty_label=_("All regions"),
    )
    status = django_filters.ChoiceFilter(
        label=_("Status"), choices=Node.Status.choices, empty_label=_("Any status")
    )
    model = django_filters.ModelChoiceFilter(
        label=_("Card model"),
        queryset=CardModel.objects.all(),
        to_field_name="slug",
        empty_label=_("All card models"),
        method="filter_model",
    )

    class Meta:
        model = Node
        fields: list[str] = []

    def filter_model(self, queryset: QuerySet, name: str, value: CardModel) -> QuerySet:
        """Nodes holding cards of the model (not retired)."""
        held = Card.objects.in_service().filter(card_model=value)
        return queryset.filter(pk__in=held.values("node_id"))


class CardFilterSet(django_filters.FilterSet):
    """The card list (``/api/v1/cards/``)."""

    model = django_filters.ModelChoiceFilter(
        field_name="card_model",
        queryset=CardModel.objects.all(),
        to_field_name="slug",
        label=_("Card model (slug)"),
    )
    node = django_filters.ModelChoiceFilter(
        field_name="node",
        queryset=Node.objects.all(),
        to_field_name="hostname",
        label=_("Node (hostname)"),
    )
    status = django_filters.ChoiceFilter(choices=Card.Status.choices)
    region = django_filters.ModelChoiceFilter(
        field_name="node__region",
        queryset=Region.objects.all(),
        to_field_name="slug",
        label=_("Region (slug)"),
    )

    class Meta:
        model = Card
        fields: list[str] = []
