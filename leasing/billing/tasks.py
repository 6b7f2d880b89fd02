"""Celery tasks for usage records (found through ``CELERY_IMPORTS``; name pinned)."""

from __future__ import annotations

from celery import shared_task

from leasing.billing import statements, usage


@shared_task(name="leasing.tasks_usage.usage_record_missing")
def usage_record_missing() -> int:
    """Record any ended lease the end-of-lease hook missed (bounded batch; safe to repeat)."""
    return usage.usage_record_missing()


@shared_task(name="leasing.tasks_usage.usage_close_month")
def usage_close_month() -> int:
    """Record the part of the month that has ended that running leases held (bounded batch;
    safe to repeat): the month's statement then reads records only and never changes. Once
    the month is fully recorded, its statements are numbered, dated and sent."""
    written = usage.usage_close_month()
    statements.statements_issue()
    return written
