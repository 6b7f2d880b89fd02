"""Shared set-up for the fault scripts (bench/fault_redis.py, bench/fault_postgres.py).

A fresh PostgreSQL database, a pool of cards, requesters with API tokens, a real Celery
worker with beat and a real gunicorn, all on 127.0.0.1.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import tempfile
import time
from http.client import HTTPConnection
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PG = "postgres://postgres@127.0.0.1:5432"
PORT = 8791


class Rig:
    """The database, fixtures and processes of one fault run; ``close()`` stops them."""

    def __init__(self, db: str, *, cards: int = 96, users: int = 8, sweep: int = 5):
        self.var = Path(tempfile.mkdtemp(prefix="cardpool-fault-"))
        self.env = os.environ | {
            "DATABASE_URL": f"{PG}/{db}",
            "CELERY_BROKER_URL": "redis://127.0.0.1:6379/11",
            "CARDPOOL_SECRET_KEY": secrets.token_hex(32),
            "CARDPOOL_VAR_DIR": str(self.var),
            "CARDPOOL_SWEEP_SECONDS": str(sweep),
            "CARDPOOL_ALLOWED_HOSTS": "127.0.0.1,localhost",
            "DJANGO_SETTINGS_MODULE": "portal.settings",
        }
        psql = ["psql", PG + "/postgres", "-qc"]
        subprocess.run([*psql, f"DROP DATABASE IF EXISTS {db}"], check=True)
        subprocess.run([*psql, f"CREATE DATABASE {db}"], check=True)
        subprocess.run(
            [sys.executable, "manage.py", "migrate", "-v0"], cwd=ROOT, env=self.env, check=True
        )
        os.environ.update(self.env)
        sys.path.insert(0, str(ROOT))
        import django

        django.setup()
        from django.contrib.auth import get_user_model

        from inventory.models import Card, CardModel, Node, Region
        from portal.celery import app
        from portal.models import Membership, Team
        from portal.tokens.services import token_create

        with app.connection_for_write() as conn:
            conn.default_channel.queue_purge("celery")
        self.model = CardModel.objects.create(
            vendor="nvidia", name="Fault GPU", slug="fault-gpu", memory_gb=80
        )
        region = Region.objects.create(slug="fault", name="fault")
        nodes = Node.objects.bulk_create(
            Node(hostname=f"f{i:03d}", region=region) for i in range(cards // 8)
        )
        Card.objects.bulk_create(
            Card(node=n, card_model=self.model, index=i, uuid=f"{n.hostname}-{i}")
            for n in nodes
            for i in range(8)
        )
        team = Team.objects.create(slug="fault", name="fault")
        self.tokens = []
        for i in range(users):
            user = get_user_model().objects.create_user(f"fault{i}")
            Membership.objects.create(user=user, team=team)
            self.tokens.append(token_create(user=user, name="fault")[1])
        self.procs: dict[str, subprocess.Popen] = {}

    def start(self, name: str, argv: list[str]) -> None:
        log = open(self.var / f"{name}.log", "w")  # noqa: SIM115 - lives as long as the process
        self.procs[name] = subprocess.Popen(
            argv, cwd=ROOT, env=self.env, stdout=log, stderr=subprocess.STDOUT
        )

    def start_worker(self) -> None:
        self.start(
            "worker",
            [sys.executable, "-m", "celery", "-A", "portal", "worker", "--beat"]
            + ["--loglevel", "WARNING", "--concurrency", "2", "--hostname", "fault@%h"]
            + ["--schedule", str(self.var / "beat")],
        )

    def start_web(self, workers: int = 4) -> None:
        self.start(
            "web",
            [sys.executable, "-m", "gunicorn", "portal.wsgi", "--bind", f"127.0.0.1:{PORT}"]
            + ["--workers", str(workers), "--timeout", "60"],
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if http("GET", "/api/v1/leases/?limit=1", self.tokens[0])[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.2)
        raise RuntimeError("gunicorn did not answer: " + (self.var / "web.log").read_text())

    def request_lease(self, i: int) -> tuple[int, float]:
        body = {"card_model": self.model.slug, "count": 1, "duration_minutes": 60}
        t = time.monotonic()
        try:
            status = http("POST", "/api/v1/leases/", self.tokens[i % len(self.tokens)], body)[0]
        except OSError:
            status = 0  # no answer at all
        return status, time.monotonic() - t

    def close(self) -> None:
        for proc in self.procs.values():
            proc.terminate()
        for proc in self.procs.values():
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()


def http(method: str, path: str, token: str, body: dict | None = None) -> tuple[int, bytes]:
    conn = HTTPConnection("127.0.0.1", PORT, timeout=60)
    try:
        headers = {"Authorization": f"Token {token}", "Accept": "application/json"}
        payload = None
        if body is not None:
            payload = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        conn.request(method, path, body=payload, headers=headers)
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def consistency() -> dict:
    """Leases by status, provisionings that succeeded twice, and half-written leases."""
    from django.db.models import Count, Q

    from leasing.choices import HOLDING_STATES
    from leasing.models import Lease

    leases = Lease.objects.annotate(
        ok=Count(
            "backend_calls", filter=Q(backend_calls__action="provision", backend_calls__ok=True)
        ),
        cards=Count("allocations", distinct=True),
    )
    return {
        "leases": leases.count(),
        "active": leases.filter(status="active").count(),
        "twice": leases.filter(ok__gt=1).count(),
        "half": leases.filter(status__in=HOLDING_STATES).exclude(cards=1).count(),
    }
