"""The lead's decision on a pending lease change (``LeaseChange``): approve (the change is made
through the same service as the holder's own, member limits waived, everything else checked
again), reject with a reason, or the holder withdraws it."""

from __future__ import annotations

from datetime import datetime

from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from leasing.choices import BOOKED_STATES
from leasing.lifecycle.changes import lease_extend
from leasing.lifecycle.resize import lease_resize
from leasing.models import Lease, LeaseChange
from leasing.notify.wording import notify_change
from leasing.teams.approvals import may_decide
from leasing.transitions import event_record

PENDING = LeaseChange.Status.PENDING


def _pending(change: LeaseChange) -> LeaseChange:
    change = LeaseChange.objects.select_for_update().select_related("lease").get(pk=change.pk)
    if change.status != PENDING:
        raise ValidationError(
            _("This change is %(status)s, not waiting for a decision.")
            % {"status": change.get_status_display()}
        )
    return change


def _decide(change: LeaseChange, *, status: str, user, note: str, now: datetime) -> None:
    LeaseChange.objects.filter(pk=change.pk).update(
        status=status, decided_by=user, decided_at=now, note=note
    )
    event_record(
        change.lease_id,
        kind=f"change_{status}",
        at=now,
        actor=user,
        message=note,
        data={"change": change.pk},
    )
    if status != LeaseChange.Status.WITHDRAWN:
        transaction.on_commit(lambda: notify_change(change_id=change.pk, event=status))


def change_approve(
    *, change: LeaseChange, user, note: str = "", now: datetime | None = None
) -> Lease:
    """Make the change as asked; returns the lease that carries the work afterwards.

    The team's quota, the cards being free and nobody waiting being delayed are checked
    again now: if the change no longer fits, the lead gets the reason and the change stays
    pending (reject it, or let the holder withdraw it).
    """
    now = now or timezone.now()
    if not may_decide(user, change.lease):
        raise PermissionDenied(_("Only a lead of the lease's team or an operator may approve it."))
    with transaction.atomic():
        change = _pending(change)
        lease = change.lease
        if lease.status not in BOOKED_STATES:
            _decide(change, status=LeaseChange.Status.LAPSED, user=user, note="", now=now)
            lapsed = _("The lease is %(status)s now; the change lapsed.") % {
                "status": lease.get_status_display()
            }
        else:
            lapsed = ""
            if change.kind == LeaseChange.Kind.EXTEND:
                result = lease_extend(
                    lease=lease, user=user, minutes=change.minutes, now=now, approved=True
                )
            else:
                result = lease_resize(
                    lease=lease,
                    user=user,
                    count=change.count,
                    card_model=change.card_model,
                    now=now,
                    approved=True,
                )
            _decide(change, status=LeaseChange.Status.APPROVED, user=user, note=note, now=now)
    if lapsed:
        raise ValidationError(lapsed)
    return result


def change_reject(*, change: LeaseChange, user, reason: str, now: datetime | None = None) -> None:
    now = now or timezone.now()
    if not may_decide(user, change.lease):
        raise PermissionDenied(_("Only a lead of the lease's team or an operator may reject it."))
    if not reason.strip():
        raise ValidationError({"reason": [_("Say why, so the requester knows what to change.")]})
    with transaction.atomic():
        change = _pending(change)
        _decide(change, status=LeaseChange.Status.REJECTED, user=user, note=reason.strip(), now=now)


def change_withdraw(*, change: LeaseChange, user, now: datetime | None = None) -> None:
    """The holder (or whoever asked) takes a pending change back."""
    now = now or timezone.now()
    if user.pk not in (change.requested_by_id, change.lease.user_id) and not may_decide(
        user, change.lease
    ):
        raise PermissionDenied(_("You may not withdraw this change."))
    with transaction.atomic():
        change = _pending(change)
        _decide(change, status=LeaseChange.Status.WITHDRAWN, user=user, note="", now=now)


def changes_lapse(*, now: datetime | None = None) -> int:
    """Pending changes of leases that ended (or never started) before the lead decided lapse;
    their holders are told. Run by the sweep; returns how many lapsed."""
    now = now or timezone.now()
    stale = list(
        LeaseChange.objects.filter(status=PENDING)
        .exclude(lease__status__in=BOOKED_STATES)
        .values_list("pk", flat=True)[:500]
    )
    for pk in stale:
        with transaction.atomic():
            if LeaseChange.objects.filter(pk=pk, status=PENDING).update(
                status=LeaseChange.Status.LAPSED, decided_at=now
            ):
                transaction.on_commit(lambda pk=pk: notify_change(change_id=pk, event="lapsed"))
    return len(stale)
