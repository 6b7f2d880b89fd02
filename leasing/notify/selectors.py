"""Reads for the notification centre and the webhook settings page."""

from __future__ import annotations

import logging

from django.db.models import Q, QuerySet

from leasing.models import Notification, Webhook
from portal.models import Team
from portal.permissions import is_operator, teams_led_by

logger = logging.getLogger(__name__)

# --- the notification centre -------------------------------------------------------------


def notifications_of(user, *, unread: bool = False) -> QuerySet[Notification]:
    notes = Notification.objects.filter(user=user)
    return notes.filter(read_at__isnull=True) if unread else notes


def unread_count(user) -> int:
    return notifications_of(user, unread=True).count()


# --- webhooks ----------------------------------------------------------------------------


def teams_managed_by(user) -> QuerySet[Team]:
    """Teams whose webhooks the user may manage: those they lead (operators: all)."""
    if is_operator(user):
        return Team.objects.order_by("slug")
    return Team.objects.filter(pk__in=teams_led_by(user)).order_by("slug")


def webhooks_managed_by(user) -> QuerySet[Webhook]:
    return Webhook.objects.filter(Q(user=user) | Q(team__in=teams_managed_by(user))).select_related(
        "team"
    )
