"""Settings for the test suite: the production settings with test-only secrets and speed-ups."""

import os
import secrets
import tempfile

# A fresh key per run: published or short keys are refused outside debugging.
os.environ.setdefault("CARDPOOL_SECRET_KEY", secrets.token_hex(32))
os.environ.setdefault("CARDPOOL_VAR_DIR", os.path.join(tempfile.gettempdir(), "cardpool-test-var"))

# Under pytest-xdist each worker (gw0, gw1, …) has its own test database (pytest-django), its
# own Redis database for the broker (a worker's purge or Celery worker never meets another's
# tasks) and its own var directory; set in the environment, so the processes a test starts
# (Celery workers, agents) inherit them.
_XDIST = os.environ.get("PYTEST_XDIST_WORKER", "")
# (once: the processes a test starts import these settings again with the same environment)
if (
    _XDIST.startswith("gw")
    and _XDIST[2:].isdigit()
    and os.environ.get("CARDPOOL_TEST_WORKER") != _XDIST
):
    os.environ["CARDPOOL_TEST_WORKER"] = _XDIST
    _n = int(_XDIST[2:])
    _broker = os.environ.get("CELERY_BROKER_URL", "")
    _head, _sep, _db = _broker.rpartition("/")
    if _broker.startswith(("redis://", "rediss://")) and _sep and _db.isdigit():
        os.environ["CELERY_BROKER_URL"] = f"{_head}/{(int(_db) + _n) % 16}"
    os.environ["CARDPOOL_VAR_DIR"] = f"{os.environ['CARDPOOL_VAR_DIR']}-{_XDIST}"

from portal.settings import *  # noqa: E402,F403

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
STORAGES["staticfiles"]["BACKEND"] = "django.contrib.staticfiles.storage.StaticFilesStorage"  # noqa: F405
ALLOWED_HOSTS = ["testserver", "localhost", "127.0.0.1", ".localhost", ".testserver"]
SESSION_COOKIE_SECURE = False
CSRF_COOKIE_SECURE = False
SESSION_COOKIE_NAME, CSRF_COOKIE_NAME = cookie_names(secure=False)  # noqa: F405
ACCOUNT_RATE_LIMITS = False
# Unit tests keep rate limits in memory (each test clears them); tests/portal/test_lockout.py
# runs real parallel attempts against the shared cache the site would use (database or Redis).
CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
# Most tests follow a hand-over through the worker — what every backend but local, and every
# start from the queue or the tick, does — and assert `provisioning` until it runs; the tests
# of the hand-over in the request (tests/leasing/test_hand_over_in_request.py) turn it on.
CARDPOOL = {**CARDPOOL, "HAND_OVER_IN_REQUEST": False}  # noqa: F405
# The queue planner's pictures are shared through the (in-memory) cache as in production, so
# every queue test also runs the replay of shared steps (scheduler/plancache.py).
CARDPOOL["PLAN_SHARING"] = True
