"""What a holder, lead or operator changes on a lease: release, cancel, extend (resize: ``resize``;
a lead's approval: ``leasing.teams.approvals``)."""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from django.conf import settings
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from leasing.choices import (
    CANCELLABLE_STATES,
    EXTENDABLE_STATES,
    EndReason,
    LeaseStatus,
)
from leasing.enqueue import enqueue_after_commit
from leasing.lifecycle.change_requests import change_ask
from leasing.locking import lock_card_models, lock_team
from leasing.models import (
    Allocation,
    Lease,
)
from leasing.scheduler.preview import waiting_delayed
from leasing.scheduler.run import (
    release_begin,
    replan,
)
from leasing.scheduler.snapshot import timeline_for
from leasing.teams import quotas
from leasing.teams.admission import Ask, admit
from leasing.teams.approvals import may_decide
from leasing.transitions import event_record, transition
from portal.permissions import can_manage_lease

logger = logging.getLogger(__name__)


def lease_release(*, lease: Lease, user, now: datetime | None = None) -> Lease:
    """End a lease early at the holder's (or lead's, or operator's) request; usage stops now."""
    now = now or timezone.now()
    if not can_manage_lease(user, lease):
        raise PermissionDenied(_("You may not release this lease."))
    with transaction.atomic():
        lock_card_models([lease.card_model_id])
        lease.refresh_from_db()
        if lease.status == LeaseStatus.SCHEDULED:
            raise ValidationError(_("This lease has not started yet; cancel it instead."))
        if not release_begin(lease, reason=EndReason.RELEASED, now=now, actor=user, kind="release"):
            raise ValidationError(
                _("Only a provisioning or active lease can be released; this one is %(status)s.")
                % {"status": lease.get_status_display()}
            )
    lease.refresh_from_db()
    return lease


def lease_cancel(*, lease: Lease, user, now: datetime | None = None) -> Lease:
    """Withdraw a request that has not started (waiting or scheduled)."""
    now = now or timezone.now()
    if not can_manage_lease(user, lease):
        raise PermissionDenied(_("You may not cancel this lease."))
    with transaction.atomic():
        lock_card_models([lease.card_model_id])
        if not transition(
            lease.pk,
            frm=list(CANCELLABLE_STATES),
            to=LeaseStatus.CANCELLED,
            kind="cancel",
            at=now,
            actor=user,
            ended_at=now,
            estimated_start=None,
        ):
            lease.refresh_from_db()
            raise ValidationError(
                _(
                    "Only a waiting or scheduled lease can be cancelled; this one is %(status)s. Release it instead."
                )
                % {"status": lease.get_status_display()}
            )
        Allocation.objects.filter(lease=lease).delete()
        replan(lease.card_model_id, now=now)
    lease.refresh_from_db()
    return lease


def lease_extend(
    *, lease: Lease, user, minutes: int, now: datetime | None = None, approved: bool = False
) -> Lease:
    """Push the end of a lease later, on the same cards: they must be free, nobody waiting may
    be delayed, and the extra card-time goes through admission like a request (a team rule
    broken: refused; a member limit broken: a pending change the lead decides, returned on
    ``lease.pending_change``). *approved*: the lead already did (change_decisions).

    The steps: ``_extension_check`` (state, preemption, the longest lease),
    ``_extension_cards_free`` (nobody booked after it, nobody waiting delayed), admission,
    ``_extension_write``."""

    now = now or timezone.now()
    if not can_manage_lease(user, lease):
        raise PermissionDenied(_("You may not extend this lease."))
    if minutes < 1:
        raise ValidationError({"minutes": [_("Extend by at least one minute.")]})
    with transaction.atomic():
        lock_team(lease.team_id)
        lock_card_models([lease.card_model_id])
        lease.refresh_from_db()
        new_end = _extension_check(lease, minutes)
        _extension_cards_free(lease, new_end, now)
        verdict = admit(
            Ask(
                team=lease.team,
                user=lease.user,
                card_model=lease.card_model,
                count=lease.count,
                start=lease.end_at,
                end=new_end,
                # The whole holding: a lease moved to another model counts from the first.
                length=new_end - quotas.holding_start(lease),
                priority=lease.priority,
                kind="extend",
                lease_id=lease.pk,
                borrowed=lease.borrowed,
            ),
            member_approved=approved or may_decide(user, lease),
            field="minutes",
        )
        if verdict.needs_approval:
            lease.pending_change = change_ask(
                lease=lease, user=user, verdict=verdict, now=now, minutes=minutes
            )
            return lease
        _extension_write(lease, new_end, user=user, now=now)
    lease.refresh_from_db()
    return lease


def _extension_check(lease: Lease, minutes: int) -> datetime:
    """The new end, if the lease may be extended by *minutes* at all (ValidationError)."""
    if lease.status not in EXTENDABLE_STATES:
        raise ValidationError(
            _(
                "Only a scheduled, provisioning or active lease can be extended; this one is %(status)s."
            )
            % {"status": lease.get_status_display()}
        )
    if lease.preempt_at is not None:
        raise ValidationError(
            _(
                "Cards of this lease are being taken back for a higher-priority request at %(at)s; "
                "extend after that."
            )
            % {"at": timezone.localtime(lease.preempt_at).strftime("%Y-%m-%d %H:%M")}
        )
    new_end = lease.end_at + timedelta(minutes=minutes)
    max_minutes = settings.CARDPOOL["MAX_LEASE_MINUTES"]
    if new_end - lease.start_at > timedelta(minutes=max_minutes):
        raise ValidationError(
            {
                "minutes": [
                    _("A lease may last at most %(hours)s hours in all.")
                    % {"hours": max_minutes // 60}
                ]
            }
        )
    return new_end


def _extension_cards_free(lease: Lease, new_end: datetime, now: datetime) -> None:
    """The lease's cards are free until *new_end*, and nobody waiting starts later for it."""
    card_ids = list(lease.allocations.filter(end_at=lease.end_at).values_list("card_id", flat=True))
    timeline = timeline_for(lease.card_model_id, now=now)
    if any(not timeline.is_free(c, lease.end_at, new_end) for c in card_ids):
        raise ValidationError(
            {
                "minutes": [
                    _(
                        "These cards are booked by someone else after your lease ends; release and ask again instead."
                    )
                ]
            }
        )
    delayed = waiting_delayed(
        lease.card_model_id, [(c, lease.end_at, new_end) for c in card_ids], now=now
    )
    if delayed:
        raise ValidationError(
            {
                "minutes": [
                    _(
                        "%(n)s waiting request(s) would start later if you extended; release when done instead."
                    )
                    % {"n": delayed}
                ]
            }
        )


def _extension_write(lease: Lease, new_end: datetime, *, user, now: datetime) -> None:
    """Move the end of the lease and of its cards, record it, tell the backend and the budget."""
    Allocation.objects.filter(lease=lease, end_at=lease.end_at).update(end_at=new_end)
    old_end = lease.end_at
    Lease.objects.filter(pk=lease.pk).update(end_at=new_end, duration=new_end - lease.start_at)
    event_record(
        lease.pk,
        kind="extended",
        at=now,
        actor=user,
        data={"from": old_end.isoformat(), "to": new_end.isoformat()},
    )
    if lease.status == LeaseStatus.ACTIVE:
        enqueue_after_commit("leasing.tasks_slurm.extend_lease_backend", lease.pk)
    team, model_id = lease.team, lease.card_model_id
    transaction.on_commit(lambda: quotas.budget_alerts(team=team, card_model_id=model_id, now=now))
