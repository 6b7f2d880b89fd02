"""A lease its request placed at once, handed over by the request itself when the backend of
its nodes only keeps books (``Backend.provisions_inline``): right after the placement commits,
with the records a worker's hand-over leaves. Every other hand-over goes to the workers
(``lifecycle.provisioning``)."""

from __future__ import annotations

import logging
from datetime import datetime

from django.conf import settings
from django.db import transaction
from django.db.models import Prefetch, Q, prefetch_related_objects
from django.utils import timezone

from leasing.backends import get_backend
from leasing.choices import LeaseStatus
from leasing.enqueue import enqueue
from leasing.lifecycle.provisioning import (
    PENDING_CHANGE,
    holding_of,
    lease_activate,
    notify_here,
)
from leasing.models import Allocation, BackendCall, Lease
from leasing.transitions import hand_over, transition

logger = logging.getLogger(__name__)


def hand_over_placed(lease: Lease) -> None:
    """Hand over a lease its request has just placed at once (``provisioning``, cards written):
    once the placement commits, in this process (``provision_here``) when the backend of its
    nodes only keeps books, else — or when the operator turned it off
    (``CARDPOOL_HAND_OVER_IN_REQUEST``) — by a worker, as every other hand-over.

    After the commit, not in the placement's transaction: the card model's lock is held only
    for the placement. Should the process die between the two commits, the lease is
    ``provisioning`` with no task sent, which the sweep re-sends as it does a lost task."""
    if not settings.CARDPOOL["HAND_OVER_IN_REQUEST"]:
        hand_over([lease.pk])
        return

    def here() -> None:
        try:
            done = provision_here(lease)
        except Exception:
            logger.exception("lease %s: hand-over in the request failed", lease.pk)
            done = False
        if not done:
            enqueue("leasing.tasks.provision_lease", lease.pk)

    transaction.on_commit(here)


def provision_here(lease: Lease, *, now: datetime | None = None) -> bool:
    """Provision a lease that is waiting for its cards in this process, when the backend of its
    nodes declares ``provisions_inline`` (the local backend: the access details are the
    records read back, nothing outside is called). The same records as a worker's hand-over:
    a ``BackendCall`` row for the attempt, the compare-and-set provisioning → active with its
    event, the holder's notice after the commit; *lease* (the caller's object) is updated.
    False when the backend does not declare it or its call raised (the attempt recorded as
    failed): a worker must hand it over, and retries and fails it as it would any other."""
    now = now or timezone.now()
    with transaction.atomic():
        # Its cards with their nodes, read once: for the holding and the caller's answer.
        prefetch_related_objects(
            [lease],
            Prefetch("allocations", queryset=Allocation.objects.select_related("card__node")),
        )
        holding = holding_of(lease, now=now)
        backend = get_backend(holding=holding)
        if not backend.provisions_inline:
            return False
        failure = None
        try:
            access = backend.provision(holding)
        except Exception as exc:
            failure = str(exc)[:2000]
        BackendCall.objects.create(
            lease=lease,
            backend=backend.name,
            action="provision",
            attempt=1,
            started_at=now,
            finished_at=timezone.now(),
            ok=failure is None,
            detail=failure or "",
        )
        if failure is not None:
            return False
        if not transition(
            lease.pk,
            frm=[LeaseStatus.PROVISIONING],
            to=LeaseStatus.ACTIVE,
            kind="active",
            at=now,
            access=access,
            activated_at=now,
            # A card swapped since the placement marks the access: the worker's activation
            # carries the mark over and sends the change (below).
            where=~Q(access__has_key=PENDING_CHANGE),
        ):
            # Moved by someone else (nothing to do), or its cards changed in between.
            if lease_activate(lease_id=lease.pk, access=access, now=now):
                lease.refresh_from_db(
                    fields=["status", "status_changed_at", "access", "activated_at"]
                )
            return True
        lease.status, lease.status_changed_at = LeaseStatus.ACTIVE, now
        lease.access, lease.activated_at = access, now
        # Placed at once, never queued: the notice is "active" (as ``lease_activate`` words it).
        transaction.on_commit(lambda: notify_here(lease.pk, "lease_active", lease), robust=True)
    return True
