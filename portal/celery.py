"""The Celery app. Workers and beat load it with ``celery -A portal``."""

import os

from celery import Celery
from celery.signals import task_postrun, task_prerun, worker_process_init

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")

app = Celery("cardpool")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@task_prerun.connect
@task_postrun.connect
def _close_old_connections(sender=None, **kwargs) -> None:
    """With CELERY_DB_REUSE_MAX the worker keeps its connection between tasks; like Django does
    around each request, drop one that errored (a PostgreSQL restart) or is older than
    DB_CONN_MAX_AGE, and health-check it again before the next query."""
    from django.db import close_old_connections, connection

    if getattr(getattr(sender, "request", None), "is_eager", False) or connection.in_atomic_block:
        return  # run inline by a caller that owns the connection (tests, eager mode)
    close_old_connections()


@worker_process_init.connect
def _settle_gc(**kwargs) -> None:
    """As portal/wsgi.py: the loaded app out of the cyclic collector's way in each child."""
    from portal.runtime import settle_gc

    settle_gc()
