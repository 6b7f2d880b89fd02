"""Who may do what: the one place roles are checked (services and selectors call these)."""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.db.models import Q, QuerySet

from portal.models import Membership


def operators() -> QuerySet:
    """Everyone who acts as an operator and can hear of it: active operators and superusers
    (the one query of them: pool alerts, failed releases)."""
    return (
        get_user_model()
        .objects.filter(Q(is_superuser=True) | Q(profile__is_operator=True), is_active=True)
        .select_related("profile")
        .order_by("pk")
    )


def is_operator(user) -> bool:
    if not getattr(user, "is_authenticated", False):
        return False
    if user.is_superuser:
        return True
    profile = getattr(user, "profile", None)
    return bool(profile and profile.is_operator)


def is_finance(user) -> bool:
    profile = getattr(user, "profile", None) if getattr(user, "is_authenticated", False) else None
    return bool(profile and profile.is_finance)


def lead_memberships(user) -> QuerySet[Membership]:
    """*user*'s memberships as a lead: the one definition of "the teams this user leads"."""
    return Membership.objects.filter(user=user, role=Membership.Role.LEAD)


def teams_led_by(user) -> QuerySet:
    """The ids of the teams *user* leads, as a subquery: ``team_id__in=teams_led_by(user)``."""
    return lead_memberships(user).values("team_id")


def leads_team(user, team_id: int) -> bool:
    return lead_memberships(user).filter(team_id=team_id).exists()


def leads_of(team) -> list:
    """The leads of *team* (users, by id)."""
    return [
        m.user
        for m in Membership.objects.filter(team=team, role=Membership.Role.LEAD)
        .select_related("user__profile")
        .order_by("user_id")
    ]


def can_manage_lease(user, lease) -> bool:
    """The holder, a lead of the lease's team, or an operator."""
    if not getattr(user, "is_authenticated", False):
        return False
    return lease.user_id == user.pk or is_operator(user) or leads_team(user, lease.team_id)


def sees_pool(user) -> bool:
    """Whether a signed-in person may see anything of the pool (cards, nodes, charts, leases):
    operators, finance and members of a team. Someone who signed up or signed in through SSO
    but belongs to no team yet sees nothing until a lead or an operator adds them."""
    if not getattr(user, "is_authenticated", False):
        return False
    cached = getattr(user, "_cardpool_sees_pool", None)
    if cached is None:
        # Membership first: most people have one, and then this is the only query.
        cached = (
            Membership.objects.filter(user=user).exists() or is_operator(user) or is_finance(user)
        )
        user._cardpool_sees_pool = cached
    return cached
