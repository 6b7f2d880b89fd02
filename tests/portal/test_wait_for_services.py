"""`manage.py wait_for_services`: how the compose file's containers wait for PostgreSQL, Redis
and the migrations instead of relying on health checks."""

import socket

import pytest
from django.core.management import CommandError, call_command
from kombu import Connection

from portal.celery import app
from portal.management.commands import wait_for_services


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.django_db
def test_returns_once_database_and_broker_answer(capsys):
    call_command("wait_for_services", "--migrated", "--timeout", "5")
    assert "database and broker ready" in capsys.readouterr().out


@pytest.mark.django_db
def test_gives_up_naming_the_broker_that_does_not_answer(monkeypatch):
    url = f"redis://127.0.0.1:{_closed_port()}/0"
    monkeypatch.setattr(app, "connection_for_write", lambda: Connection(url))
    with pytest.raises(CommandError, match="still waiting after 0 s: broker"):
        call_command("wait_for_services", "--timeout", "0")


@pytest.mark.django_db
def test_with_migrated_waits_for_migrations_another_process_applies(monkeypatch):
    class Pending:
        def __init__(self, connection):
            self.loader = type("Loader", (), {"graph": type("G", (), {"leaf_nodes": list})()})()

        def migration_plan(self, targets):
            return [("leasing", "9999_not_yet")] * 2

    monkeypatch.setattr(wait_for_services, "MigrationExecutor", Pending)
    with pytest.raises(CommandError, match="2 migrations not applied yet"):
        call_command("wait_for_services", "--migrated", "--timeout", "0")
    call_command("wait_for_services", "--timeout", "0")  # without --migrated it does not ask
