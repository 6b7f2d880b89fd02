"""A long-lived process settles Python's garbage collector once the app is loaded
(portal/runtime.py): what is loaded is frozen out of the collector's scans, and young
collections wait for 20,000 new objects instead of 700."""

import gc
import importlib

import pytest

from portal import runtime


@pytest.fixture
def restored_gc():
    before = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*before)


def test_settling_freezes_what_is_loaded_and_raises_the_young_threshold(restored_gc):
    gc.unfreeze()
    gc.set_threshold(700, 10, 10)
    runtime.settle_gc()
    assert gc.get_freeze_count() > 0
    assert gc.get_threshold() == (runtime.YOUNG_THRESHOLD, 10, 10)


def test_the_web_and_the_worker_processes_settle_it(restored_gc, monkeypatch):
    calls = []
    monkeypatch.setattr(runtime, "settle_gc", lambda: calls.append(1))
    import portal.celery
    import portal.wsgi

    calls.clear()  # the first import of the app above may have settled it already
    importlib.reload(portal.wsgi)  # what gunicorn runs when it loads the app
    portal.celery._settle_gc()  # Celery's worker_process_init, in each child
    assert calls == [1, 1]
