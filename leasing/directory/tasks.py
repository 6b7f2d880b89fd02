"""The periodic directory sync, sent by Celery beat (CELERY_BEAT_SCHEDULE["directory-sync"])."""

from __future__ import annotations

import logging

from celery import shared_task

from leasing.directory.sync import directory_sync_run

logger = logging.getLogger(__name__)


@shared_task(name="leasing.tasks.directory_sync")
def directory_sync() -> dict | None:
    """One pass of the LDAP directory sync; a directory that cannot be read changes nothing
    and is tried again at the next interval."""
    try:
        return directory_sync_run()
    except ConnectionError:
        logger.exception("directory sync skipped")
        return None
