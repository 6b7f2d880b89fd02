"""Handing work to the workers without ever failing the caller because the broker is down.

Everything that matters is recorded in the database before it is queued (a lease in
``provisioning``, ``releasing``, ``scheduled``; a pending Delivery), and the beat's sweeps
re-find those rows. So a message that cannot be sent is logged and dropped, never raised:
a request whose transaction already committed must not answer 500.
"""

from __future__ import annotations

import logging
import threading
import time

from django.db import transaction

from portal.celery import app

logger = logging.getLogger(__name__)

BROKER_CHECK_SECONDS = 10.0
BROKER_PING_TIMEOUT = 1.0

_state = {"checked": 0.0, "up": True}
_lock = threading.Lock()


def task_named(name: str):
    """The registered Celery task called *name* (task modules are imported on first use:
    ``CELERY_IMPORTS``), so callers name work without importing the module that does it."""
    if name not in app.tasks:
        app.loader.import_default_modules()
    return app.tasks[name]


def enqueue(name: str, *args, inline_if_down: bool = False, **options) -> bool:
    """Send the task called *name* with *args* (apply_async *options*: eta, countdown);
    False if not sent.

    ``inline_if_down`` runs the task's function here instead, for cheap idempotent
    database-only work that no sweep would re-find (the notification of an event).
    """
    task = task_named(name)
    try:
        task.apply_async(args, **options)
    except Exception:
        _mark(up=False)
        logger.warning("broker unreachable: %s%r not queued", task.name, args, exc_info=True)
        if inline_if_down:
            try:
                task(*args)
            except Exception:
                logger.exception("%s%r failed inline", task.name, args)
        return False
    return True


def enqueue_after_commit(name: str, *args, inline_if_down: bool = False, **options) -> None:
    """``enqueue`` once the current transaction commits (at once outside one)."""
    transaction.on_commit(
        lambda: enqueue(name, *args, inline_if_down=inline_if_down, **options), robust=True
    )


def _mark(*, up: bool) -> None:
    with _lock:
        _state["up"] = up
        _state["checked"] = time.monotonic()


def _ping() -> bool:
    try:
        with app.connection_for_write(connect_timeout=BROKER_PING_TIMEOUT) as conn:
            conn.ensure_connection(max_retries=1, interval_start=0, timeout=BROKER_PING_TIMEOUT)
    except Exception:
        return False
    return True


def broker_up() -> bool:
    """Whether the broker answered its last check; pings it at most every 10 s per process."""
    with _lock:
        fresh = time.monotonic() - _state["checked"] < BROKER_CHECK_SECONDS
        if fresh:
            return _state["up"]
        # Claim the check so concurrent requests do not all ping at once.
        _state["checked"] = time.monotonic()
    up = _ping()
    _mark(up=up)
    return up
