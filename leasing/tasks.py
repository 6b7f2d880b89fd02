"""Celery tasks: thin, take ids, call services; safe to run twice or concurrently."""

from __future__ import annotations

import logging
from datetime import timedelta

from celery import shared_task
from django.conf import settings
from django.db.models import Q
from django.utils import timezone

from leasing import endings, notifications, provisioning, services
from leasing.backends import PermanentBackendError, TransientBackendError
from leasing.enqueue import enqueue
from leasing.models import Lease, LeaseStatus

logger = logging.getLogger(__name__)

BATCH = 500
MAX_BACKEND_RETRIES = 5


def _backoff(retries: int) -> int:
    return min(2**retries, 60)


@shared_task(bind=True, max_retries=MAX_BACKEND_RETRIES, acks_late=True)
def provision_lease(self, lease_id: int) -> None:
    try:
        provisioning.provision_step(lease_id=lease_id, attempt=self.request.retries + 1)
    except TransientBackendError as exc:
        if self.request.retries >= self.max_retries:
            services.lease_fail(lease_id=lease_id, reason=f"The backend kept failing: {exc}")
            return
        raise self.retry(exc=exc, countdown=_backoff(self.request.retries)) from exc
    except PermanentBackendError as exc:
        services.lease_fail(lease_id=lease_id, reason=str(exc))


PROVISION_BATCH = 25


@shared_task(acks_late=True)
def provision_batch(lease_ids: list[int]) -> None:
    """Hand over the leases one queue pass started, in one message. A lease whose backend
    fails here gets its own ``provision_lease``, with its retries and backoff."""
    for lease_id in lease_ids:
        try:
            provisioning.provision_step(lease_id=lease_id)
        except PermanentBackendError as exc:
            services.lease_fail(lease_id=lease_id, reason=str(exc))
        except Exception:
            logger.warning(
                "lease %s: hand-over failed in a batch; retried alone", lease_id, exc_info=True
            )
            enqueue(provision_lease, lease_id, countdown=_backoff(0))


@shared_task(bind=True, max_retries=MAX_BACKEND_RETRIES, acks_late=True)
def release_lease(self, lease_id: int, reason: str) -> None:
    try:
        provisioning.release_step(
            lease_id=lease_id, reason=reason, attempt=self.request.retries + 1
        )
    except TransientBackendError as exc:
        # The cards are already free in our records; the sweep keeps retrying the backend.
        raise self.retry(exc=exc, countdown=_backoff(self.request.retries)) from exc


# start_lease and expire_lease are no longer sent (the tick does their work); they stay so
# that ETA messages queued by an older version before an upgrade are still understood.
@shared_task(acks_late=True)
def start_lease(lease_id: int) -> None:
    services.lease_start(lease_id=lease_id)


@shared_task(acks_late=True)
def expire_lease(lease_id: int) -> None:
    services.lease_expire(lease_id=lease_id)


@shared_task
def notify_lease(lease_id: int, kind: str) -> None:
    """Tell the holder (or, for an approval request, the team's leads) what happened.

    Through every channel they chose (leasing.notifications); idempotent per lease and event.
    """
    notifications.notify_lease_event(lease_id=lease_id, kind=kind)


def _expire_and_start_due(now) -> dict:
    done = {"expired": 0, "started": 0}
    due = Lease.objects.filter(
        status__in=[LeaseStatus.ACTIVE, LeaseStatus.PROVISIONING], end_at__lte=now
    )
    for lease_id in due.order_by("end_at").values_list("pk", flat=True)[:BATCH]:
        done["expired"] += services.lease_expire(lease_id=lease_id, now=now)
    starting = Lease.objects.filter(status=LeaseStatus.SCHEDULED, start_at__lte=now)
    for lease_id in starting.order_by("start_at").values_list("pk", flat=True)[:BATCH]:
        done["started"] += services.lease_start(lease_id=lease_id, now=now)
    return done


@shared_task
def tick() -> dict:
    """Every CARDPOOL_TICK_SECONDS (2 s): end the leases whose end has come and start the
    reservations whose start has. Two indexed queries when nothing is due.

    Instead of one ETA task per lease: a Redis broker hands an unacknowledged ETA task to
    another worker after its visibility timeout (an hour), so every lease longer than that
    would have its expiry delivered again each hour, and every task would sit in a worker's
    memory until its end. The tick costs the same whatever the number of leases.
    """
    return _expire_and_start_due(timezone.now())


@shared_task
def sweep() -> dict:
    """Re-find whatever a lost task missed: expiries, starts, stuck hand-overs, the queue.

    Each step takes a bounded batch and re-checks state in its filter; running it twice
    or on two workers at once does no harm (the services compare-and-set).
    """
    now = timezone.now()
    done = {**_expire_and_start_due(now), "reprovisioned": 0, "rereleased": 0, "queues": 0}
    stale = now - timedelta(seconds=settings.CARDPOOL["STUCK_SECONDS"])
    stuck = Lease.objects.filter(
        Q(status=LeaseStatus.PROVISIONING) | Q(status=LeaseStatus.RELEASING),
        status_changed_at__lt=stale,
    )
    for lease_id, status in stuck.values_list("pk", "status")[:BATCH]:
        if status == LeaseStatus.PROVISIONING:
            enqueue(provision_lease, lease_id)
            done["reprovisioned"] += 1
        else:
            reason = (
                Lease.objects.filter(pk=lease_id)
                .values_list("events__data__reason", flat=True)
                .last()
            )
            enqueue(release_lease, lease_id, reason or "admin")
            done["rereleased"] += 1
    done["preempted"] = endings.preemptions_due(now=now)
    done["drained"] = endings.drains_due(now=now)
    done["warnings"] = endings.warnings_send_due(now=now)
    done["idle"] = endings.idle_check(now=now)
    models = (
        Lease.objects.filter(status=LeaseStatus.QUEUED)
        .values_list("card_model_id", flat=True)
        .distinct()
    )
    model_ids = list(models)
    if model_ids:
        services.queue_advance(card_model_ids=model_ids, now=now)
        done["queues"] = len(model_ids)
    return done


from leasing.tasks_notify import *  # noqa
from leasing.tasks_slurm import *  # noqa
from leasing.tasks_usage import *  # noqa
