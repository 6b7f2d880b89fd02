"""Celery tasks that send notifications (found through ``CELERY_IMPORTS``; names pinned).

Thin, as the other tasks: they take ids and call ``leasing.notify``, which keeps the
rules and the record of every attempt.
"""

from __future__ import annotations

from celery import shared_task
from django.utils import timezone

from leasing.enqueue import enqueue
from leasing.notify import sending


@shared_task(name="leasing.tasks_notify.deliver", bind=True, acks_late=True, max_retries=None)
def deliver(self, delivery_id: int) -> None:
    """Send one delivery (email or webhook); retry with backoff while it may still go through.

    The attempt count lives on the Delivery row, not in Celery, so a task that is lost and
    re-queued by the sweep continues where the last attempt stopped.
    """
    retry_in = sending.delivery_attempt(delivery_id=delivery_id)
    if retry_in is not None:
        raise self.retry(countdown=retry_in)


@shared_task(name="leasing.tasks_notify.deliveries_sweep")
def deliveries_sweep() -> int:
    """Re-queue pending deliveries whose task was lost (bounded batch; safe to run twice)."""
    stalled = sending.deliveries_stalled(now=timezone.now())
    for delivery_id in stalled:
        enqueue("leasing.tasks_notify.deliver", delivery_id)
    return len(stalled)
