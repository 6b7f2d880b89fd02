"""A change to a running lease above a member's limit waits for the lead (``LeaseChange``).

Extend and resize ask admission like a request does (``leasing.teams.admission``); when only
a member's limit is in the way, the change is written here as pending and the team's leads
are told. The lead decides in ``change_decisions``.
"""

from __future__ import annotations

from datetime import datetime

from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.utils.translation import gettext as _

from leasing.models import Lease, LeaseChange
from leasing.notify.wording import notify_change
from leasing.teams.admission import Verdict
from leasing.transitions import event_record


def pending_change(lease_id: int) -> LeaseChange | None:
    return (
        LeaseChange.objects.filter(lease_id=lease_id, status=LeaseChange.Status.PENDING)
        .select_related("card_model", "requested_by")
        .first()
    )


def change_ask(
    *,
    lease: Lease,
    user,
    verdict: Verdict,
    now: datetime,
    minutes: int | None = None,
    count: int | None = None,
    card_model=None,
) -> LeaseChange:
    """Write the pending change (one per lease at a time) and tell the leads after commit."""
    kind = LeaseChange.Kind.EXTEND if minutes is not None else LeaseChange.Kind.RESIZE
    try:
        with transaction.atomic():
            change = LeaseChange.objects.create(
                lease=lease,
                kind=kind,
                minutes=minutes,
                count=count,
                card_model=card_model
                if card_model and card_model.pk != lease.card_model_id
                else None,
                breaches=[b.stored() for b in verdict.member_breaches],  # worded per reader
                requested_by=user,
                requested_at=now,
            )
    except IntegrityError:
        raise ValidationError(
            _(
                "A change to this lease is already waiting for your lead's approval; withdraw it "
                "first or wait for the decision."
            )
        ) from None
    event_record(
        lease.pk,
        kind="change_requested",
        at=now,
        actor=user,  # why it waits is on the change, worded for each reader
        data={"change": change.pk, "kind": kind, "minutes": minutes, "count": count},
    )
    transaction.on_commit(lambda: notify_change(change_id=change.pk, event="requested"))
    return change
