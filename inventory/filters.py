"""One FilterSet per list, shared by the page and the API (NetBox's ``filtersets`` style).

A page binds the FilterSet to its query string and shows its form (an invalid field is
reported on the form and left out of the filter); the API's ``DjangoFilterBackend`` answers
an invalid one with a 400 that names it. The same names work in both places.
"""

from __future__ import annotations

import django_filters
from django import forms
from django.core.validators import RegexValidator
from django.db.models import QuerySet
from django.utils.translation import gettext_lazy as _

from inventory.models import Card, CardModel, Node, Region
from inventory.requirements import (
    REQUIREMENTS,
    VERSION_PATTERN,
    Requirement,
    model_q,
    models_with_cards_on,
    nodes_meeting,
    requirement_errors,
    stored,
)


def _requirement_filter(req: Requirement) -> django_filters.Filter:
    """The FilterSet's shape of one requirement (``inventory.requirements``)."""
    method = "filter_requirement" if req.on == "model" else "filter_node_requirement"
    common = {"label": req.label, "method": method}
    if req.kind == "choice":
        return django_filters.ChoiceFilter(choices=req.choices, empty_label=_("Any"), **common)
    if req.kind == "number":
        return django_filters.NumberFilter(
            min_value=0, widget=forms.NumberInput(attrs={"step": "any"}), **common
        )
    if req.kind == "version":
        return django_filters.CharFilter(
            max_length=40,
            validators=[RegexValidator(VERSION_PATTERN, _("Enter a version such as 12.2."))],
            **common,
        )
    return django_filters.ModelChoiceFilter(
        queryset=Region.objects.all(), to_field_name="slug", empty_label=_("Any region"), **common
    )


class RequirementsForm(forms.Form):
    """The FilterSet's form: the requirements' cross-field rule on top of each field's."""

    def clean(self):
        data = super().clean()
        for name, message in requirement_errors(data).items():
            self.add_error(name, message)
        return data


class CardModelFilterSet(django_filters.FilterSet):
    """The catalogue (page and ``/api/v1/card-models/``) and asking by requirements: one
    filter per entry of ``inventory.requirements.REQUIREMENTS``. Node requirements keep the
    models with cards on a node meeting all of them together."""

    locals().update({req.name: _requirement_filter(req) for req in REQUIREMENTS})

    pool = django_filters.ChoiceFilter(
        label=_("Show"),
        choices=[("in", _("Models in this pool")), ("all", _("Every model in the catalogue"))],
        method="filter_pool",
        empty_label=None,
    )

    class Meta:
        model = CardModel
        fields: list[str] = []
        form = RequirementsForm

    def filter_requirement(self, queryset: QuerySet, name: str, value) -> QuerySet:
        """A model requirement filters here."""
        return queryset.filter(model_q({name: value}))

    def filter_node_requirement(self, queryset: QuerySet, name: str, value: str) -> QuerySet:
        """Node requirements filter together, in ``filter_queryset`` (a region's slug)."""
        return queryset

    def filter_queryset(self, queryset: QuerySet) -> QuerySet:
        queryset = super().filter_queryset(queryset)
        nodes = nodes_meeting(stored(self.form.cleaned_data))
        if nodes is not None:
            queryset = queryset.filter(models_with_cards_on(nodes))
        return queryset

    def filter_pool(self, queryset: QuerySet, name: str, value: str) -> QuerySet:
        """``in``: models this pool has cards of (the queryset counts them as ``total``)."""
        return queryset.filter(total__gt=0) if value == "in" else queryset


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
