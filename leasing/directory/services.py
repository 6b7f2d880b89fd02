"""The directory's word on people: their Unix account and teams from directory groups
(applied at sign-in and by the periodic sync), and leavers losing access.

- ``directory_sign_in``: each LDAP or OIDC sign-in records the person's directory account and
  lets their teams follow their groups.
- ``directory_sync``: one pass over everyone the LDAP directory returned (sync.py reads it).
- ``teams_apply``: memberships that came from the directory follow the groups; a lead's or an
  operator's memberships (``Membership.Source.MANUAL``) are never touched.
- ``account_leave``: someone the directory removed or disabled, or an operator deactivated,
  loses every way in, and their cards are taken back or passed to the team's lead
  (CARDPOOL_LEAVER_LEASES).
"""

from __future__ import annotations

import logging
from datetime import datetime

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import transaction
from django.utils import timezone

from leasing.choices import RUNNING_STATES, EndReason, Kind, LeaseStatus
from leasing.lifecycle.changes import lease_cancel
from leasing.lifecycle.endings import lease_end_now
from leasing.locking import lock_team
from leasing.models import Lease, MemberLimit, Session
from leasing.notify.messages import notice_to
from leasing.transitions import event_record
from leasing.workbench.keys import ssh_key_remove
from leasing.workbench.sessions import session_stop
from portal.audit import audit
from portal.directory import Person
from portal.models import DirectoryAccount, Membership, Team
from portal.tokens.services import token_revoke_all

logger = logging.getLogger(__name__)

LEAD, MEMBER = Membership.Role.LEAD, Membership.Role.MEMBER
FROM_DIRECTORY = Membership.Source.DIRECTORY
# Not started yet: cancelled when their holder leaves the team or the site.
NOT_STARTED = (LeaseStatus.PENDING_APPROVAL, LeaseStatus.QUEUED, LeaseStatus.SCHEDULED)


def directory_account_record(user, person: Person, source: str, now: datetime) -> DirectoryAccount:
    values = {
        "source": source,
        "dn": person.dn[:500],
        "uid": person.uid[:64],
        "uid_number": person.uid_number,
        "gid_number": person.gid_number,
        "home": person.home[:255],
        "shell": person.shell[:255],
        "seen_at": now,
    }
    if person.groups is not None:
        values["groups"] = person.groups
    account, _created = DirectoryAccount.objects.update_or_create(user=user, defaults=values)
    return account


def account_let_back(user, account: DirectoryAccount, now: datetime) -> None:
    """The directory lets back a person it had let go: the account is active again (only an
    account the directory deactivated; an operator's deactivation stays)."""
    get_user_model().objects.filter(pk=user.pk).update(is_active=True)
    user.is_active = True
    DirectoryAccount.objects.filter(pk=account.pk).update(left_at=None, left_reason="")
    audit(actor=None, action="directory_returned", target=user.get_username())


def directory_sign_in(*, user, person: Person, source: str, now: datetime | None = None) -> None:
    """At each directory sign-in (LDAP bind or OIDC code flow): record the person's Unix
    account and groups, let them back if the directory had let them go, and let their teams
    follow their groups."""
    now = now or timezone.now()
    with transaction.atomic():
        lock_person(user)
        ldap_linked = DirectoryAccount.objects.filter(
            user=user, source=DirectoryAccount.Source.LDAP
        ).exists()
        if source == DirectoryAccount.Source.LDAP or not ldap_linked:
            # An OIDC sign-in of someone the LDAP directory knows keeps the LDAP record (its
            # Unix account, and the sync's hold on leavers); only the teams follow the claim.
            account = directory_account_record(user, person, source, now)
            if account.left_at is not None:
                account_let_back(user, account, now)
        if person.groups is not None:
            teams_apply(user=user, groups=person.groups, now=now)


def lock_person(user) -> None:
    """Serialise the directory's changes to one person (sign-in, sync, leaving)."""
    get_user_model().objects.select_for_update().filter(pk=user.pk).values_list("pk").first()


# --- teams from groups ---------------------------------------------------------------------


def wanted_teams(groups: list[str]) -> dict[str, str]:
    """{team slug: role} the groups give (lead wins over member)."""
    wanted: dict[str, str] = {}
    for group in groups:
        for slug, role in settings.CARDPOOL_DIRECTORY["TEAMS"].get(group, []):
            if wanted.get(slug) != LEAD:
                wanted[slug] = role
    return wanted


def _flag_last_lead(membership: Membership, now: datetime) -> None:
    """The directory would leave the team without a lead: the lead stays, operators hear."""
    team, user = membership.team, membership.user
    audit(actor=None, action="directory_last_lead_kept", target=team.slug, user=user.username)
    for operator in get_user_model().objects.filter(profile__is_operator=True, is_active=True):
        notice_to(
            operator,
            kind=Kind.DIRECTORY,
            message="last_lead_kept",
            params={"team": team.name, "user": user.get_username()},
            key=f"last_lead_kept:{team.pk}:{user.pk}",
            url="/teams/",
        )


def _is_last_lead(membership: Membership) -> bool:
    others = Membership.objects.filter(team_id=membership.team_id, role=LEAD).exclude(
        pk=membership.pk
    )
    return membership.role == LEAD and not others.exists()


def _team_lead(team_id: int, *, besides) -> object | None:
    membership = (
        Membership.objects.filter(team_id=team_id, role=LEAD, user__is_active=True)
        .exclude(user=besides)
        .select_related("user")
        .order_by("pk")
        .first()
    )
    return membership.user if membership else None


def lease_pass_to_lead(lease: Lease, *, lead, now: datetime) -> bool:
    """A running lease of someone leaving becomes the team lead's (compare-and-set on its
    holder and state), on the lease's timeline."""
    passed = Lease.objects.filter(
        pk=lease.pk, user_id=lease.user_id, status__in=RUNNING_STATES
    ).update(user=lead)
    if passed:
        event_record(
            lease.pk,
            kind="passed_to_lead",
            at=now,
            data={"from": lease.user.get_username(), "to": lead.get_username()},
        )
    return bool(passed)


def _leases_leave(user, leases, now: datetime) -> dict[str, list[int]]:
    """The leaver rule for *leases* of *user*: the ones not started are cancelled; running
    ones end, or pass to a lead of their team when CARDPOOL_LEAVER_LEASES is "lead"."""
    done: dict[str, list[int]] = {"cancelled": [], "ended": [], "passed": []}
    for lease in leases.filter(status__in=NOT_STARTED).order_by("pk"):
        lease_cancel(lease=lease, user=user, now=now)
        done["cancelled"].append(lease.pk)
    for lease in leases.filter(status__in=RUNNING_STATES).select_related("user").order_by("pk"):
        lead = _team_lead(lease.team_id, besides=user)
        if settings.CARDPOOL_DIRECTORY["LEAVER_LEASES"] == "lead" and lead is not None:
            if lease_pass_to_lead(lease, lead=lead, now=now):
                done["passed"].append(lease.pk)
        elif lease_end_now(lease, EndReason.ADMIN, now, why="leaver"):
            done["ended"].append(lease.pk)
    return done


def _membership_drop(membership: Membership, now: datetime) -> dict:
    """The directory takes someone out of a team, open leases or not: the ones not started
    are cancelled; running ones run to their end, or pass to the lead (leaver rule "lead")."""
    user = membership.user
    leases = Lease.objects.filter(team_id=membership.team_id, user=user)
    done = {"cancelled": [], "passed": []}
    for lease in leases.filter(status__in=NOT_STARTED).order_by("pk"):
        lease_cancel(lease=lease, user=user, now=now)
        done["cancelled"].append(lease.pk)
    if settings.CARDPOOL_DIRECTORY["LEAVER_LEASES"] == "lead":
        lead = _team_lead(membership.team_id, besides=user)
        running = leases.filter(status__in=RUNNING_STATES).select_related("user")
        for lease in running.order_by("pk") if lead else []:
            if lease_pass_to_lead(lease, lead=lead, now=now):
                done["passed"].append(lease.pk)
    MemberLimit.objects.filter(membership=membership).delete()
    membership.delete()
    return done


def teams_apply(*, user, groups: list[str], now: datetime | None = None) -> dict[str, int]:
    """Let *user*'s directory memberships follow *groups* (CARDPOOL_DIRECTORY_TEAMS): join the
    teams the groups give, take the role they give, leave the ones they no longer give. Rows
    a lead or an operator made by hand are left alone. Each change is on the audit trail."""
    now = now or timezone.now()
    counts = {"added": 0, "changed": 0, "removed": 0, "kept_lead": 0}
    if not settings.CARDPOOL_DIRECTORY["TEAMS"]:
        return counts
    wanted = wanted_teams(groups)
    teams = {team.slug: team for team in Team.objects.filter(slug__in=wanted)}
    for slug in sorted(set(wanted) - set(teams)):
        logger.warning("CARDPOOL_DIRECTORY_TEAMS names team %r, which does not exist", slug)
    with transaction.atomic():
        current = {
            m.team.slug: m
            for m in Membership.objects.filter(user=user).select_related("team", "user")
        }
        for slug, team in sorted(teams.items()):
            role, membership = wanted[slug], current.get(slug)
            if membership is None:
                lock_team(team.pk)
                Membership.objects.create(user=user, team=team, role=role, source=FROM_DIRECTORY)
                audit(
                    actor=None,
                    action="directory_membership_add",
                    target=slug,
                    user=user.username,
                    role=role,
                )
                counts["added"] += 1
            elif membership.source == FROM_DIRECTORY and membership.role != role:
                lock_team(team.pk)
                if _is_last_lead(membership):
                    _flag_last_lead(membership, now)
                    counts["kept_lead"] += 1
                    continue
                Membership.objects.filter(pk=membership.pk).update(role=role)
                audit(
                    actor=None,
                    action="directory_role_change",
                    target=slug,
                    user=user.username,
                    role=role,
                )
                counts["changed"] += 1
        for slug, membership in sorted(current.items()):
            if membership.source != FROM_DIRECTORY or slug in teams:
                continue
            lock_team(membership.team_id)
            if _is_last_lead(membership):
                _flag_last_lead(membership, now)
                counts["kept_lead"] += 1
                continue
            done = _membership_drop(membership, now)
            audit(
                actor=None,
                action="directory_membership_remove",
                target=slug,
                user=user.username,
                **done,
            )
            counts["removed"] += 1
    return counts


# --- leavers -------------------------------------------------------------------------------


def _end_web_sessions(user) -> int:
    """Delete the person's web sessions (database sessions; with any other engine the
    deactivated account is signed out at its next request all the same)."""
    if settings.SESSION_ENGINE != "django.contrib.sessions.backends.db":
        return 0
    from django.contrib.sessions.models import Session as WebSession

    ended = [
        row.pk
        for row in WebSession.objects.filter(expire_date__gt=timezone.now()).iterator()
        if row.get_decoded().get("_auth_user_id") == str(user.pk)
    ]
    WebSession.objects.filter(pk__in=ended).delete()
    return len(ended)


def account_leave(*, user, why: str, actor=None, now: datetime | None = None) -> dict:
    """*user* no longer has access (*why*: removed or disabled in the directory, deactivated by
    an operator): API tokens revoked, web sessions ended, running sessions stopped (their
    processes are ended by the workers), SSH keys removed (the agents take them off the nodes
    on their next round), waiting requests cancelled, running leases ended or passed to the
    team's lead. The account is deactivated, the leads of the person's teams are told, and
    it is all on the audit trail. Safe to run twice."""
    now = now or timezone.now()
    with transaction.atomic():
        user = get_user_model().objects.select_for_update().get(pk=user.pk)
        stopped = [
            session.pk
            for session in Session.objects.live().filter(user=user).order_by("pk")
            if session_stop(session=session, user=user, now=now)
        ]
        keys = list(user.ssh_keys.order_by("pk"))
        for key in keys:
            ssh_key_remove(user=user, key=key)
        done = _leases_leave(user, Lease.objects.filter(user=user), now)
        tokens = token_revoke_all(user=user)
        get_user_model().objects.filter(pk=user.pk).update(is_active=False)
        if why in ("removed", "disabled"):
            DirectoryAccount.objects.filter(user=user).update(left_at=now, left_reason=why)
        web = _end_web_sessions(user)
        audit(
            actor=actor,
            action="account_leave",
            target=user.get_username(),
            why=why,
            tokens=tokens,
            web_sessions=web,
            sessions=stopped,
            ssh_keys=len(keys),
            **done,
        )
        teams = Team.objects.filter(memberships__user=user).distinct().order_by("pk")
        for led in Membership.objects.filter(user=user, role=LEAD).select_related("team", "user"):
            if not _team_lead(led.team_id, besides=user):
                _flag_last_lead(led, now)  # the team has no lead who can still sign in
        for team in teams:
            for lead in Membership.objects.filter(team=team, role=LEAD, user__is_active=True):
                notice_to(
                    lead.user,
                    kind=Kind.DIRECTORY,
                    message="member_left",
                    params={
                        "user": user.get_username(),
                        "why": why,
                        "ended": done["ended"],
                        "passed": done["passed"],
                    },
                    key=f"member_left:{user.pk}:{now.isoformat()}",
                    url=f"/teams/{team.slug}/",
                )
    return {"tokens": tokens, "web_sessions": web, "sessions": stopped, **done}
