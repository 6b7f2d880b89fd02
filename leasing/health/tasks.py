"""The pool-health pass, run by beat (found through ``CELERY_IMPORTS``; name pinned)."""

from __future__ import annotations

from celery import shared_task

from leasing.health import services


@shared_task(name="leasing.tasks_health.evaluate_health", ignore_result=True)
def evaluate_health() -> dict[str, int]:
    """Evaluate every alert rule once (beat: every CARDPOOL_HEALTH_SECONDS)."""
    return services.health_evaluate()
