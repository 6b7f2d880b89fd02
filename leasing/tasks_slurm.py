"""Celery tasks of the Slurm backend: reconciliation (on beat) and the extend hook."""

from __future__ import annotations

import logging

from celery import shared_task

from leasing.backends import TransientBackendError, get_backend
from leasing.models import Lease, LeaseStatus

logger = logging.getLogger(__name__)

__all__ = ["extend_lease_backend", "reconcile_slurm"]


@shared_task(acks_late=True)
def reconcile_slurm() -> dict:
    """Active leases against Slurm's ``cardpool-*`` jobs (leasing.reconcile)."""
    from leasing.reconcile import slurm_reconcile

    try:
        return slurm_reconcile()
    except TransientBackendError as exc:
        # The next beat tries again; nothing was ended on a failed read.
        logger.warning("slurm reconcile skipped: %s", exc)
        return {"error": str(exc)}


@shared_task(bind=True, max_retries=5, acks_late=True)
def extend_lease_backend(self, lease_id: int) -> int:
    """Tell the lease's backend its end moved later (Slurm: raise the job's time limit).

    Idempotent: the backend sets the limit from the lease's current end, never adds to it.
    Backends without an ``extend`` need nothing (Cardpool's records are their truth).
    """
    lease = Lease.objects.select_related("user", "card_model").filter(pk=lease_id).first()
    if lease is None or lease.status != LeaseStatus.ACTIVE:
        return 0
    backend = get_backend(lease=lease)
    extend = getattr(backend, "extend", None)
    if extend is None:
        return 0
    try:
        return extend(lease)
    except TransientBackendError as exc:
        raise self.retry(exc=exc, countdown=min(2**self.request.retries, 60)) from exc
