"""Every write to a team's rules: quota rules (operators) and member limits (leads)."""

from __future__ import annotations

import logging

from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.utils.translation import gettext as _

from inventory.models import Card, CardModel
from leasing.choices import OPEN_STATES
from leasing.locking import lock_team
from leasing.models import (
    GuaranteedShare,
    Lease,
    MemberLimit,
    Quota,
    QuotaLimits,
)
from portal.audit import audit
from portal.models import Membership, Team
from portal.permissions import is_operator, leads_team

logger = logging.getLogger(__name__)


# --- quotas ------------------------------------------------------------------------------


def _limits(values: dict) -> dict:
    unknown = set(values) - set(QuotaLimits.LIMIT_FIELDS) - {"money_per_month"}
    if unknown:
        raise ValidationError(
            _("Unknown limit(s): %(keys)s.") % {"keys": ", ".join(sorted(unknown))}
        )
    for key, value in values.items():
        if value is not None and value < 0:
            raise ValidationError(
                {key: [_("A limit cannot be negative; leave it empty for no limit.")]}
            )
    return values


def quota_set(*, user, team: Team, card_model: CardModel | None, **limits) -> Quota:
    """Set a team's limits for one card model (or all models); operators only."""
    if not is_operator(user):
        raise PermissionDenied(_("Only operators set team quotas."))
    values = _limits(limits)
    with transaction.atomic():
        lock_team(team.pk)
        quota, _created = Quota.objects.update_or_create(
            team=team, card_model=card_model, defaults=values
        )
        audit(actor=user, action="quota_set", target=str(quota), **values)
    return quota


def member_limit_set(
    *, user, membership: Membership, card_model: CardModel | None, **limits
) -> MemberLimit:
    """A lead sets a member's limits, each inside the team's own limit for the same scope."""
    if not (is_operator(user) or leads_team(user, membership.team_id)):
        raise PermissionDenied(_("Only a lead of the team or an operator sets members' limits."))
    values = _limits(limits)
    values.pop("money_per_month", None)
    team_rule = Quota.objects.filter(team_id=membership.team_id, card_model=card_model).first()
    errors = {}
    for key, value in values.items():
        ceiling = getattr(team_rule, key, None) if team_rule else None
        if value is not None and ceiling is not None and value > ceiling:
            errors[key] = [
                _("The team's own limit is %(ceiling)s; a member's limit must not be higher.")
                % {"ceiling": ceiling}
            ]
    if errors:
        raise ValidationError(errors)
    with transaction.atomic():
        lock_team(membership.team_id)
        limit, _created = MemberLimit.objects.update_or_create(
            membership=membership, card_model=card_model, defaults=values
        )
        audit(actor=user, action="member_limit_set", target=str(limit), **values)
    return limit


def quota_replace(*, user, team: Team, rules: list[dict]) -> list[Quota]:
    """Replace all of a team's quota rules at once (the API's PUT); operators only.

    Each rule is ``{"card_model": CardModel | None, <limits>}``; rules not given are removed.
    """
    if not is_operator(user):
        raise PermissionDenied(_("Only operators set team quotas."))
    seen: set[int | None] = set()
    for rule in rules:
        key = rule["card_model"].pk if rule.get("card_model") else None
        if key in seen:
            raise ValidationError(_("Two rules for the same card model; give each model once."))
        seen.add(key)
    with transaction.atomic():
        lock_team(team.pk)
        kept = []
        for rule in rules:
            limits = _limits({k: v for k, v in rule.items() if k != "card_model"})
            quota, _created = Quota.objects.update_or_create(
                team=team, card_model=rule.get("card_model"), defaults=limits
            )
            kept.append(quota)
        Quota.objects.filter(team=team).exclude(pk__in=[q.pk for q in kept]).delete()
        audit(
            actor=user,
            action="quota_replace",
            target=team.slug,
            rules=[{k: str(v) if v is not None else None for k, v in r.items()} for r in rules],
        )
    return kept


# --- guaranteed shares -----------------------------------------------------------------------


def share_set(
    *,
    user,
    team: Team,
    cards: int,
    within_minutes: int,
    card_model: CardModel | None = None,
    family: str = "",
) -> GuaranteedShare:
    """Give *team* a guaranteed share of *cards* cards of a card model (or of every model of a
    *family*), available to it within *within_minutes*; operators only. The shares of one
    model or family together may not guarantee more cards than it has in service. While the
    team does not use its cards, others may (their leases are then ``lent``, taken back first
    when the team asks: ``scheduler.shares``, ``scheduler.preemption``)."""
    if not is_operator(user):
        raise PermissionDenied(_("Only operators give guaranteed shares."))
    if bool(card_model) == bool(family):
        raise ValidationError(
            {"card_model": [_("Give either a card model or a card family, not both.")]}
        )
    if cards < 1:
        raise ValidationError({"cards": [_("A share guarantees at least one card.")]})
    if within_minutes < 1:
        raise ValidationError({"within_minutes": [_("Give the time in minutes (at least 1).")]})
    if family and not CardModel.objects.filter(family=family).exists():
        raise ValidationError({"family": [_("No card model is of family %(f)s.") % {"f": family}]})
    scope = {"card_model": card_model} if card_model else {"card_model__family": family}
    in_service = Card.objects.in_service().filter(**scope).count()
    others = (
        GuaranteedShare.objects.filter(card_model=card_model, family=family)
        .exclude(team=team)
        .values_list("cards", flat=True)
    )
    if sum(others) + cards > in_service:
        raise ValidationError(
            {
                "cards": [
                    _(
                        "Shares of %(scope)s would guarantee %(total)s cards; only %(n)s are in "
                        "service."
                    )
                    % {
                        "scope": card_model.name if card_model else family,
                        "total": sum(others) + cards,
                        "n": in_service,
                    }
                ]
            }
        )
    with transaction.atomic():
        lock_team(team.pk)
        share, _created = GuaranteedShare.objects.update_or_create(
            team=team,
            card_model=card_model,
            family=family,
            defaults={"cards": cards, "within_minutes": within_minutes},
        )
        audit(
            actor=user,
            action="share_set",
            target=str(share),
            cards=cards,
            within_minutes=within_minutes,
        )
    return share


def share_remove(*, user, share: GuaranteedShare) -> None:
    """Take a team's guaranteed share away; operators only (leases on loan stay as they are)."""
    if not is_operator(user):
        raise PermissionDenied(_("Only operators give guaranteed shares."))
    with transaction.atomic():
        lock_team(share.team_id)
        audit(actor=user, action="share_remove", target=str(share))
        share.delete()


def share_replace(*, user, team: Team, shares: list[dict]) -> list[GuaranteedShare]:
    """Replace all of a team's guaranteed shares at once (the API's PUT); operators only.
    Each is ``{"card_model": CardModel | None, "family": str, "cards", "within_minutes"}``;
    shares not given are removed. All or nothing."""
    if not is_operator(user):
        raise PermissionDenied(_("Only operators give guaranteed shares."))
    scopes = [
        (s.get("card_model").pk if s.get("card_model") else None, s.get("family") or "")
        for s in shares
    ]
    if len(set(scopes)) != len(scopes):
        raise ValidationError(_("Two shares for the same card model or family; give each once."))
    with transaction.atomic():
        kept = [
            share_set(
                user=user,
                team=team,
                card_model=s.get("card_model"),
                family=s.get("family") or "",
                cards=s["cards"],
                within_minutes=s["within_minutes"],
            )
            for s in shares
        ]
        GuaranteedShare.objects.filter(team=team).exclude(pk__in=[k.pk for k in kept]).delete()
    return kept


# --- members and the team's idle policy (leads) ----------------------------------------------


def _may_manage_team(user, team: Team) -> None:
    if not (is_operator(user) or leads_team(user, team.pk)):
        raise PermissionDenied(_("Only a lead of the team or an operator manages its members."))


def membership_add(*, user, team: Team, member, role: str = Membership.Role.MEMBER) -> Membership:
    """A lead adds an existing account to the team (as a member); operators may add leads."""
    _may_manage_team(user, team)
    if role not in Membership.Role.values:
        raise ValidationError({"role": [_("Unknown role.")]})
    if role == Membership.Role.LEAD and not is_operator(user):
        raise PermissionDenied(_("Only operators make someone a team lead."))
    if not member.is_active:
        raise ValidationError({"username": [_("This account is deactivated.")]})
    with transaction.atomic():
        lock_team(team.pk)
        if Membership.objects.filter(team=team, user=member).exists():
            raise ValidationError(
                {"username": [_("%(user)s is in the team already.") % {"user": member}]}
            )
        membership = Membership.objects.create(team=team, user=member, role=role)
        audit(
            actor=user, action="membership_add", target=team.slug, user=member.username, role=role
        )
    return membership


def membership_remove(*, user, membership: Membership) -> None:
    """A lead takes someone out of the team. Refused while they hold or wait for cards on the
    team's account (end or cancel those first), for the team's last lead, and for a
    membership that comes from a directory group (the directory's to change)."""
    team = membership.team
    _may_manage_team(user, team)
    if membership.source == Membership.Source.DIRECTORY:
        raise ValidationError(
            _(
                "%(user)s is in the team through a directory group; change the group in the "
                "directory (the next sync follows it)."
            )
            % {"user": membership.user.get_username()}
        )
    with transaction.atomic():
        lock_team(team.pk)
        if membership.role == Membership.Role.LEAD:
            if not is_operator(user):
                raise PermissionDenied(_("Only operators remove a team lead."))
            leads = Membership.objects.filter(team=team, role=Membership.Role.LEAD).count()
            if leads <= 1:
                raise ValidationError(_("A team keeps at least one lead."))
        open_leases = Lease.objects.filter(
            team=team, user_id=membership.user_id, status__in=OPEN_STATES
        ).count()
        if open_leases:
            raise ValidationError(
                _(
                    "%(user)s still has %(n)s open lease(s) on this team; they end or are "
                    "cancelled first."
                )
                % {"user": membership.user.get_username(), "n": open_leases}
            )
        MemberLimit.objects.filter(membership=membership).delete()
        Membership.objects.filter(pk=membership.pk).delete()
        audit(
            actor=user,
            action="membership_remove",
            target=team.slug,
            user=membership.user.get_username(),
        )


IDLE_MINUTES_MAX = 7 * 24 * 60


def team_idle_policy_set(
    *, user, team: Team, idle_reclaim: bool, idle_threshold_pct: int, idle_minutes: int
) -> Team:
    """A lead sets when the team's leases count as idle and whether idle leases are ended."""
    _may_manage_team(user, team)
    errors = {}
    if not 0 <= idle_threshold_pct <= 100:
        errors["idle_threshold_pct"] = [_("A percentage from 0 to 100.")]
    if not 5 <= idle_minutes <= IDLE_MINUTES_MAX:
        errors["idle_minutes"] = [
            _("From 5 minutes to %(max)s minutes (a week).") % {"max": IDLE_MINUTES_MAX}
        ]
    if errors:
        raise ValidationError(errors)
    values = {
        "idle_reclaim": bool(idle_reclaim),
        "idle_threshold_pct": idle_threshold_pct,
        "idle_minutes": idle_minutes,
    }
    with transaction.atomic():
        lock_team(team.pk)
        Team.objects.filter(pk=team.pk).update(**values)
        audit(actor=user, action="team_idle_policy_set", target=team.slug, **values)
    for key, value in values.items():
        setattr(team, key, value)
    return team
