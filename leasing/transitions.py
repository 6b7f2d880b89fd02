"""The lease state machine's primitives, shared by every path that changes a lease.

``transition()`` is the compare-and-set every state change goes through; ``event_record()``
writes a timeline line without a state change; ``cards_free()`` cuts a lease's periods;
``hand_over()`` gives the leases a queue pass started to the workers; ``notify_after_commit()``
tells people about an event once the transaction commits. Work for the workers is sent by
task name (``leasing.enqueue``), so nothing here imports a task module.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from django.db.models import Q

from leasing.enqueue import enqueue_after_commit
from leasing.models import Allocation, Lease, LeaseEvent

# A queue draining at once (a big release) is handed over in messages of this many leases.
PROVISION_BATCH = 25


def transition(
    lease_id: int,
    *,
    frm: Iterable[str],
    to: str,
    kind: str,
    at: datetime,
    actor=None,
    message: str = "",
    data: dict | None = None,
    where: Q | None = None,
    **fields,
) -> bool:
    """Compare-and-set the lease's status from one of *frm* to *to*; write the event.

    Returns False when the lease was not in one of *frm* (someone else won the race), or does
    not meet *where* (a further condition of the same UPDATE); nothing is written then.
    """
    frm = list(frm)
    if len(frm) == 1:
        current = frm[0]  # the UPDATE below is the compare-and-set; no read needed
    else:
        current = (
            Lease.objects.filter(pk=lease_id, status__in=frm)
            .values_list("status", flat=True)
            .first()
        )
        if current is None:
            return False
    row = Lease.objects.filter(pk=lease_id, status=current)
    if where is not None:
        row = row.filter(where)
    updated = row.update(status=to, status_changed_at=at, **fields)
    if updated != 1:
        return False
    LeaseEvent.objects.create(
        lease_id=lease_id,
        at=at,
        kind=kind,
        from_status=current,
        to_status=to,
        actor=actor,
        message=message,
        data=data or {},
    )
    return True


def event_record(
    lease_id: int,
    *,
    kind: str,
    at: datetime,
    actor=None,
    message: str = "",
    data: dict | None = None,
) -> LeaseEvent:
    """A line on the lease's timeline that is not a state change (a resize, a swap)."""
    return LeaseEvent.objects.create(
        lease_id=lease_id, kind=kind, at=at, actor=actor, message=message, data=data or {}
    )


def cards_free(lease: Lease, at: datetime) -> None:
    """Cut the lease's periods at *at*: its cards are free from then; future bookings vanish."""
    Allocation.objects.filter(lease=lease, start_at__gte=at).delete()
    Allocation.objects.filter(lease=lease, end_at__gt=at).update(end_at=at)


def hand_over(started: Iterable[int]) -> None:
    """Give the leases a queue pass started to the workers, once the transaction commits.

    Booked leases need nothing here: the tick starts them when their start comes (no ETA
    task, which Redis would redeliver every visibility timeout).
    """
    started = list(started)
    if len(started) == 1:
        enqueue_after_commit("leasing.tasks.provision_lease", started[0])
        return
    # A queue draining at once: one message per PROVISION_BATCH leases, so the transaction's
    # caller does not publish a thousand; the workers share them.
    for i in range(0, len(started), PROVISION_BATCH):
        enqueue_after_commit("leasing.tasks.provision_batch", started[i : i + PROVISION_BATCH])


def notify_after_commit(lease_id: int, kind: str) -> None:
    """Tell people about *kind* once the transaction commits (inline if the broker is down:
    no sweep would re-find a lost notice)."""
    enqueue_after_commit("leasing.tasks.notify_lease", lease_id, kind, inline_if_down=True)
