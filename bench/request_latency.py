#!/usr/bin/env python
"""How long a lease request takes, end to end, and how many the portal admits per second.

Run by hand, never by the test suite (bench/README.md):

    .venv/bin/python bench/request_latency.py --requests 200 --levels 1,10,50

It recreates a dedicated PostgreSQL database (``cardpool_bench``), builds one fresh pool
per phase (``--nodes`` × ``--cards-per-node`` cards of one model, so every phase starts
from the same empty pool), starts a real Celery worker (prefork, 2 children) on its own
Redis database and a real gunicorn, and for each level of concurrent requesters POSTs
``/api/v1/leases/`` for free cards. Per request it reports:

* API response time: client clock, from sending the POST until the 201 is read;
* request → active: from sending the POST (client wall clock) to ``activated_at``,
  which the worker writes when the lease becomes ``active`` (same machine, same clock);
* submitted → active: ``submitted_at`` → ``activated_at``, both written by the portal.

Then admission throughput (requests/s through the API) per level, placements/s through
the service layer alone (``lease_request`` in a loop, in this process, no HTTP), and a
check that no card was ever booked twice. Everything talks to 127.0.0.1 only; every
subprocess is stopped at the end, on Ctrl-C and on SIGTERM.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from datetime import timedelta
from http.client import HTTPConnection
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

LEASE_MINUTES = 120  # long enough that nothing expires during a run


# --- options and environment ------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--requests", type=int, default=200, help="requests per level (default 200)")
    p.add_argument(
        "--levels", default="1,10,50", help="concurrent requesters, comma-separated (1,10,50)"
    )
    p.add_argument(
        "--service-placements",
        type=int,
        default=1000,
        help="lease_request calls in the in-process service-layer run (default 1000; 0 skips)",
    )
    p.add_argument(
        "--floor",
        type=int,
        default=400,
        help="GETs of one card model at the highest level: the stack's own ceiling (0 skips)",
    )
    p.add_argument("--nodes", type=int, default=200, help="nodes per pool (default 200)")
    p.add_argument("--cards-per-node", type=int, default=8, help="cards per node (default 8)")
    p.add_argument("--count", type=int, default=1, help="cards per request (default 1)")
    p.add_argument("--web-workers", type=int, default=4, help="gunicorn workers (default 4)")
    p.add_argument("--worker-concurrency", type=int, default=2, help="Celery children (2)")
    p.add_argument("--database", default="cardpool_bench", help="database to drop and recreate")
    p.add_argument(
        "--postgres", default="postgres://postgres@127.0.0.1:5432", help="server, no database"
    )
    p.add_argument("--redis", default="redis://127.0.0.1:6379", help="server, no database")
    p.add_argument("--redis-db", type=int, default=13, help="dedicated Redis database (13)")
    p.add_argument("--keep-db", action="store_true", help="leave the database for inspection")
    p.add_argument(
        "--time-limit", type=float, default=300, help="give up after this many seconds (300)"
    )
    p.add_argument(
        "--wait-idle",
        type=float,
        default=0,
        metavar="PCT",
        help="first wait (up to 10 min) until the machine is PCT%% idle over 15 s; for shared hosts",
    )
    p.add_argument(
        "--skip-analyze",
        action="store_true",
        help="do not ANALYZE after building the pools (what a fresh import looks like)",
    )
    p.add_argument(
        "--settings",
        default="portal.settings",
        help="Django settings module for every process (to try a change; see bench/README.md)",
    )
    p.add_argument("--json", type=Path, help="also write the results here, as JSON")
    p.add_argument(
        "--profile",
        type=Path,
        help="run the service-layer loop under cProfile and write the stats here",
    )
    args = p.parse_args(argv)
    args.levels = [int(x) for x in args.levels.split(",") if x.strip()]
    if "bench" not in args.database:
        p.error("--database must contain 'bench': it is dropped and recreated")
    for url in (args.postgres, args.redis):
        if "127.0.0.1" not in url and "localhost" not in url:
            p.error(f"{url}: the bench only talks to this machine")
    pool = args.nodes * args.cards_per_node
    for n in [args.requests, args.service_placements]:
        if n * args.count > pool:
            p.error(f"{n} requests × {args.count} cards do not fit a pool of {pool} cards")
    return args


def bench_environment(args: argparse.Namespace, var_dir: Path) -> dict[str, str]:
    """The environment of this process, the worker and the web server alike."""
    return {
        "DJANGO_SETTINGS_MODULE": args.settings,
        "DATABASE_URL": f"{args.postgres.rstrip('/')}/{args.database}",
        "CELERY_BROKER_URL": f"{args.redis.rstrip('/')}/{args.redis_db}",
        "CARDPOOL_SECRET_KEY": secrets.token_hex(32),
        "CARDPOOL_ALLOWED_HOSTS": "127.0.0.1",
        "CARDPOOL_DEBUG": "false",
        "CARDPOOL_VAR_DIR": str(var_dir),
        "CARDPOOL_LOG_LEVEL": "WARNING",
    }


# --- database -------------------------------------------------------------------------


def recreate_database(args: argparse.Namespace) -> None:
    import psycopg
    from psycopg import sql

    with psycopg.connect(f"{args.postgres.rstrip('/')}/postgres", autocommit=True) as conn:
        name = sql.Identifier(args.database)
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(name))
        conn.execute(sql.SQL("CREATE DATABASE {}").format(name))


def drop_database(args: argparse.Namespace) -> None:
    import psycopg
    from django.db import connections
    from psycopg import sql

    connections.close_all()
    with psycopg.connect(f"{args.postgres.rstrip('/')}/postgres", autocommit=True) as conn:
        name = sql.Identifier(args.database)
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(name))


def purge_broker(args: argparse.Namespace) -> None:
    """Empty the bench's own Redis database (never any other)."""
    import redis

    redis.Redis.from_url(f"{args.redis.rstrip('/')}/{args.redis_db}").flushdb()


@dataclass
class Fixtures:
    team: object
    users: list  # one per requester
    tokens: list[str]
    models: dict[str, object]  # phase name → card model with its own pool


def build_fixtures(args: argparse.Namespace, phases: list[str]) -> Fixtures:
    """A team of requesters with tokens, and one fresh pool of cards per phase."""
    from decimal import Decimal

    from django.contrib.auth import get_user_model

    from inventory.models import Card, CardModel, InterconnectKind, Node, Region, Vendor
    from portal.models import Membership, Profile, Team
    from portal.tokens.services import token_create

    team = Team.objects.create(slug="bench", name="Bench")
    n_users = max([*args.levels, args.web_workers])
    users = get_user_model().objects.bulk_create(
        get_user_model()(username=f"bench{i:03d}", email=f"bench{i:03d}@example.org")
        for i in range(n_users)
    )
    Profile.objects.bulk_create(Profile(user=u) for u in users)
    Membership.objects.bulk_create(
        Membership(user=u, team=team, role=Membership.Role.MEMBER) for u in users
    )
    tokens = [token_create(user=u, name="bench")[1] for u in users]

    region = Region.objects.create(slug="bench", name="Bench")
    models = {}
    for phase in phases:
        model = CardModel.objects.create(
            vendor=Vendor.NVIDIA,
            slug=f"bench-{phase}",
            name=f"Bench H100 ({phase})",
            family="bench",
            memory_gb=Decimal("80"),
            interconnect_kind=InterconnectKind.NVLINK,
        )
        nodes = Node.objects.bulk_create(
            Node(hostname=f"{phase}-n{i:04d}", region=region) for i in range(args.nodes)
        )
        Card.objects.bulk_create(
            (
                Card(
                    node=node,
                    card_model=model,
                    index=i,
                    uuid=f"{node.hostname}-{i}",
                    interconnect_domain=0,
                )
                for node in nodes
                for i in range(args.cards_per_node)
            ),
            batch_size=2000,
        )
        models[phase] = model
    return Fixtures(team=team, users=users, tokens=tokens, models=models)


# --- subprocesses -----------------------------------------------------------------------


class Processes:
    """The worker and the web server: each in its own process group, stopped together."""

    def __init__(self, env: dict[str, str], log_dir: Path):
        self.env = os.environ | env
        self.log_dir = log_dir
        self.procs: list[tuple[str, subprocess.Popen]] = []

    def start(self, name: str, argv: list[str]) -> subprocess.Popen:
        log = open(self.log_dir / f"{name}.log", "w")  # noqa: SIM115 - the child owns it
        proc = subprocess.Popen(
            argv,
            cwd=ROOT,
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: we stop its children too
        )
        log.close()
        self.procs.append((name, proc))
        return proc

    def log(self, name: str) -> str:
        path = self.log_dir / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def check_alive(self) -> None:
        for name, proc in self.procs:
            if proc.poll() is not None:
                raise RuntimeError(f"{name} exited ({proc.returncode}):\n{self.log(name)[-3000:]}")

    def stop(self) -> None:
        for _name, proc in self.procs:
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        for _name, proc in self.procs:
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                proc.wait(timeout=5)
        self.procs.clear()


def wait_until_idle(percent: float, *, window: float = 15, give_up_after: float = 600) -> float:
    """Wait until the CPUs were at least *percent* idle over *window* seconds (Linux).

    Returns the last idle share seen; gives up (and goes on) after *give_up_after* seconds.
    """

    def ticks() -> tuple[int, int]:
        f = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
        return sum(f), f[3] + f[4]

    deadline = time.monotonic() + give_up_after
    idle = 0.0
    while time.monotonic() < deadline:
        total0, idle0 = ticks()
        time.sleep(window)
        total1, idle1 = ticks()
        idle = 100 * (idle1 - idle0) / max(1, total1 - total0)
        if idle >= percent:
            break
        print(f"machine {idle:.0f}% idle; waiting for {percent:.0f}% …", flush=True)
    return idle


def git_revision() -> str:
    """The commit measured, with '+changes' when the working tree differs from it."""
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=ROOT,
            capture_output=True,
            text=True,
        ).stdout.strip()
    except OSError:
        return "unknown"
    return f"{head}+changes" if dirty else head or "unknown"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_worker(procs: Processes, args: argparse.Namespace, timeout: float = 60) -> None:
    procs.start(
        "worker",
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "portal",
            "worker",
            "--pool",
            "prefork",
            "--concurrency",
            str(args.worker_concurrency),
            "--loglevel",
            "INFO",
            "--without-gossip",
            "--without-mingle",
            "--hostname",
            f"bench-{os.getpid()}@%h",
        ],
    )
    deadline = time.monotonic() + timeout
    while " ready." not in procs.log("worker"):
        procs.check_alive()
        if time.monotonic() > deadline:
            raise RuntimeError("the Celery worker did not become ready:\n" + procs.log("worker"))
        time.sleep(0.2)


def start_web(
    procs: Processes, args: argparse.Namespace, port: int, token: str, timeout: float = 60
) -> None:
    procs.start(
        "web",
        [
            sys.executable,
            "-m",
            "gunicorn",
            "portal.wsgi",
            "--bind",
            f"127.0.0.1:{port}",
            "--workers",
            str(args.web_workers),
            "--timeout",
            "60",
        ],
    )
    deadline = time.monotonic() + timeout
    while True:
        procs.check_alive()
        try:
            status, _body = http("GET", port, "/api/v1/leases/?limit=1", token)
            if status == 200:
                return
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError("gunicorn did not answer:\n" + procs.log("web"))
        time.sleep(0.2)


# --- the client -------------------------------------------------------------------------


def http(method: str, port: int, path: str, token: str, body: dict | None = None):
    conn = HTTPConnection("127.0.0.1", port, timeout=60)
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


@dataclass
class Sample:
    sent_wall: float  # time.time() just before the POST
    api_s: float  # until the response was read
    status: int
    lease_id: int | None
    lease_status: str = ""


@dataclass
class LevelRun:
    requesters: int
    samples: list[Sample] = field(default_factory=list)
    wall_s: float = 0.0  # first POST sent → last response read


def run_level(
    requesters: int,
    total: int,
    *,
    port: int,
    tokens: list[str],
    body: dict | None,
    deadline: float,
    method: str = "POST",
    path: str = "/api/v1/leases/",
) -> LevelRun:
    """*requesters* threads, each its own user, POST (or *method*) until *total* requests
    are sent."""
    run = LevelRun(requesters)
    lock = threading.Lock()
    sent = 0

    def requester(token: str) -> None:
        nonlocal sent
        while time.monotonic() < deadline:
            with lock:
                if sent >= total:
                    return
                sent += 1
            wall = time.time()
            t0 = time.perf_counter()
            try:
                status, raw = http(method, port, path, token, body)
            except OSError:
                status, raw = 0, b""
            api_s = time.perf_counter() - t0
            lease_id, lease_status = None, ""
            if status == 201 and method == "POST":
                data = json.loads(raw)
                lease_id, lease_status = data["id"], data["status"]
            with lock:
                run.samples.append(Sample(wall, api_s, status, lease_id, lease_status))

    threads = [
        threading.Thread(target=requester, args=(tokens[i],), daemon=True)
        for i in range(requesters)
    ]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join(max(1.0, deadline - time.monotonic()))
    run.wall_s = time.perf_counter() - t0
    return run


# --- measuring --------------------------------------------------------------------------

CPU_PARTS = ["web", "worker", "postgres", "redis", "client", "other"]


def cpu_snapshot(procs: Processes, database: str) -> dict:
    """CPU seconds so far, per process we can attribute (our process groups, the bench
    database's backends, redis-server), for this process and for the whole machine
    (Linux /proc; empty elsewhere)."""
    tck = os.sysconf("SC_CLK_TCK")
    groups = {proc.pid: name for name, proc in procs.procs}
    try:
        fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
    except OSError:
        return {}
    ticks = [int(x) for x in fields]
    pids: dict[int, tuple[str, float]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(entry.path, "stat").read_text()
            comm = stat[stat.index("(") + 1 : stat.rindex(")")]
            rest = stat[stat.rindex(")") + 2 :].split()
            cpu = (int(rest[11]) + int(rest[12])) / tck
            group = groups.get(int(rest[2]))
            if group is None and comm == "redis-server":
                group = "redis"  # the whole server: other users' traffic counts too
            if group is None and comm == "postgres":
                cmdline = Path(entry.path, "cmdline").read_bytes()
                group = "postgres" if f" {database} ".encode() in cmdline else None
        except (OSError, ValueError, IndexError):
            continue  # the process is gone
        if group:
            pids[int(entry.name)] = (group, cpu)
    t = os.times()
    return {
        "machine": (sum(ticks[:8]) - ticks[3] - ticks[4]) / tck,  # all but idle and iowait
        "client": t.user + t.system,
        "pids": pids,
    }


def cpu_per_request(before: dict, after: dict, n: int, wall: float) -> dict[str, float]:
    """CPU ms per request by part; 'other' is the rest of the machine (kernel, other users,
    and processes that ended in between, such as a database connection that was closed)."""
    if not before or not after or not n:
        return {}
    d = dict.fromkeys(CPU_PARTS, 0.0)
    for pid, (group, cpu) in after["pids"].items():
        old_group, old_cpu = before["pids"].get(pid, (group, 0.0))
        d[group] += cpu - (old_cpu if old_group == group else 0.0)  # a reused pid starts anew
    d["client"] = after["client"] - before["client"]
    machine = after["machine"] - before["machine"]
    d["other"] = machine - sum(d[k] for k in CPU_PARTS if k != "other")
    per = {k: d[k] / n for k in CPU_PARTS}
    per["busy_cores"] = machine / wall if wall else math.nan
    return per


def wait_active(lease_ids: list[int], deadline: float) -> tuple[int, int]:
    """Poll until every lease is active (or failed, or time is up): (active, failed)."""
    from django.db.models import Count

    from leasing.choices import LeaseStatus
    from leasing.models import Lease

    while True:
        counts = dict(
            Lease.objects.filter(pk__in=lease_ids).values_list("status").annotate(n=Count("pk"))
        )
        active = counts.get(LeaseStatus.ACTIVE, 0)
        failed = counts.get(LeaseStatus.FAILED, 0)
        if active + failed >= len(lease_ids) or time.monotonic() > deadline:
            return active, failed
        time.sleep(0.05)


def timestamps(lease_ids: list[int]) -> dict[int, tuple[float, float | None]]:
    """lease → (submitted_at, activated_at) as POSIX seconds."""
    from leasing.models import Lease

    rows = Lease.objects.filter(pk__in=lease_ids).values_list("pk", "submitted_at", "activated_at")
    return {pk: (sub.timestamp(), act.timestamp() if act else None) for pk, sub, act in rows}


def percentile(sorted_values: list[float], q: float) -> float:
    """Nearest-rank percentile of an already sorted list."""
    if not sorted_values:
        return math.nan
    rank = max(1, math.ceil(q * len(sorted_values)))
    return sorted_values[rank - 1]


def summary(values: list[float]) -> dict[str, float]:
    v = sorted(values)
    return {
        "n": len(v),
        "median": percentile(v, 0.5),
        "p95": percentile(v, 0.95),
        "p99": percentile(v, 0.99),
        "max": v[-1] if v else math.nan,
    }


def measure_level(run: LevelRun, deadline: float, cpu_before: dict, cpu_after) -> dict:
    """Wait for the level's leases to become active, then compute its numbers."""
    ok = [s for s in run.samples if s.status == 201]
    ids = [s.lease_id for s in ok]
    t0 = time.perf_counter()
    active, failed = wait_active(ids, deadline)
    cpu = cpu_per_request(cpu_before, cpu_after(), len(ok), run.wall_s + time.perf_counter() - t0)
    stamps = timestamps(ids)
    api = [s.api_s for s in ok]
    to_active = [stamps[s.lease_id][1] - s.sent_wall for s in ok if stamps[s.lease_id][1]]
    db = [act - sub for sub, act in stamps.values() if act]
    first_sent = min((s.sent_wall for s in run.samples), default=0.0)
    last_active = max((act for _sub, act in stamps.values() if act), default=first_sent)
    return {
        "requesters": run.requesters,
        "requests": len(run.samples),
        "cpu_ms_per_request": {k: v * (1 if k == "busy_cores" else 1000) for k, v in cpu.items()},
        "errors": len(run.samples) - len(ok),
        "error_statuses": sorted({s.status for s in run.samples if s.status != 201}),
        "not_provisioning_on_201": sum(1 for s in ok if s.lease_status != "provisioning"),
        "active": active,
        "failed": failed,
        "api_s": summary(api),
        "request_to_active_s": summary(to_active),
        "submitted_to_active_s": summary(db),
        "wall_s": run.wall_s,
        "admitted_per_s": len(ok) / run.wall_s if run.wall_s else math.nan,
        "activated_per_s": (
            len(to_active) / (last_active - first_sent) if last_active > first_sent else math.nan
        ),
    }


def service_layer(n: int, fx: Fixtures, args: argparse.Namespace, deadline: float, cpu_now) -> dict:
    """lease_request in a loop, in this process: placements/s without HTTP.

    Also times how long each call holds the card model's row lock (from the lock until
    the commit): placement for one model is serialized on it, so 1 / hold time is the
    most placements per second one card model can take, however many cores serve it.
    """
    from django.db import transaction

    from leasing.lifecycle import requests as lease_requests

    holds: list[float] = []
    real_lock = lease_requests.lock_card_models

    def timed_lock(card_model_ids):
        locked = real_lock(card_model_ids)
        t = time.perf_counter()
        transaction.on_commit(lambda: holds.append(time.perf_counter() - t))
        return locked

    model = fx.models["service"]
    user = fx.users[0]
    duration = timedelta(minutes=LEASE_MINUTES)
    profiler = None
    if args.profile:
        import cProfile

        profiler = cProfile.Profile()
    ids: list[int] = []
    per_call: list[float] = []
    cpu_before = cpu_now()
    t0 = time.perf_counter()
    lease_requests.lock_card_models = timed_lock  # bench-only instrumentation, undone below
    if profiler:
        profiler.enable()
    try:
        for _ in range(n):
            if time.monotonic() > deadline:
                break
            c0 = time.perf_counter()
            lease = lease_requests.lease_request(
                user=user, team=fx.team, card_model=model, count=args.count, duration=duration
            )
            per_call.append(time.perf_counter() - c0)
            ids.append(lease.pk)
    finally:
        if profiler:
            profiler.disable()
            profiler.dump_stats(args.profile)
        lease_requests.lock_card_models = real_lock
    wall = time.perf_counter() - t0
    active, failed = wait_active(ids, deadline)  # the worker's share belongs to the bill
    cpu = cpu_per_request(cpu_before, cpu_now(), len(ids), time.perf_counter() - t0)
    return {
        "cpu_ms_per_request": {k: v * (1 if k == "busy_cores" else 1000) for k, v in cpu.items()},
        "placements": len(ids),
        "wall_s": wall,
        "placements_per_s": len(ids) / wall if wall else math.nan,
        "call_s": summary(per_call),
        "lock_held_s": summary(holds),
        "first_100_call_median_s": summary(per_call[:100])["median"],
        "last_100_call_median_s": summary(per_call[-100:])["median"],
        "active": active,
        "failed": failed,
    }


def integrity() -> dict:
    """No card in two overlapping periods; every placed lease holds exactly its cards."""
    from django.db import connection

    with connection.cursor() as cur:
        cur.execute(
            """
            SELECT count(*) FROM leasing_allocation a
            JOIN leasing_allocation b
              ON a.card_id = b.card_id AND a.id < b.id
             AND a.start_at < b.end_at AND b.start_at < a.end_at
            """
        )
        overlaps = cur.fetchone()[0]
        cur.execute(
            """
            SELECT count(*) FROM leasing_lease l
            WHERE l.status IN ('provisioning', 'active')
              AND l.count <> (SELECT count(*) FROM leasing_allocation a WHERE a.lease_id = l.id)
            """
        )
        wrong_count = cur.fetchone()[0]
        cur.execute("SELECT status, count(*) FROM leasing_lease GROUP BY status ORDER BY status")
        statuses = dict(cur.fetchall())
        cur.execute("SELECT count(*) FROM leasing_allocation")
        allocations = cur.fetchone()[0]
    return {
        "overlapping_allocation_pairs": overlaps,
        "leases_with_wrong_card_count": wrong_count,
        "lease_statuses": statuses,
        "allocations": allocations,
    }


# --- report -----------------------------------------------------------------------------


def ms(x: float) -> str:
    return "–" if math.isnan(x) else f"{x * 1000:.0f}"


def print_report(results: dict) -> None:
    meta = results["meta"]
    print()
    print(
        f"## Lease request latency — {meta['cpus']} CPUs, load before run {meta['load_before']}, "
        f"pool {meta['pool']} cards per phase, {meta['web_workers']} gunicorn workers, "
        f"worker concurrency {meta['worker_concurrency']}, {meta['count']} card(s) per request, "
        f"settings {meta['settings']}, revision {meta['revision']}"
    )
    for key, title in [
        ("api_s", "API response time (POST → 201 read, client clock), ms"),
        ("request_to_active_s", "request → active (POST sent → activated_at), ms"),
        ("submitted_to_active_s", "submitted_at → activated_at (portal clock), ms"),
    ]:
        print(f"\n### {title}\n")
        print("| requesters | requests | errors | median | p95 | p99 | max |")
        print("|---:|---:|---:|---:|---:|---:|---:|")
        for lv in results["levels"]:
            s = lv[key]
            print(
                f"| {lv['requesters']} | {s['n']} | {lv['errors']} | {ms(s['median'])} "
                f"| {ms(s['p95'])} | {ms(s['p99'])} | {ms(s['max'])} |"
            )
    print("\n### Throughput through the API\n")
    print("| requesters | requests | wall s | admitted req/s | activated/s | active | failed |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for lv in results["levels"]:
        print(
            f"| {lv['requesters']} | {lv['requests']} | {lv['wall_s']:.2f} "
            f"| {lv['admitted_per_s']:.1f} | {lv['activated_per_s']:.1f} "
            f"| {lv['active']} | {lv['failed']} |"
        )
    floor = results.get("floor")
    if floor:
        a = floor["api"]
        print("\n### The stack's own ceiling: authenticated GET of one card model (no write)\n")
        print(
            "| requesters | requests | errors | req/s | median ms | p99 ms "
            "| CPU ms per request: web | postgres | total |"
        )
        print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        cpu = floor["cpu"] or dict.fromkeys(CPU_PARTS, math.nan)
        total = sum(cpu[k] for k in CPU_PARTS)
        print(
            f"| {floor['requesters']} | {floor['requests']} | {floor['errors']} "
            f"| {floor['per_s']:.1f} | {ms(a['median'])} | {ms(a['p99'])} "
            f"| {cpu['web'] * 1000:.1f} | {cpu['postgres'] * 1000:.1f} | {total * 1000:.1f} |"
        )
    svc = results.get("service")
    if svc:
        c = svc["call_s"]
        print("\n### Service layer (lease_request in a loop, in-process, no HTTP)\n")
        print(
            "| placements | wall s | placements/s | call median ms | p99 ms | max ms "
            "| first 100 median ms | last 100 median ms | lock held median ms | lock held p99 ms |"
        )
        print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        print(
            f"| {svc['placements']} | {svc['wall_s']:.2f} | {svc['placements_per_s']:.1f} "
            f"| {ms(c['median'])} | {ms(c['p99'])} | {ms(c['max'])} "
            f"| {ms(svc['first_100_call_median_s'])} | {ms(svc['last_100_call_median_s'])} "
            f"| {svc['lock_held_s']['median'] * 1000:.1f} | {svc['lock_held_s']['p99'] * 1000:.1f} |"
        )
    rows = [
        (f"{lv['requesters']} requesters", lv["cpu_ms_per_request"]) for lv in results["levels"]
    ]
    if svc:
        rows.append(("service layer", svc["cpu_ms_per_request"]))
    if any(cpu for _label, cpu in rows):
        print(
            "\n### CPU per request, ms (request until active; 'other' = the rest of the machine)\n"
        )
        print("| run | " + " | ".join(CPU_PARTS) + " | total | busy cores |")
        print("|---|" + "---:|" * (len(CPU_PARTS) + 2))
        for label, cpu in rows:
            if cpu:
                total = sum(cpu[k] for k in CPU_PARTS)
                cells = " | ".join(f"{cpu[k]:.1f}" for k in CPU_PARTS)
                print(f"| {label} | {cells} | {total:.1f} | {cpu['busy_cores']:.2f} |")
    check = results["integrity"]
    print("\n### Integrity\n")
    print(f"- overlapping allocation pairs (same card): {check['overlapping_allocation_pairs']}")
    print(f"- leases whose card count is wrong: {check['leases_with_wrong_card_count']}")
    print(f"- leases by status: {check['lease_statuses']}; allocations: {check['allocations']}")
    stuck = sum(n for status, n in check["lease_statuses"].items() if status != "active")
    if stuck:
        print(f"- !! {stuck} lease(s) never became active: see the worker's log (path below)")
    print(f"\n(total run {meta['total_s']:.0f} s)")


# --- main -------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.wait_idle:
        wait_until_idle(args.wait_idle)
    started = time.monotonic()
    load_before = " ".join(f"{x:.2f}" for x in os.getloadavg())
    deadline = started + args.time_limit
    var_dir = Path(tempfile.mkdtemp(prefix="cardpool-bench-"))
    env = bench_environment(args, var_dir)
    os.environ.update(env)

    def on_sigterm(signum, frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_sigterm)
    procs = Processes(env, var_dir)
    results: dict = {"levels": []}
    db_created = False
    try:
        print(f"database {args.database}: recreate, migrate, build pools …", flush=True)
        recreate_database(args)
        db_created = True
        import django
        from django.core.management import call_command

        django.setup()
        call_command("migrate", interactive=False, verbosity=0)
        phases = ["warmup"] + [f"l{n}" for n in args.levels] + ["service"]
        fx = build_fixtures(args, phases)
        if not args.skip_analyze:
            # Planner statistics as a running site has them; without them PostgreSQL
            # estimates one card per model and joins nodes by nested loop (--skip-analyze).
            from django.db import connection

            with connection.cursor() as cur:
                cur.execute("ANALYZE")
        purge_broker(args)

        print("starting the Celery worker and gunicorn …", flush=True)
        port = free_port()

        def cpu_now() -> dict:
            return cpu_snapshot(procs, args.database)

        start_worker(procs, args)
        start_web(procs, args, port, fx.tokens[0])

        def body(phase: str) -> dict:
            return {
                "card_model": f"bench-{phase}",
                "count": args.count,
                "duration_minutes": LEASE_MINUTES,
                "team": "bench",
            }

        # Warm up: every gunicorn worker and worker child imports and connects once.
        warm = run_level(
            args.web_workers,
            args.web_workers * 5,
            port=port,
            tokens=fx.tokens,
            body=body("warmup"),
            deadline=deadline,
        )
        measure_level(warm, deadline, {}, dict)

        for n in args.levels:
            print(f"{n} concurrent requester(s), {args.requests} requests …", flush=True)
            cpu_before = cpu_now()
            run = run_level(
                n,
                args.requests,
                port=port,
                tokens=fx.tokens,
                body=body(f"l{n}"),
                deadline=deadline,
            )
            procs.check_alive()
            results["levels"].append(measure_level(run, deadline, cpu_before, cpu_now))

        if args.floor:
            # The ceiling of the stack itself on this machine: an authenticated API read of one
            # card model (token check, a few queries, DRF), no write, no worker, no lock.
            n = max(args.levels)
            print(f"floor: {args.floor} GETs of one card model, {n} requesters …", flush=True)
            cpu_before = cpu_now()
            run = run_level(
                n,
                args.floor,
                port=port,
                tokens=fx.tokens,
                body=None,
                deadline=deadline,
                method="GET",
                path="/api/v1/card-models/bench-warmup/",
            )
            cpu = cpu_per_request(cpu_before, cpu_now(), len(run.samples), run.wall_s)
            times = sorted(x.api_s for x in run.samples)
            results["floor"] = {
                "requesters": n,
                "requests": len(run.samples),
                "errors": sum(1 for x in run.samples if x.status != 200),
                "wall_s": run.wall_s,
                "per_s": len(run.samples) / run.wall_s if run.wall_s else 0.0,
                "api": summary(times),
                "cpu": cpu,
            }

        if args.service_placements:
            print(f"service layer: {args.service_placements} placements in-process …", flush=True)
            results["service"] = service_layer(args.service_placements, fx, args, deadline, cpu_now)
        results["integrity"] = integrity()
        results["meta"] = {
            "cpus": os.cpu_count(),
            "load_before": load_before,
            "pool": args.nodes * args.cards_per_node,
            "web_workers": args.web_workers,
            "worker_concurrency": args.worker_concurrency,
            "count": args.count,
            "requests": args.requests,
            "settings": args.settings,
            "revision": git_revision(),
            "argv": sys.argv,
            "total_s": time.monotonic() - started,
            "timed_out": time.monotonic() > deadline,
        }
        if time.monotonic() > deadline:
            print(f"!! the time limit ({args.time_limit:.0f} s) was reached: results are partial")
        print_report(results)
        if args.json:
            args.json.write_text(json.dumps(results, indent=2, default=str))
        bad = results["integrity"]
        return (
            1 if bad["overlapping_allocation_pairs"] or bad["leases_with_wrong_card_count"] else 0
        )
    except KeyboardInterrupt:
        print("\ninterrupted; cleaning up", file=sys.stderr)
        return 130
    finally:
        procs.stop()
        try:
            purge_broker(args)
        except Exception as exc:  # noqa: BLE001 - cleanup goes on
            print(f"could not purge the broker: {exc}", file=sys.stderr)
        if db_created and not args.keep_db:
            drop_database(args)
        elif db_created:
            print(f"kept database {args.database} (DATABASE_URL={env['DATABASE_URL']})")
        print(f"logs: {var_dir}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
