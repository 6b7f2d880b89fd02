"""Pool health, read: the alerts list (one FilterSet for the page and the API) and the pool
page's health summary."""

from __future__ import annotations

from datetime import datetime

import django_filters
from django.db.models import Count, Q, QuerySet
from django.utils.translation import gettext_lazy as _

from inventory.models import Card
from leasing.choices import LASTING_ALERT_STATES, AlertKind, AlertSeverity, AlertStatus
from leasing.models import Alert


class AlertFilterSet(django_filters.FilterSet):
    """The alerts page and ``/api/v1/alerts/``: by status, rule, severity, node."""

    status = django_filters.ChoiceFilter(
        label=_("Status"), choices=AlertStatus.choices, empty_label=_("All")
    )
    kind = django_filters.ChoiceFilter(
        label=_("Rule"), choices=AlertKind.choices, empty_label=_("All rules")
    )
    severity = django_filters.ChoiceFilter(
        label=_("Severity"), choices=AlertSeverity.choices, empty_label=_("All")
    )
    lasting = django_filters.ChoiceFilter(
        label=_("Still lasting"),
        choices=[("true", _("Yes")), ("false", _("No"))],
        empty_label=_("All"),
        method="filter_lasting",
    )

    class Meta:
        model = Alert
        fields = ["status", "kind", "severity"]

    def filter_lasting(self, queryset: QuerySet[Alert], name: str, value: str):
        if not value:
            return queryset
        lasting = Q(status__in=LASTING_ALERT_STATES)
        return queryset.filter(lasting if value == "true" else ~lasting)


def alerts_list() -> QuerySet[Alert]:
    """Every alert with what the page shows, newest first (filter with AlertFilterSet)."""
    return Alert.objects.select_related(
        "card__node", "card__card_model", "node", "acknowledged_by", "silenced_by"
    ).order_by("-opened_at", "-pk")


def lasting_count() -> int:
    """Alerts open or acknowledged (the nav's badge for operators)."""
    return Alert.objects.filter(status__in=LASTING_ALERT_STATES).count()


def health_summary(now: datetime) -> dict[str, int]:
    """The pool page's health line: cards hot, throttling (at the power limit), on a silent
    node, faulty; and the alerts still open (two queries)."""
    cards = Card.objects.in_service().aggregate(
        hot=Count("pk", filter=Q(health=Card.Health.HOT)),
        offline=Count("pk", filter=Q(health=Card.Health.UNKNOWN)),
        faulty=Count("pk", filter=Q(status=Card.Status.FAULTY)),
    )
    alerts = Alert.objects.filter(status__in=LASTING_ALERT_STATES).aggregate(
        throttling=Count("card_id", filter=Q(kind=AlertKind.POWER_LIMIT), distinct=True),
        open=Count("pk", filter=Q(status=AlertStatus.OPEN)),
        lasting=Count("pk"),
    )
    return {**cards, **alerts}
