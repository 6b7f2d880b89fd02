"""Wait until the database and the broker answer (and, with ``--migrated``, until every
migration is applied): how the containers of docker-compose.yml order their start without
relying on health checks (docs/operations.md, "Containers")."""

from __future__ import annotations

import time

from django.core.management.base import BaseCommand, CommandError
from django.db import DEFAULT_DB_ALIAS, connections
from django.db.migrations.executor import MigrationExecutor


def database_ready(*, migrated: bool) -> str:
    """'' when the database answers (and has every migration applied, if *migrated*); else
    what is missing, in words."""
    connection = connections[DEFAULT_DB_ALIAS]
    try:
        connection.ensure_connection()
        if migrated:
            executor = MigrationExecutor(connection)
            plan = executor.migration_plan(executor.loader.graph.leaf_nodes())
            if plan:
                return f"{len(plan)} migrations not applied yet"
        return ""
    except Exception as exc:  # noqa: BLE001 — any failure to connect means "not yet"
        return f"database: {exc}".strip()
    finally:
        if not connection.in_atomic_block:  # (a test's transaction)
            connection.close()


def broker_ready() -> str:
    """'' when Celery's broker accepts a connection; else why not."""
    from portal.celery import app

    try:
        with app.connection_for_write() as conn:
            conn.ensure_connection(max_retries=1, timeout=2)
        return ""
    except Exception as exc:  # noqa: BLE001 — any failure to connect means "not yet"
        return f"broker: {exc}".strip()


class Command(BaseCommand):
    help = "Wait until the database and the broker answer (and the migrations are applied)."

    def add_arguments(self, parser):
        parser.add_argument(
            "--timeout", type=float, default=120, help="give up after this many seconds"
        )
        parser.add_argument(
            "--migrated",
            action="store_true",
            help="also wait until every migration is applied (by another process)",
        )

    def handle(self, *args, timeout, migrated, **options):
        deadline = time.monotonic() + timeout
        while True:
            missing = [m for m in (database_ready(migrated=migrated), broker_ready()) if m]
            if not missing:
                self.stdout.write("database and broker ready")
                return
            if time.monotonic() >= deadline:
                raise CommandError(f"still waiting after {timeout:g} s: {'; '.join(missing)}")
            time.sleep(1)
