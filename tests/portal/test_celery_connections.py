"""The worker keeps its database connection between tasks, but not a broken or aged one."""

import pytest

from portal import celery as celery_app


class Request:
    is_eager = False


class Task:
    request = Request()


@pytest.mark.django_db(transaction=True)
def test_old_connections_are_dropped_around_each_task(monkeypatch):
    calls = []
    monkeypatch.setattr("django.db.close_old_connections", lambda: calls.append(1))
    celery_app._close_old_connections(sender=Task())
    assert calls == [1]
    # Run inline by a caller that owns the connection (eager, or inside its transaction):
    # left alone, or the caller's transaction would lose its connection.
    eager = Task()
    eager.request = type("R", (), {"is_eager": True})()
    celery_app._close_old_connections(sender=eager)
    from django.db import transaction

    with transaction.atomic():
        celery_app._close_old_connections(sender=Task())
    assert calls == [1]


def test_the_handler_runs_before_and_after_every_task():
    from celery.signals import task_postrun, task_prerun

    for signal in (task_prerun, task_postrun):
        receivers = [r[1]() for r in signal.receivers]
        assert celery_app._close_old_connections in receivers
