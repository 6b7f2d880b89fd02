"""How long a request takes when it meets a queue: the curve over the queue's length.

A pool of --nodes x 8 cards of one model, every card held (one-card leases ending at
random between 30 min and 10 h from now), and N leases of 1-4 cards waiting (submitted
over the last hour), planned by one pass (and the refresh after it). Then --requests
one-card requests of 1-4 h ("short": they sort inside the queue) and as many of 24 h
("long": they sort at its end) arrive one after another through ``lease_request`` (the
service the API calls): each meets the queue, joins it and gets its estimated start. Times
each call from the service call to the commit, in this process, which keeps the planner's
picture from one pass to the next (scheduler/plancache.py); then --requests more short ones
served by four processes in turn (gunicorn's four workers: each keeps the picture of its own
last pass and brings it up to date from the steps the others shared through the cache); then
as many in a process with no picture at all (a worker just started: it rebuilds the picture
from the last shared base and the steps after it; the worker's fresh base every
``plancache.BASE_EVERY`` steps is made between two requests, untimed for them, as the worker
does it on another core); then as many with the cache emptied too ("no picture anywhere":
the pool and the queue are read from the database). The process settles its garbage
collector before timing anything, as portal/wsgi.py and each Celery child do
(portal/runtime.py). Then, untimed for the requests but timed here: the refresh that
plans the stale stretch the requests left (a slice per transaction: the slice is what a
request arriving meanwhile may wait), the tick when nothing is due, and a pass over the whole
queue as a release runs it (its first slice under the lock, then the refresh). Not a test;
run by hand:

    .venv/bin/python bench/queue_length.py                   # 0, 100, 300, 1000 waiting

Needs PostgreSQL (127.0.0.1:5432, trust); drops and recreates the database named by
--database (must contain "bench"). The holders and the waiting leases are written with
``bulk_create``; everything timed is the real code.
"""

from __future__ import annotations

import argparse
import math
import os
import random
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
    p.add_argument("--database", default="cardpool_bench_queue_length")
    p.add_argument("--redis", default="redis://127.0.0.1:6379")
    p.add_argument("--redis-db", type=int, default=13)
    p.add_argument("--nodes", type=int, default=200, help="x 8 cards (default 1,600)")
    p.add_argument("--waiting", default="0,100,300,1000", help="queue lengths (comma-separated)")
    p.add_argument("--requests", type=int, default=40, help="timed requests per length")
    p.add_argument("--seed", type=int, default=18)
    p.add_argument(
        "--profile", action="store_true", help="cProfile the requests of the last length"
    )
    return p.parse_args(argv)


def one_length(args, waiting: int) -> dict:
    from django.contrib.auth import get_user_model
    from django.db import connection, transaction
    from django.utils import timezone

    from inventory.models import Card, CardModel, Node, Region
    from leasing.choices import LeaseStatus
    from leasing.lifecycle import requests as lease_requests
    from leasing.models import Allocation, Lease
    from portal.models import Membership, Team
    from tests.leasing.passes import queue_advance

    rng = random.Random(args.seed + waiting)
    with connection.cursor() as cur:
        cur.execute(
            "TRUNCATE leasing_lease, inventory_card, inventory_node, inventory_cardmodel, "
            "portal_membership, portal_team, inventory_region CASCADE"
        )
    region = Region.objects.create(slug="r", name="R")
    model = CardModel.objects.create(slug="ql", name="QL", vendor="nvidia", memory_gb=80)
    Node.objects.bulk_create(Node(hostname=f"q{i:04d}", region=region) for i in range(args.nodes))
    Card.objects.bulk_create(
        Card(node=node, card_model=model, index=j, uuid=f"{node.hostname}-{j}")
        for node in Node.objects.all()
        for j in range(8)
    )
    user, _ = get_user_model().objects.get_or_create(username="queuer")
    team = Team.objects.create(slug="ql", name="QL")
    Membership.objects.create(user=user, team=team, role=Membership.Role.MEMBER)
    now = timezone.now()
    cards = list(Card.objects.order_by("pk").values_list("pk", flat=True))
    holders = []
    for _card in cards:
        end = now + timedelta(minutes=rng.randint(30, 600))
        holders.append(
            Lease(
                user=user, team=team, card_model=model, count=1, duration=end - now,
                start_at=now, end_at=end, status=LeaseStatus.ACTIVE, status_changed_at=now,
                submitted_at=now, activated_at=now,
            )
        )  # fmt: skip
    holders = Lease.objects.bulk_create(holders)
    Allocation.objects.bulk_create(
        Allocation(card_id=c, lease=lease, start_at=now, end_at=lease.end_at)
        for c, lease in zip(cards, holders, strict=True)
    )
    Lease.objects.bulk_create(
        Lease(
            user=user, team=team, card_model=model, count=rng.randint(1, 4),
            duration=(d := timedelta(minutes=rng.randint(30, 480))), start_at=now,
            end_at=now + d, status=LeaseStatus.QUEUED, status_changed_at=now,
            submitted_at=now - timedelta(seconds=rng.randint(0, 3600)),
        )
        for _ in range(waiting)
    )  # fmt: skip
    with connection.cursor() as cur:
        cur.execute("ANALYZE")
    t = time.perf_counter()
    queue_advance(card_model_ids=[model.pk])  # plans (and stores) the whole queue
    first_pass = time.perf_counter() - t

    # warm up (first-call imports), not timed
    lease_requests.lease_request(
        user=user, team=team, card_model=model, count=1, duration=timedelta(hours=30),
        same_node=True,
    )  # fmt: skip
    out = {}
    for kind, hours in (("short", (1, 4)), ("long", (24, 24))):
        out[kind] = timed_requests(args, rng, user, team, model, hours)
    # The same, each request in a process that did not make the last pass (it reads the
    # pool and the queue from the database: scheduler/plancache.py).
    # Each request served by one of four processes in turn (gunicorn's four workers), each
    # with the picture it kept from its own last pass, brought up to date from the steps
    # the other three shared meanwhile.
    out["four"] = timed_requests(args, rng, user, team, model, (1, 4), cold="four")
    out["cold"] = timed_requests(args, rng, user, team, model, (1, 4), cold="other")
    # And with no picture anywhere: neither in the process nor shared (the cache emptied).
    out["bare"] = timed_requests(args, rng, user, team, model, (1, 4), cold="bare")
    # What the worker does after those requests: plan the stale stretch they left behind
    # them (scheduler.refresh.queue_refresh), a slice per transaction; each slice holds the
    # model's lock, so its length is what a request arriving meanwhile may wait.
    from leasing.scheduler import refresh as refreshing

    holds = lock_holds()  # from here refreshing.queue_refresh names its holds
    slices = []
    t = time.perf_counter()
    more = True
    while more:
        s = time.perf_counter()
        more = refreshing.queue_refresh(model.pk)
        slices.append(time.perf_counter() - s)
    refresh = time.perf_counter() - t
    refresh_holds, holds[:] = list(holds), []
    # The tick: the first plans the whole queue (a slice, the refresh the rest); then, with
    # nothing due and nothing changed, it only checks the stored plan.
    refreshing.queue_tick(model.pk)
    while refreshing.queue_refresh(model.pk):  # what the worker does after it
        pass
    ticks = []
    for _ in range(5):
        t = time.perf_counter()
        refreshing.queue_tick(model.pk)
        ticks.append(time.perf_counter() - t)
    tick = statistics.median(ticks)
    tick_holds = list(holds)  # the tick's own passes and the refresh slices it and the worker ran
    lock_holds(stop=True)
    # A pass over the whole queue as a release runs it (the model locked, in order while the
    # budget lasts), and the refresh that plans the rest after it.
    t = time.perf_counter()
    with transaction.atomic():
        queue_advance(card_model_ids=[model.pk])
    full = time.perf_counter() - t
    t = time.perf_counter()
    while refreshing.queue_refresh(model.pk):
        pass
    full_refresh = time.perf_counter() - t
    with connection.cursor() as cur:
        cur.execute(
            "SELECT count(*) FROM leasing_allocation a JOIN leasing_allocation b "
            "ON a.card_id = b.card_id AND a.id < b.id "
            "AND a.start_at < b.end_at AND b.start_at < a.end_at"
        )
        overlaps = cur.fetchone()[0]
    slices.sort()
    return {
        "waiting": waiting, **out, "first_pass": first_pass, "full": full, "overlaps": overlaps,
        "refresh": refresh, "slices": len(slices), "tick": tick, "full_refresh": full_refresh, "slice_max": slices[-1],
        "slice_p95": slices[min(len(slices) - 1, math.ceil(0.95 * len(slices)) - 1)],
        "hold_refresh": max(longest(refresh_holds, "refresh"), longest(tick_holds, "refresh")),
        "hold_tick": longest(tick_holds, "tick"),
    }  # fmt: skip


_real_lock = _real_refresh = None


def lock_holds(stop: bool = False) -> list[tuple[str, float]]:
    """Time each hold of the model's lock by the refresh and the tick (from taking the lock
    to the commit), each named by who held it: ``refresh`` (a slice of ``queue_refresh``,
    also those the tick runs first) or ``tick`` (the tick's own pass); the list fills as
    they commit. *stop*: the real lock and refresh again."""
    from django.db import transaction

    from leasing.scheduler import refresh

    global _real_lock, _real_refresh
    if _real_lock is None:
        _real_lock, _real_refresh = refresh.lock_card_models, refresh.queue_refresh
    if stop:
        refresh.lock_card_models, refresh.queue_refresh = _real_lock, _real_refresh
        return []
    holds: list[tuple[str, float]] = []
    inside: list[str] = []

    def timed(ids):
        who = inside[-1] if inside else "tick"
        began = time.perf_counter()
        locked = _real_lock(ids)
        transaction.on_commit(lambda: holds.append((who, time.perf_counter() - began)))
        return locked

    def named_refresh(*a, **kw):
        inside.append("refresh")
        try:
            return _real_refresh(*a, **kw)
        finally:
            inside.pop()

    refresh.lock_card_models, refresh.queue_refresh = timed, named_refresh
    return holds


def longest(holds: list[tuple[str, float]], who: str) -> float:
    return max((s for w, s in holds if w == who), default=0.0)


def timed_requests(args, rng, user, team, model, hours, cold="") -> dict:
    from django.core.cache import cache

    from leasing.choices import LeaseStatus
    from leasing.lifecycle import requests as lease_requests
    from leasing.scheduler import plancache

    times, cpu, shares = [], [], []
    processes = [{}, {}, {}, {}]
    own = plancache._kept
    # the models whose passes asked the worker for a fresh base (no worker runs here)
    asked = set()
    send = plancache.enqueue_after_commit
    plancache.enqueue_after_commit = lambda name, model_id: asked.add(model_id)
    if cold == "four":  # each process has served a request before (the first: a column of its own)
        for kept in processes:
            plancache._kept = kept
            lease_requests.lease_request(
                user=user, team=team, card_model=model, count=1,
                duration=timedelta(hours=rng.randint(*hours)), same_node=True,
            )  # fmt: skip
    prof = None
    if args.profile:
        import cProfile

        prof = cProfile.Profile()
        prof.enable()
    for _ in range(args.requests):
        if cold == "four":
            plancache._kept = processes[len(times) % len(processes)]
        elif cold:
            plancache.forget()
        if cold == "bare":
            cache.clear()
        t, c = time.perf_counter(), time.process_time()
        lease = lease_requests.lease_request(
            user=user, team=team, card_model=model, count=1,
            duration=timedelta(hours=rng.randint(*hours)), same_node=True,
        )  # fmt: skip
        times.append(time.perf_counter() - t)
        cpu.append(time.process_time() - c)
        assert lease.status == LeaseStatus.QUEUED and lease.estimated_start, lease
        if model.pk in asked:
            # the worker's part (leasing.tasks.plan_share), on another core in production:
            # a fresh base every BASE_EVERY steps; untimed for the requests, timed here
            asked.discard(model.pk)
            t = time.perf_counter()
            plancache.share(model.pk)
            shares.append(time.perf_counter() - t)
    plancache._kept = own
    plancache.enqueue_after_commit = send
    if prof is not None:
        import pstats

        prof.disable()
        pstats.Stats(prof).sort_stats(os.environ.get("QL_SORT", "tottime")).print_stats(
            int(os.environ.get("QL_ROWS", "20"))
        )
    times.sort()
    cpu.sort()
    return {
        "median": statistics.median(times),
        "p95": times[min(len(times) - 1, math.ceil(0.95 * len(times)) - 1)],
        "cpu_median": statistics.median(cpu),
        "cpu_p95": cpu[min(len(cpu) - 1, math.ceil(0.95 * len(cpu)) - 1)],
        "shares": len(shares),
        "share_ms": statistics.median(shares) * 1000 if shares else 0,
    }


def main(argv=None) -> None:
    args = parse_args(argv)
    if "bench" not in args.database:
        sys.exit("--database must contain 'bench' (it is dropped and recreated)")
    os.environ["CELERY_BROKER_URL"] = f"{args.redis}/{args.redis_db}"
    import report_scale

    report_scale.setup_django(args)
    from portal.runtime import settle_gc

    settle_gc()  # what portal/wsgi.py and each Celery child do once the app is loaded
    rows = []
    try:
        for waiting in (int(x) for x in args.waiting.split(",") if x.strip()):
            rows.append(one_length(args, waiting))
            r = rows[-1]
            print(
                f"  {waiting} waiting: p95 {r['short']['p95'] * 1000:.0f} ms (short), "
                f"{r['long']['p95'] * 1000:.0f} ms (long)",
                flush=True,
            )
    finally:
        report_scale.drop_db(args)
    load = os.getloadavg()
    for r in rows:
        print(
            f"{r['waiting']:,} waiting: longest hold of the model's lock: by a refresh slice "
            f"{r['hold_refresh'] * 1000:.0f} ms, by the tick's own pass "
            f"{r['hold_tick'] * 1000:.0f} ms"
        )
    print(
        f"\n{args.nodes * 8:,} cards ({args.nodes} nodes x 8), every card held; "
        f"{args.requests} one-card requests per length; load average {load[0]:.1f}\n"
    )
    print(
        "| waiting | short request (1-4 h, joins inside the queue): median ms | **p95 ms** | "
        "p95 CPU ms (bench process) | long request (24 h, joins at the end): median ms | "
        "**p95 ms** | p95 CPU ms | short, served by four processes in turn: median ms | "
        "**p95 ms** | short, a process with no picture (shared steps): median ms | "
        "p95 ms | the worker's fresh bases meanwhile: n, median ms | short, no picture "
        "anywhere: median ms | p95 ms | refresh after them: slices, total ms | slice p95 / max ms "
        "(lock held) | tick, nothing due: ms | whole-queue pass (as a release): first slice ms, "
        "refresh after it ms | overlapping allocations |"
    )
    print(
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    )
    for r in rows:
        s, g = r["short"], r["long"]
        print(
            f"| {r['waiting']:,} | {s['median'] * 1000:.0f} | **{s['p95'] * 1000:.0f}** | "
            f"{s['cpu_p95'] * 1000:.0f} | {g['median'] * 1000:.0f} | **{g['p95'] * 1000:.0f}** | "
            f"{g['cpu_p95'] * 1000:.0f} | {r['four']['median'] * 1000:.0f} | "
            f"**{r['four']['p95'] * 1000:.0f}** | {r['cold']['median'] * 1000:.0f} | "
            f"{r['cold']['p95'] * 1000:.0f} | {r['cold']['shares'] + r['four']['shares']}, "
            f"{r['cold']['share_ms']:.0f} | {r['bare']['median'] * 1000:.0f} | "
            f"{r['bare']['p95'] * 1000:.0f} | {r['slices']}, {r['refresh'] * 1000:,.0f} | "
            f"{r['slice_p95'] * 1000:.0f} / {r['slice_max'] * 1000:.0f} | "
            f"{r['tick'] * 1000:,.0f} | {r['full'] * 1000:,.0f}, {r['full_refresh'] * 1000:,.0f} | "
            f"{r['overlaps']} |"
        )


if __name__ == "__main__":
    main()
