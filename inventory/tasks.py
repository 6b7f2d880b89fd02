"""Celery tasks of the inventory: thin, call services in inventory.telemetry; safe to run twice
or concurrently."""

from __future__ import annotations

from celery import shared_task
from django.utils import timezone

from inventory import telemetry


@shared_task(name="inventory.tasks.pull_dcgm", ignore_result=True)
def pull_dcgm() -> dict[str, int]:
    """Scrape the DCGM exporters of nodes that have one (beat: every 30 s)."""
    return telemetry.telemetry_pull_dcgm()


@shared_task(name="inventory.tasks.summarise_telemetry", ignore_result=True)
def summarise_telemetry() -> int:
    """Roll samples older than the retention into hourly rows (beat: hourly)."""
    return telemetry.telemetry_summarise(before=timezone.now() - telemetry.retention())
