"""Talking to the provisioning backend, one durable BackendCall row per attempt."""

from __future__ import annotations

import logging

from django.utils import timezone

from leasing.backends import get_backend
from leasing.models import BackendCall, Lease, LeaseStatus
from leasing.services import lease_activate, lease_finish_release

logger = logging.getLogger(__name__)


def _call(lease: Lease, action: str, attempt: int, fn):
    backend = get_backend(lease=lease)
    call = BackendCall.objects.create(
        lease=lease, backend=backend.name, action=action, attempt=attempt, started_at=timezone.now()
    )
    try:
        result = fn(backend)
    except Exception as exc:
        BackendCall.objects.filter(pk=call.pk).update(
            finished_at=timezone.now(), ok=False, detail=str(exc)[:2000]
        )
        raise
    BackendCall.objects.filter(pk=call.pk).update(finished_at=timezone.now(), ok=True)
    return result


def provision_step(*, lease_id: int, attempt: int = 1) -> bool:
    """Provision a lease that is waiting for its cards; a no-op in any other state."""
    lease = Lease.objects.select_related("card_model", "user").filter(pk=lease_id).first()
    if lease is None or lease.status != LeaseStatus.PROVISIONING:
        return False
    access = _call(lease, "provision", attempt, lambda backend: backend.provision(lease))
    return lease_activate(lease_id=lease_id, access=access)


def release_step(*, lease_id: int, reason: str, attempt: int = 1) -> bool:
    """Take back the cards of a releasing lease; a no-op in any other state."""
    lease = Lease.objects.select_related("card_model", "user").filter(pk=lease_id).first()
    if lease is None or lease.status != LeaseStatus.RELEASING:
        return False
    _call(lease, "release", attempt, lambda backend: backend.release(lease))
    return lease_finish_release(lease_id=lease_id, reason=reason)
