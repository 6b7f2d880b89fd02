"""Celery task for usage records (re-exported by ``leasing.tasks`` so workers find it)."""

from __future__ import annotations

from celery import shared_task

from leasing import usage

__all__ = ["usage_record_missing"]


@shared_task
def usage_record_missing() -> int:
    """Record any ended lease the end-of-lease hook missed (bounded batch; safe to repeat)."""
    return usage.usage_record_missing()
