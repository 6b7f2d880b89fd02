"""What an operator does with a release the backend failed to do (``release_failed``).

The lease ended for its holder when the release began (usage stopped at ``ended_at``), but
the backend may still hold its cards, so they stay out of placement until an operator either
retries the release (after fixing what made it fail) or marks it done, having freed the
cards by hand (docs/operations.md). The lease page, the pool page and the admin call these.
"""

from __future__ import annotations

from datetime import datetime

from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from leasing.choices import LeaseStatus
from leasing.enqueue import enqueue_after_commit
from leasing.lifecycle.provisioning import lease_finish_release
from leasing.models import Lease
from leasing.transitions import transition
from portal.permissions import is_operator

NOTE_MAX = 500


def _require(user, lease: Lease) -> None:
    if not is_operator(user):
        raise PermissionDenied(_("Only operators resolve failed releases."))
    if lease.status != LeaseStatus.RELEASE_FAILED:
        raise ValidationError(
            _("Only a lease whose release failed can be resolved; this one is %(status)s.")
            % {"status": lease.get_status_display()}
        )


def lease_release_retry(*, lease: Lease, user, now: datetime | None = None) -> Lease:
    """Send the release to the backend again: release_failed → releasing, with a fresh budget
    of attempts. The cards stay held back until the release is done."""
    now = now or timezone.now()
    lease.refresh_from_db()
    _require(user, lease)
    with transaction.atomic():
        if not transition(
            lease.pk,
            frm=[LeaseStatus.RELEASE_FAILED],
            to=LeaseStatus.RELEASING,
            kind="release_retried",
            at=now,
            actor=user,
        ):
            raise ValidationError(_("Someone else resolved this release first."))
        enqueue_after_commit("leasing.tasks.release_lease", lease.pk)
    lease.refresh_from_db()
    return lease


def lease_release_resolve(
    *, lease: Lease, user, note: str = "", now: datetime | None = None
) -> Lease:
    """The operator freed the cards by hand: release_failed → ended with the reason the
    release began with; the cards go back to the pool and the queue moves. Usage was cut
    when the release began, and is recorded now, once."""
    now = now or timezone.now()
    note = note.strip()[:NOTE_MAX]
    lease.refresh_from_db()
    _require(user, lease)
    with transaction.atomic():
        if not lease_finish_release(
            lease_id=lease.pk,
            now=now,
            frm=(LeaseStatus.RELEASE_FAILED,),
            actor=user,
            message=note,  # the operator's own words; the fact is worded for each reader
            data={"by_hand": True},
        ):
            raise ValidationError(_("Someone else resolved this release first."))
    lease.refresh_from_db()
    return lease
