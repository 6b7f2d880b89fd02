"""Reads for the notification centre and the webhook settings page."""

from __future__ import annotations

import logging

from django.db.models import Q, QuerySet

from leasing.models import Notification, Webhook
from portal.models import Membership, Team
from portal.permissions import is_operator

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
    led = Membership.objects.filter(user=user, role=Membership.Role.LEAD).values("team_id")
    return Team.objects.filter(pk__in=led).order_by("slug")


def webhooks_managed_by(user) -> QuerySet[Webhook]:
    return Webhook.objects.filter(Q(user=user) | Q(team__in=teams_managed_by(user))).select_related(
        "team"
    )
