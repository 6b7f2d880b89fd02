"""A real Celery worker (and the live server) against the test database and the real broker.

These tests are the whole path: request → worker → active → release/expiry. They need
PostgreSQL (the worker is another process and must see the test database) and Redis;
without them they skip with the reason (tests/conftest.py).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from django.db import connection

ROOT = Path(__file__).resolve().parents[2]


def _database_url() -> str:
    s = connection.settings_dict
    return f"postgres://{s['USER']}@{s['HOST'] or '127.0.0.1'}:{s['PORT'] or 5432}/{s['NAME']}"


def start_worker(tmp_path, name: str = "worker", env: dict | None = None) -> subprocess.Popen:
    """Start a Celery worker process (prefork, 2 children) with beat, like production;
    return once it is ready. *env* adds to (or overrides) the worker's environment."""
    env = (
        os.environ
        | {
            "DJANGO_SETTINGS_MODULE": "tests.settings",
            "DATABASE_URL": _database_url(),
            "CARDPOOL_VAR_DIR": str(tmp_path),
            "CARDPOOL_SWEEP_SECONDS": "2",
            "CARDPOOL_TICK_SECONDS": "2",
        }
        | (env or {})
    )
    log_path = tmp_path / f"{name}.log"
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "portal",
                "worker",
                "--beat",
                "--loglevel",
                "INFO",
                "--concurrency",
                "2",
                "--without-gossip",
                "--without-mingle",
                "--hostname",
                f"e2e-{name}-{os.getpid()}@%h",
                "--schedule",
                str(tmp_path / f"{name}-beat-schedule"),
            ],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if " ready." in log_path.read_text():
            return proc
        if proc.poll() is not None:
            pytest.fail("the worker died on start:\n" + log_path.read_text()[-3000:])
        time.sleep(0.2)
    proc.kill()
    pytest.fail("the worker did not become ready in 30 s")


def stop_worker(proc: subprocess.Popen) -> None:
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()


def kill_worker(proc: subprocess.Popen) -> None:
    """SIGKILL the worker and its pool children at once, as a machine or OOM kill would."""
    children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()
    os.kill(proc.pid, signal.SIGKILL)
    for pid in children:
        try:
            os.kill(int(pid), signal.SIGKILL)
        except ProcessLookupError:
            pass
    proc.wait(timeout=10)


def purge_broker() -> None:
    """Drop messages left over from earlier runs."""
    from portal.celery import app

    with app.connection_for_write() as conn:
        conn.default_channel.queue_purge("celery")


@pytest.fixture
def worker(transactional_db, tmp_path):
    """A real worker with beat against the test database and the real broker."""
    purge_broker()
    proc = start_worker(tmp_path)
    yield proc
    stop_worker(proc)


def wait_for(predicate, *, timeout: float = 10.0, interval: float = 0.05):
    """Poll until predicate() is truthy; return its value or fail with the timeout."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    pytest.fail(f"not reached within {timeout} s")


CHROMIUM = Path("/usr/bin/chromium")


def _browser_missing() -> str | None:
    """Why the browser tests cannot run here, or None when they can."""
    if not CHROMIUM.exists():
        return f"needs Chromium at {CHROMIUM} (apt-get install chromium; CI has it)"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "needs the playwright package (pip install -e '.[test]'; CI has it)"
    return None


def pytest_collection_modifyitems(config, items):
    """Skip the tests marked `browser` when Chromium or Playwright is missing, with the reason.

    Only items marked `browser` are touched, so this hook is safe for the whole suite.
    """
    browser_items = [item for item in items if "browser" in item.keywords]
    if not browser_items:
        return
    reason = _browser_missing()
    if reason:
        skip = pytest.mark.skip(reason=reason)
        for item in browser_items:
            item.add_marker(skip)
