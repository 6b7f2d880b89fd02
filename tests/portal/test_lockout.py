"""One lockout for both doors (login page and POST /api/v1/auth/token/), counted per account in
a cache every process shares — checked with real parallel attempts against that cache."""

from __future__ import annotations

import os
import runpy
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from django.contrib.auth.base_user import AbstractBaseUser
from django.core.cache import cache
from django.core.management import call_command
from django.db import OperationalError, connections
from django.test import Client

from portal.tokens.models import ApiToken
from tests.factories import UserFactory

SETTINGS_FILE = Path(__file__).resolve().parents[2] / "portal" / "settings.py"
LIMITS = {"login_failed": "10/m/ip,5/5m/key"}  # the site's default (test_auth checks it)
TOKEN_URL = "/api/v1/auth/token/"


@pytest.fixture
def limits(settings):
    settings.ACCOUNT_RATE_LIMITS = LIMITS


def web_login(client, login, password):
    return client.post("/accounts/login/", {"login": login, "password": password})


def token_login(client, login, password, ip="198.51.100.7"):
    return client.post(
        TOKEN_URL,
        {"username": login, "password": password},
        content_type="application/json",
        REMOTE_ADDR=ip,
        HTTP_ACCEPT_LANGUAGE="en",
    )


def test_failed_web_logins_lock_the_token_endpoint(en_client, alice, limits):
    for _ in range(5):
        assert b"not correct" in web_login(en_client, "alice", "wrong").content
    response = token_login(Client(), "alice", "pw-for-tests", ip="203.0.113.50")
    assert response.status_code == 429
    assert "Too many failed login attempts" in response.json()["detail"]
    assert not ApiToken.objects.exists()


def test_failed_token_attempts_lock_the_web_login(en_client, alice, limits):
    for n in range(5):
        assert token_login(Client(), "alice", "wrong", ip=f"203.0.113.{n}").status_code == 400
    assert token_login(Client(), "alice", "wrong").status_code == 429
    response = web_login(en_client, "alice", "pw-for-tests")
    assert b"Too many failed login attempts" in response.content
    assert "_auth_user_id" not in en_client.session


def test_username_and_address_count_as_one_account(en_client, alice, limits):
    for login in ("alice", "ALICE", alice.email, alice.email.upper(), "alice"):
        web_login(en_client, login, "wrong")
    response = token_login(Client(), alice.email, "pw-for-tests")
    assert response.status_code == 429


def test_a_right_password_does_not_use_up_the_allowance(alice, limits):
    for _ in range(8):
        assert token_login(Client(), "alice", "pw-for-tests").status_code == 200


# --- The cache the site uses --------------------------------------------------------------


def cache_settings(monkeypatch, **environ) -> dict:
    for name in ("CARDPOOL_CACHE_URL", "CELERY_BROKER_URL"):
        monkeypatch.delenv(name, raising=False)
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    return runpy.run_path(str(SETTINGS_FILE))["CACHES"]["default"]


def test_the_embedded_default_is_the_database_cache(monkeypatch):
    assert cache_settings(monkeypatch)["BACKEND"].endswith("db.DatabaseCache")


def test_redis_comes_from_the_cache_url_or_the_broker_url(monkeypatch):
    broker = cache_settings(monkeypatch, CELERY_BROKER_URL="redis://broker:6379/0")
    assert broker["BACKEND"].endswith("redis.RedisCache")
    assert broker["LOCATION"] == "redis://broker:6379/0"
    own = cache_settings(
        monkeypatch, CELERY_BROKER_URL="redis://broker:6379/0", CARDPOOL_CACHE_URL="redis://c/2"
    )
    assert own["LOCATION"] == "redis://c/2"


def test_a_bad_cache_url_fails_loudly(monkeypatch):
    from django.core.exceptions import ImproperlyConfigured

    with pytest.raises(ImproperlyConfigured, match="CARDPOOL_CACHE_URL"):
        cache_settings(monkeypatch, CARDPOOL_CACHE_URL="memcached://x")


@pytest.fixture
def shared_cache(settings, monkeypatch):
    """The cache portal/settings.py picks for this environment: Redis when CELERY_BROKER_URL
    is redis:// (CI), else the database table."""
    chosen = cache_settings(
        monkeypatch, **{k: v for k in ("CELERY_BROKER_URL",) if (v := os.environ.get(k))}
    )
    settings.CACHES = {"default": chosen}
    call_command("createcachetable", verbosity=0)
    cache.clear()
    yield chosen
    cache.clear()


@pytest.fixture
def checks(monkeypatch) -> list[str]:
    """The password of every check made (thread-safe; both backends check each attempt)."""
    seen: list[str] = []
    lock = threading.Lock()
    real = AbstractBaseUser.check_password

    def counting(user, raw_password):
        with lock:
            seen.append(raw_password)
        return real(user, raw_password)

    monkeypatch.setattr(AbstractBaseUser, "check_password", counting)
    return seen


def _in_thread(fn, *args):
    try:
        return fn(*args)
    finally:
        connections.close_all()


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("door", ["token", "web"])
def test_parallel_wrong_passwords_get_at_most_five_checks(shared_cache, settings, checks, door):
    settings.ACCOUNT_RATE_LIMITS = LIMITS
    UserFactory(username="carol")

    def attempt(n):
        # Each attempt from its own address, so only the per-account limit can stop them.
        ip = f"203.0.113.{n}"
        if door == "token":
            return token_login(Client(), "carol", f"wrong-{n}", ip=ip).status_code
        client = Client(HTTP_ACCEPT_LANGUAGE="en", REMOTE_ADDR=ip)
        response = web_login(client, "carol", f"wrong-{n}")
        if response.status_code != 200:
            return response.status_code
        return 429 if b"Too many failed login attempts" in response.content else 400

    with ThreadPoolExecutor(max_workers=8) as pool:
        answers = list(
            pool.map(lambda n: _in_thread(attempt, n), range(40 if door == "token" else 24))
        )
    tried = set(checks)  # attempts that reached a password check
    assert 1 <= len(tried) <= 5, sorted(tried)
    assert 429 in answers
    if os.environ.get("DATABASE_URL", "").startswith("postgres"):
        assert answers.count(400) == len(tried)
        assert set(answers) == {400, 429}
    else:
        # The in-memory SQLite test database answers some threads "busy" (503), at times
        # after their check: never more checks, only fewer plain refusals.
        assert answers.count(400) <= len(tried)
        assert set(answers) <= {400, 429, 503}


def test_migrate_makes_the_database_cache_table(db, settings):
    from django.db import connection

    from portal.apps import _create_cache_table

    settings.CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.db.DatabaseCache",
            "LOCATION": "cardpool_cache_probe",
        }
    }
    _create_cache_table(sender=None)
    assert "cardpool_cache_probe" in connection.introspection.table_names()


# --- The portal's own limits (portal/ratelimit.py), same shared cache ---------------------


@pytest.mark.django_db(transaction=True)
def test_parallel_uses_of_a_portal_limit_never_exceed_it(shared_cache):
    from portal.ratelimit import rate_consume

    def use(_n):
        try:
            return rate_consume(scope="probe", key="carol", rate="5/h")
        except OperationalError:  # the in-memory SQLite test database: "table is locked"
            assert not os.environ.get("DATABASE_URL")
            return False

    with ThreadPoolExecutor(max_workers=8) as pool:
        allowed = list(pool.map(lambda n: _in_thread(use, n), range(30)))
    assert allowed.count(True) <= 5
    if os.environ.get("DATABASE_URL"):  # SQLite's in-memory test database may lock them all out
        assert allowed.count(True) >= 1
    assert rate_consume(scope="probe", key="dora", rate="5/h")  # another key counts apart


@pytest.mark.parametrize(
    ("rate", "parsed"), [("5/h", (5, 3600.0)), ("10/15m", (10, 900.0)), ("0/d", (0, 86400.0))]
)
def test_rates_parse(rate, parsed):
    from portal.ratelimit import parse_rate

    assert parse_rate(rate) == parsed


@pytest.mark.parametrize("rate", ["5", "x/h", "5/y", "5/0h", "-1/h"])
def test_bad_rates_fail_loudly(rate):
    from django.core.exceptions import ImproperlyConfigured

    from portal.ratelimit import parse_rate

    with pytest.raises(ImproperlyConfigured):
        parse_rate(rate)


def test_a_bad_webhook_test_rate_stops_the_start(monkeypatch):
    from django.core.exceptions import ImproperlyConfigured

    monkeypatch.setenv("CARDPOOL_WEBHOOK_TEST_RATE", "many")
    with pytest.raises(ImproperlyConfigured, match="CARDPOOL_WEBHOOK_TEST_RATE"):
        runpy.run_path(str(SETTINGS_FILE))
