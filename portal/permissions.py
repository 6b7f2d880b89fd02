"""Who may do what: the one place roles are checked (services and selectors call these)."""

from __future__ import annotations

from portal.models import Membership


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


def leads_team(user, team_id: int) -> bool:
    return Membership.objects.filter(user=user, team_id=team_id, role=Membership.Role.LEAD).exists()


def can_manage_lease(user, lease) -> bool:
    """The holder, a lead of the lease's team, or an operator."""
    if not getattr(user, "is_authenticated", False):
        return False
    return lease.user_id == user.pk or is_operator(user) or leads_team(user, lease.team_id)
