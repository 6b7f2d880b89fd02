"""The lease list's filters, one FilterSet for the page (``/leases/``) and the API
(``/api/v1/leases/``), as ``inventory.filters`` does for the catalogue and the nodes.

The queryset it filters is already what the person may see (``Lease.objects.visible_to``);
``scope`` narrows it to their own leases ("mine", the default) or keeps every lease they see
("team", or "all": the same). The API answers an unknown value with a 400 that names the
field; the page reports it on the form and shows the default.
"""

from __future__ import annotations

import django_filters
from django.db.models import QuerySet
from django.utils.translation import gettext_lazy as _

from leasing.choices import LeaseStatus
from leasing.models import Lease

SCOPES = [
    ("mine", _("My leases")),
    ("team", _("My teams' leases")),
    ("all", _("All leases")),
]


class LeaseFilterSet(django_filters.FilterSet):
    scope = django_filters.ChoiceFilter(
        label=_("Whose"),
        choices=SCOPES,
        method="filter_scope",
        empty_label=None,
        help_text=_(
            "mine (the default): your own leases. team (or all): every lease you may see: "
            "your teams' as a lead, everyone's as finance or an operator."
        ),
    )
    status = django_filters.ChoiceFilter(label=_("Status"), choices=LeaseStatus.choices)
    team__slug = django_filters.CharFilter(label=_("Team"), field_name="team__slug")
    card_model__slug = django_filters.CharFilter(
        label=_("Card model"), field_name="card_model__slug"
    )

    class Meta:
        model = Lease
        fields: list[str] = []

    def filter_scope(self, queryset: QuerySet, name: str, value: str) -> QuerySet:
        return queryset if value in ("team", "all") else self._mine(queryset)

    def _mine(self, queryset: QuerySet) -> QuerySet:
        return queryset.filter(user=self.request.user)

    def filter_queryset(self, queryset: QuerySet) -> QuerySet:
        if not self.form.cleaned_data.get("scope"):
            queryset = self._mine(queryset)  # the default: one's own leases
        return super().filter_queryset(queryset)

    @property
    def scope_in_effect(self) -> str:
        """The scope in effect ("mine" unless a valid other one was asked for)."""
        data = getattr(self.form, "cleaned_data", {}) or {}
        return "team" if data.get("scope") in ("team", "all") else "mine"
