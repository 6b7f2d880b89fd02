"""A lead's decision on a request above a member's limit: approve (the team's quota must
still hold; the request joins the queue) or reject with a reason."""

from __future__ import annotations

import logging
from datetime import datetime

from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from leasing.choices import (
    LeaseStatus,
)
from leasing.locking import lock_card_models, lock_team
from leasing.models import (
    Lease,
)
from leasing.scheduler.run import (
    replan,
)
from leasing.teams import quotas
from leasing.teams.admission import Ask, admit
from leasing.transitions import notify_after_commit, transition
from portal.permissions import is_operator, leads_of, leads_team

logger = logging.getLogger(__name__)


def may_decide(user, lease: Lease) -> bool:
    """A lead of the lease's team or an operator: decides its requests and changes (and needs
    nobody's approval for their own changes to it)."""
    return is_operator(user) or leads_team(user, lease.team_id)


def approvers(team) -> list[str]:
    """Who decides a request or change of *team* above a member's limit, by username: its
    leads (operators only when it has none: an empty list)."""
    return [user.get_username() for user in leads_of(team)]


def lease_approve(*, lease: Lease, user, note: str = "", now: datetime | None = None) -> Lease:
    """A lead lets a request above a member's limit through; the team's quota must still hold."""
    now = now or timezone.now()
    if not may_decide(user, lease):
        raise PermissionDenied(_("Only a lead of the lease's team or an operator may approve it."))
    with transaction.atomic():
        lock_team(lease.team_id)
        lock_card_models([lease.card_model_id])
        lease.refresh_from_db()
        if lease.status != LeaseStatus.PENDING_APPROVAL:
            raise ValidationError(
                _("This request is %(status)s, not waiting for approval.")
                % {"status": lease.get_status_display()}
            )
        start = max(lease.start_at, now)
        # The lead weighs the member's limits; the team's quota and budget still hold.
        verdict = admit(
            Ask(
                team=lease.team,
                user=lease.user,
                card_model=lease.card_model,
                count=lease.count,
                start=start,
                end=start + lease.duration,
                length=lease.duration,
                priority=lease.priority,
                kind="approve",
            ),
            member_approved=True,
        )
        transition(
            lease.pk,
            frm=[LeaseStatus.PENDING_APPROVAL],
            to=LeaseStatus.QUEUED,
            kind="approved",
            at=now,
            actor=user,
            message=note,
            start_at=start,
            end_at=start + lease.duration,
            borrowed=verdict.borrowed,
        )
        team, model_id = lease.team, lease.card_model_id
        transaction.on_commit(
            lambda: quotas.budget_alerts(team=team, card_model_id=model_id, now=now)
        )
        replan(lease.card_model_id, now=now, joined=lease.pk)
        notify_after_commit(lease.pk, "approved")
    lease.refresh_from_db()
    return lease


def lease_reject(*, lease: Lease, user, reason: str, now: datetime | None = None) -> Lease:
    """A lead turns a request down, saying why (the requester reads it)."""
    now = now or timezone.now()
    if not may_decide(user, lease):
        raise PermissionDenied(_("Only a lead of the lease's team or an operator may reject it."))
    if not reason.strip():
        raise ValidationError({"reason": [_("Say why, so the requester knows what to change.")]})
    with transaction.atomic():
        if not transition(
            lease.pk,
            frm=[LeaseStatus.PENDING_APPROVAL],
            to=LeaseStatus.REJECTED,
            kind="rejected",
            at=now,
            actor=user,
            message=reason.strip(),
            ended_at=now,
        ):
            lease.refresh_from_db()
            raise ValidationError(
                _("This request is %(status)s, not waiting for approval.")
                % {"status": lease.get_status_display()}
            )
        notify_after_commit(lease.pk, "rejected")
    lease.refresh_from_db()
    return lease
