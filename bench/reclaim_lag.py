#!/usr/bin/env python
"""Reclamation lag: end time → cards free, for many leases ending in the same minute.

Real worker and beat (prefork, 2 children) on PostgreSQL + Redis, like production: the
beat's tick (every --tick seconds) ends the leases whose end has come. With --kill, the worker
and its beat are killed with SIGKILL a few seconds before the first end and a new one starts
later: the new beat's first tick has to find every lease past its end.

    .venv/bin/python bench/reclaim_lag.py                # 200 leases, one worker
    .venv/bin/python bench/reclaim_lag.py --kill         # kill the worker before the ends
Traffic stays on 127.0.0.1; the run is bounded (about two minutes).
"""

from __future__ import annotations

import argparse
import os
import secrets
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DB = os.environ.get("CARDPOOL_BENCH_RECLAIM_DB", "cardpool_bench_reclaim")  # bench/smoke.py
PG = "postgres://postgres@127.0.0.1:5432"


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--leases", type=int, default=200)
    parser.add_argument(
        "--sweep", type=int, default=15, help="CARDPOOL_SWEEP_SECONDS for the worker's beat"
    )
    parser.add_argument(
        "--tick", type=int, default=2, help="CARDPOOL_TICK_SECONDS for the worker's beat"
    )
    parser.add_argument(
        "--ends-in", type=float, default=70, help="seconds from now to the first lease's end"
    )
    parser.add_argument("--kill", action="store_true", help="kill the worker before the leases end")
    parser.add_argument(
        "--down", type=float, default=20.0, help="seconds without a worker when --kill"
    )
    args = parser.parse_args()

    var = Path(tempfile.mkdtemp(prefix="cardpool-bench-"))
    env = os.environ | {
        "DATABASE_URL": f"{PG}/{DB}",
        "CELERY_BROKER_URL": f"redis://127.0.0.1:6379/{os.environ.get('CARDPOOL_BENCH_REDIS_DB', 12)}",
        "CARDPOOL_SECRET_KEY": secrets.token_hex(32),
        "CARDPOOL_VAR_DIR": str(var),
        "CARDPOOL_SWEEP_SECONDS": str(args.sweep),
        "CARDPOOL_TICK_SECONDS": str(args.tick),
        "DJANGO_SETTINGS_MODULE": "portal.settings",
    }
    subprocess.run(["psql", PG + "/postgres", "-qc", f"DROP DATABASE IF EXISTS {DB}"], check=True)
    subprocess.run(["psql", PG + "/postgres", "-qc", f"CREATE DATABASE {DB}"], check=True)
    subprocess.run([sys.executable, "manage.py", "migrate", "-v0"], cwd=ROOT, env=env, check=True)
    os.environ.update(env)
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()
    from django.contrib.auth import get_user_model
    from django.utils import timezone

    from inventory.models import Card, CardModel, Node, Region
    from leasing.choices import LeaseStatus
    from leasing.lifecycle import requests as lease_requests
    from leasing.models import Lease, LeaseEvent
    from portal.celery import app
    from portal.models import Membership, Team

    with app.connection_for_write() as conn:
        conn.default_channel.queue_purge("celery")
    model = CardModel.objects.create(
        vendor="nvidia", name="Bench GPU", slug="bench-gpu", memory_gb=80
    )
    region = Region.objects.create(slug="bench", name="bench")
    nodes = Node.objects.bulk_create(
        Node(hostname=f"b{i:03d}", region=region) for i in range(args.leases // 8 + 1)
    )
    Card.objects.bulk_create(
        Card(node=n, card_model=model, index=i, uuid=f"{n.hostname}-{i}")
        for n in nodes
        for i in range(8)
    )
    team = Team.objects.create(slug="bench", name="bench")
    user = get_user_model().objects.create_user("bench")
    Membership.objects.create(user=user, team=team)

    def start(name):
        log = open(var / f"{name}.log", "w")  # noqa: SIM115 - lives as long as the worker
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
                "WARNING",
                "--concurrency",
                "2",
                "--hostname",
                f"{name}@%h",
                "--schedule",
                str(var / f"{name}-beat"),
            ],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # so its beat and pool children die with it
        )
        time.sleep(4)
        return proc

    worker = start("w1")
    try:
        # All leases end inside one minute (less for a short --ends-in), --ends-in s from now.
        base = timezone.now()
        spread = min(55.0, args.ends_in * 0.8)
        for i in range(args.leases):
            lease_requests.lease_request(
                user=user,
                team=team,
                card_model=model,
                count=1,
                duration=timedelta(seconds=args.ends_in)
                + timedelta(seconds=spread * i / args.leases)
                - (timezone.now() - base),
            )
        deadline = time.monotonic() + 60
        while (
            Lease.objects.filter(status=LeaseStatus.ACTIVE).count() < args.leases
            and time.monotonic() < deadline
        ):
            time.sleep(0.5)
        first_end = Lease.objects.order_by("end_at").values_list("end_at", flat=True).first()
        last_end = Lease.objects.order_by("-end_at").values_list("end_at", flat=True).first()
        restarted = None
        if args.kill:
            time.sleep(max((first_end - timezone.now()).total_seconds() - 5, 0))
            os.killpg(worker.pid, signal.SIGKILL)
            worker.wait()
            time.sleep(args.down)
            worker = start("w2")
            restarted = timezone.now()
        deadline = time.monotonic() + (last_end - timezone.now()).total_seconds() + args.sweep + 60
        while (
            Lease.objects.filter(status=LeaseStatus.ACTIVE).exists() and time.monotonic() < deadline
        ):
            time.sleep(0.5)
    finally:
        os.killpg(worker.pid, signal.SIGKILL)
        worker.wait()
    rows = LeaseEvent.objects.filter(kind="expire").values_list("at", "lease__end_at")
    lags = sorted((at - end).total_seconds() for at, end in rows)
    still = Lease.objects.filter(status=LeaseStatus.ACTIVE).count()
    print()
    print(
        "| leases | reclaimed | still active | lag median (s) | lag p95 (s) | lag max (s) | note |"
    )
    print("|---:|---:|---:|---:|---:|---:|---|")
    note = f"one worker, tick {args.tick} s"
    if args.kill:
        after = sorted((at - max(end, restarted)).total_seconds() for at, end in rows)
        note = f"worker killed, {args.down:.0f} s without one; max lag after restart {after[-1]:.2f} s (tick {args.tick} s)"
    p95 = lags[int(0.95 * (len(lags) - 1))] if lags else float("nan")
    print(
        f"| {args.leases} | {len(lags)} | {still} | {statistics.median(lags):.2f} | {p95:.2f} | {lags[-1]:.2f} | {note} |"
    )
    return 0 if still == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
