"""Placements per second in the service layer when a queue drains at once.

A pool of --nodes × 8 cards of one model is held entirely by one lease; --queued requests of
one card wait behind it. The holder releases (``changes.lease_release``): the queue pass that
runs in the same transaction plans the queue in order while its budget lasts
(``joining.JOIN_BUDGET``) and starts those that fit; the refresh the worker runs right after
the commit (``refresh.queue_refresh``, a slice per transaction) plans and starts the rest.
Times the release from the call until the commit and its hand-over messages are published
(the snapshot and the writes apart), then the refresh until nothing is stale, slice by slice
(run here, in turn, as the worker would). Not a test; run by hand (bench/README.md):

    .venv/bin/python bench/queue_drain.py                  # about two minutes

Needs PostgreSQL (127.0.0.1:5432, trust) and Redis (127.0.0.1:6379); drops and recreates
the database named by --database (must contain "bench"); uses Redis database --redis-db and
empties it afterwards. The waiting leases are written with ``bulk_create`` (their own
requests are what bench/request_latency.py measures); everything else is the real code.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--postgres", default="postgres://postgres@127.0.0.1:5432")
    p.add_argument("--database", default="cardpool_bench_drain")
    p.add_argument("--redis", default="redis://127.0.0.1:6379")
    p.add_argument("--redis-db", type=int, default=12)
    p.add_argument("--nodes", type=int, default=200, help="× 8 cards (default 1,600)")
    p.add_argument(
        "--queued", default="200,1000,1600,3000", help="waiting leases per run (comma-separated)"
    )
    p.add_argument("--runs", type=int, default=3, help="runs per size (3)")
    return p.parse_args(argv)


def setup(args) -> None:
    if "bench" not in args.database:
        sys.exit("--database must contain 'bench' (it is dropped and recreated)")
    import report_scale

    os.environ["CELERY_BROKER_URL"] = f"{args.redis}/{args.redis_db}"
    report_scale.setup_django(args)


def one_run(args, queued: int) -> dict:
    from django.contrib.auth import get_user_model
    from django.db import connection, transaction
    from django.utils import timezone

    from inventory.models import Card, CardModel, Node, Region
    from leasing.choices import LeaseStatus
    from leasing.lifecycle import changes
    from leasing.lifecycle import requests as lease_requests
    from leasing.models import Allocation, Lease
    from leasing.scheduler import plancache
    from leasing.scheduler import refresh as refreshing
    from leasing.scheduler import run as scheduler_run
    from portal.models import Membership, Team

    # A fresh world per run.
    with connection.cursor() as cur:
        cur.execute(
            "TRUNCATE leasing_lease, inventory_card, inventory_node, inventory_cardmodel, "
            "portal_membership, portal_team, inventory_region CASCADE"
        )
    region = Region.objects.create(slug="r", name="R")
    model = CardModel.objects.create(slug="drain", name="Drain", vendor="nvidia", memory_gb=80)
    Node.objects.bulk_create(Node(hostname=f"d{i:04d}", region=region) for i in range(args.nodes))
    Card.objects.bulk_create(
        Card(node=node, card_model=model, index=j, uuid=f"{node.hostname}-{j}")
        for node in Node.objects.all()
        for j in range(8)
    )
    with connection.cursor() as cur:
        cur.execute("ANALYZE inventory_card; ANALYZE inventory_node")
    User = get_user_model()
    user, _ = User.objects.get_or_create(username="drainer")
    team = Team.objects.create(slug="drain", name="Drain")
    Membership.objects.create(user=user, team=team, role=Membership.Role.MEMBER)
    pool = args.nodes * 8
    holder = lease_requests.lease_request(
        user=user, team=team, card_model=model, count=pool, duration=timedelta(hours=8),
        same_node=False,
    )  # fmt: skip
    assert holder.status == LeaseStatus.PROVISIONING, holder.status
    now = timezone.now()
    Lease.objects.bulk_create(
        Lease(
            user=user,
            team=team,
            card_model=model,
            count=1,
            duration=timedelta(hours=2),
            start_at=now,
            end_at=now + timedelta(hours=2),
            status=LeaseStatus.QUEUED,
            status_changed_at=now,
            submitted_at=now + timedelta(microseconds=i),
        )
        for i in range(queued)
    )
    with connection.cursor() as cur:
        cur.execute("ANALYZE leasing_lease; ANALYZE leasing_allocation")

    # Time the parts of the pass by wrapping them (bench-only instrumentation, undone below).
    spent = {"snapshot": 0.0, "start": 0.0}
    real = {
        "load": plancache.load,  # the snapshot: cards, holders, queue
        "start_batch": scheduler_run.start_batch,
    }

    def timed(name, part):
        def wrapper(*a, **kw):
            t = time.perf_counter()
            try:
                return real[name](*a, **kw)
            finally:
                spent[part] += time.perf_counter() - t

        return wrapper

    plancache.forget()  # the pass reads the database, as a drain after a restart does
    plancache.load = timed("load", "snapshot")
    scheduler_run.start_batch = timed("start_batch", "start")
    commit = {}
    try:
        t0 = time.perf_counter()
        with transaction.atomic():
            # Registered first, so it runs first after the commit: lease_release's transaction
            # is nested in this one, and its hand-over messages are published after the marker.
            transaction.on_commit(lambda: commit.setdefault("at", time.perf_counter()))
            changes.lease_release(lease=holder, user=user)
        t1 = time.perf_counter()
    finally:
        plancache.load = real["load"]
        scheduler_run.start_batch = real["start_batch"]
    starting = Lease.objects.filter(status=LeaseStatus.PROVISIONING).exclude(pk=holder.pk)
    by_release = starting.count()
    # The refresh the worker runs after the commit, slice by slice, until nothing is stale.
    slices = []
    while True:
        s = time.perf_counter()
        more = refreshing.queue_refresh(model.pk)
        slices.append(time.perf_counter() - s)
        if not more:
            break
    placed = starting.count()
    with connection.cursor() as cur:
        cur.execute(
            "SELECT count(*) FROM leasing_allocation a JOIN leasing_allocation b "
            "ON a.card_id = b.card_id AND a.id < b.id "
            "AND a.start_at < b.end_at AND b.start_at < a.end_at"
        )
        overlaps = cur.fetchone()[0]
    held = Allocation.objects.filter(lease__status=LeaseStatus.PROVISIONING).exclude(lease=holder)
    return {
        "queued": queued,
        "by_release": by_release,
        "placed": placed,
        "slices": len(slices),
        "refresh": sum(slices),
        "slice_max": max(slices),
        "cards_held": held.count(),
        "overlaps": overlaps,
        "to_commit": commit["at"] - t0,
        "total": t1 - t0,
        "publish": t1 - commit["at"],
        **spent,
    }


def purge(args) -> None:
    from portal.celery import app

    with app.connection_for_write() as conn:
        conn.default_channel.client.flushdb()


def main(argv=None) -> None:
    args = parse_args(argv)
    setup(args)
    import report_scale

    sizes = [int(x) for x in args.queued.split(",") if x.strip()]
    rows = []
    try:
        for queued in sizes:
            runs = []
            for _ in range(args.runs):
                runs.append(one_run(args, queued))
                purge(args)
            best = min(runs, key=lambda r: r["total"] + r["refresh"])
            best["median_total"] = statistics.median(r["total"] + r["refresh"] for r in runs)
            rows.append(best)
            print(
                f"  {queued} waiting: placed {best['placed']} in {best['total'] + best['refresh']:.3f} s",
                flush=True,
            )
    finally:
        report_scale.drop_db(args)
    pool = args.nodes * 8
    print()
    print(
        f"## Queue drain — {pool:,} cards ({args.nodes} nodes × 8), one model, held by one lease "
        f"that is released; best of {args.runs} runs per size"
    )
    print()
    print(
        "| waiting | placed | by the release's pass | release → committed s | + hand-over messages s "
        "| snapshot s | writes (3 statements) s | refresh after it: slices, s | longest slice ms "
        "| placements/s (release and refresh) | median of runs s | overlapping allocations |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(
            f"| {r['queued']:,} | {r['placed']:,} | {r['by_release']:,} | {r['to_commit']:.3f} | "
            f"{r['publish']:.3f} | {r['snapshot']:.3f} | {r['start']:.3f} | "
            f"{r['slices']:,}, {r['refresh']:.3f} | {r['slice_max'] * 1000:.0f} | "
            f"{r['placed'] / (r['total'] + r['refresh']):,.0f} | {r['median_total']:.3f} | "
            f"{r['overlaps']} |"
        )


if __name__ == "__main__":
    main()
