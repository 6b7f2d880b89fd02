#!/usr/bin/env python3
"""Every benchmark at a tiny size, so a change that breaks one fails CI (``.ci/run``).

A smoke run measures nothing: each script runs once with the smallest arguments that still
walk all of its code (a few nodes, a few leases, one round), and the run fails only when a
script fails (a non-zero exit or a traceback). Figures are never asserted; they come from the
full runs described in ``bench/README.md`` and ``docs/performance.md``.

    .venv/bin/python bench/smoke.py                 # every benchmark that can run here
    .venv/bin/python bench/smoke.py page_scale      # just these
    .venv/bin/python bench/smoke.py --faults        # also restart PostgreSQL and Redis (CI only)

Needs PostgreSQL on 127.0.0.1:5432 (user postgres, trust auth) and Redis on 127.0.0.1:6379,
as the benchmarks do. ``fault_postgres`` and ``fault_redis`` restart those servers, so they run
only with ``--faults`` (CI's machine is its own); ``slurm_roundtrip`` runs when ``SLURM_CONF``
names a running Slurm (the lab of tests/slurm), ``trace_replay`` when the Philly trace is there,
``page_weight`` when Playwright and ``/usr/bin/chromium`` are. A script that cannot run here is
listed with the reason; ``--strict`` makes such a skip a failure.
"""

from __future__ import annotations

import argparse
import http.server
import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
PY = sys.executable
PG = os.environ.get("CARDPOOL_BENCH_POSTGRES", "postgres://postgres@127.0.0.1:5432")
# Database names carry this prefix (they must contain "bench"); the benches drop them again.
PREFIX = os.environ.get("CARDPOOL_BENCH_SMOKE_DB", "cardpool_bench_smoke")
REDIS_DB = os.environ.get("CARDPOOL_BENCH_SMOKE_REDIS_DB", "13")
LIBRARY = {"fault_common.py", "smoke.py"}  # imported by the benches, not benches


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class _Ok(http.server.BaseHTTPRequestHandler):
    """Answers 200 to everything: a stand-in for the proxy and the node in session_proxy's smoke."""

    def do_GET(self):  # noqa: N802 (http.server's name)
        body = b'{"started": "now"}'
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


class Demo:
    """A seeded demo database served by gunicorn on a free port, for the scripts that drive a
    running portal (soak, page_weight)."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen | None = None
        self.url = ""
        self.db = f"{PREFIX}_demo"
        self.var = Path(tempfile.mkdtemp(prefix="cardpool-smoke-"))
        self.env = os.environ | {
            "DATABASE_URL": f"{PG}/{self.db}",
            "CELERY_BROKER_URL": f"redis://127.0.0.1:6379/{REDIS_DB}",
            "CARDPOOL_SECRET_KEY": secrets.token_hex(32),
            "CARDPOOL_VAR_DIR": str(self.var),
            "CARDPOOL_SECURE_COOKIES": "false",
            "CARDPOOL_ALLOWED_HOSTS": "127.0.0.1",
            "DJANGO_SETTINGS_MODULE": "portal.settings",
            "PYTHONPATH": str(ROOT),
        }

    def start(self) -> str:
        if self.url:
            return self.url
        _recreate(self.db)
        manage = [PY, str(ROOT / "manage.py")]
        subprocess.run([*manage, "migrate", "-v0"], env=self.env, check=True, cwd=ROOT)
        subprocess.run([*manage, "seed_demo"], env=self.env, check=True, cwd=ROOT)
        subprocess.run(
            [*manage, "collectstatic", "--noinput", "-v0"], env=self.env, check=True, cwd=ROOT
        )
        port = _free_port()
        gunicorn = Path(PY).with_name("gunicorn")
        self.proc = subprocess.Popen(
            [str(gunicorn), "portal.wsgi", "-b", f"127.0.0.1:{port}", "-w", "2", "--log-level", "warning"],
            env=self.env,
            cwd=ROOT,
            start_new_session=True,
            stdout=(self.var / "gunicorn.log").open("w"),
            stderr=subprocess.STDOUT,
        )  # fmt: skip
        self.url = f"http://127.0.0.1:{port}"
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.2)
        return self.url

    def close(self) -> None:
        if self.proc:
            os.killpg(self.proc.pid, 15)
            self.proc.wait(timeout=30)
        if self.url:
            _drop(self.db)
        shutil.rmtree(self.var, ignore_errors=True)


def _psql(sql: str) -> None:
    subprocess.run(["psql", f"{PG}/postgres", "-qc", sql], check=True)


def _recreate(db: str) -> None:
    _drop(db)
    _psql(f"CREATE DATABASE {db}")


def _drop(db: str) -> None:
    _psql(f"DROP DATABASE IF EXISTS {db} WITH (FORCE)")


def _has_playwright() -> bool:
    try:
        import playwright  # noqa: F401
    except ImportError:
        return False
    return Path("/usr/bin/chromium").exists()


def _trace() -> Path:
    return ROOT.parent / "shared/data/traces/philly-jobs.csv"  # where trace_replay reads it


def plans(args, demo: Demo, fake_url: str) -> dict:
    """Each bench's argv at its smallest, or the reason it cannot run here (a str)."""
    db = PREFIX
    slurm = os.environ.get("SLURM_CONF") and shutil.which("salloc")
    return {
        "advisor_scale.py": ["--nodes", "6", "--calls", "2", "--queued", "1", "--postgres", f"{PG}/{db}_advisor"],
        "fault_postgres.py": ["--seconds", "6", "--restart-at", "2", "--requesters", "2"]
        if args.faults else "restarts PostgreSQL: CI only (--faults)",
        "fault_redis.py": ["--down", "3", "--every", "1"]
        if args.faults else "restarts Redis: CI only (--faults)",
        "health_ingest.py": ["--nodes", "6", "--rounds", "1", "--hot", "2", "--postgres", f"{PG}/{db}_health"],
        "page_scale.py": ["--postgres", PG, "--database", f"{db}_pages", "--leases", "200", "--nodes", "4",
                          "--teams", "3", "--users", "6", "--queued", "2", "--runs", "1"],
        "page_weight.py": (lambda: ["--url", demo.start(), "--languages", "en", "--personas", "alice"])
        if _has_playwright() else "needs Playwright and /usr/bin/chromium",
        "placement_cost.py": ["--nodes", "4", "--calls", "3", "--postgres", f"{PG}/{db}_placement"],
        "queue_drain.py": ["--postgres", PG, "--database", f"{db}_drain", "--redis-db", REDIS_DB,
                           "--nodes", "2", "--queued", "10", "--runs", "1"],
        "queue_length.py": ["--postgres", PG, "--database", f"{db}_queue_length", "--redis-db", REDIS_DB,
                            "--nodes", "2", "--waiting", "0,5", "--requests", "2"],
        "reclaim_lag.py": ["--leases", "3", "--ends-in", "12"],
        "report_scale.py": ["--postgres", PG, "--database", f"{db}_reports", "--leases", "200", "--nodes", "4",
                            "--teams", "3", "--users", "6", "--runs", "1"],
        "request_latency.py": ["--postgres", PG, "--database", f"{db}_latency", "--redis-db", REDIS_DB,
                               "--requests", "4", "--levels", "1,2", "--floor", "4", "--service-placements", "4",
                               "--nodes", "2", "--web-workers", "1", "--time-limit", "120"],
        "session_proxy.py": ["--base", fake_url, "--session", "1", "--cookie", "sessionid=x",
                             "--direct", fake_url, "--token", "t", "-n", "3"],
        "slurm_roundtrip.py": ["--rounds", "1"] if slurm else "needs a running Slurm (SLURM_CONF, salloc)",
        # No worker or beat behind the smoke's demo: the leases do not expire, so no drain.
        "soak.py": lambda: ["--base", demo.start(), "--minutes", "0.3", "--interval", "2",
                            "--report-minutes", "0.3", "--min-lease", "1", "--max-lease", "1",
                            "--drain-minutes", "0"],
        # several teams (every virtual cluster): fair share and its recomputations
        "trace_replay.py": ["--jobs", "200", "--nodes", "4", "--depth", "3"]
        if _trace().exists() else f"needs the Philly trace at {_trace()}",
    }  # fmt: skip


# Exit 1 for a figure (a page over its budget; the portal not ahead of EASY on a tiny trace):
# not asserted here. What a script prints for a broken result still fails the smoke run.
ALLOWED_RC = {"page_weight.py": {0, 1}, "trace_replay.py": {0, 1}}
BROKEN = ("Traceback", "DOUBLE ALLOCATIONS")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("only", nargs="*", help="bench names (default: all)")
    p.add_argument("--faults", action="store_true", help="run the fault scripts (restart servers)")
    p.add_argument("--strict", action="store_true", help="a bench that cannot run here fails")
    args = p.parse_args(argv)
    scripts = sorted(f.name for f in BENCH.glob("*.py") if f.name not in LIBRARY)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Ok)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    demo = Demo()
    table = plans(args, demo, f"http://127.0.0.1:{server.server_address[1]}")
    unknown = sorted(set(scripts) - set(table))
    if unknown:
        print(f"no smoke plan for {', '.join(unknown)}: add one to bench/smoke.py")
        return 1
    failed, skipped = [], []
    try:
        for name in scripts:
            if args.only and name.removesuffix(".py") not in args.only and name not in args.only:
                continue
            plan = table[name]
            if isinstance(plan, str):
                print(f"-- {name}: skipped ({plan})", flush=True)
                skipped.append(name)
                continue
            argv_ = plan() if callable(plan) else plan
            t = time.perf_counter()
            env = os.environ | {
                "PYTHONPATH": str(ROOT),
                "CARDPOOL_BENCH_RECLAIM_DB": f"{PREFIX}_reclaim",
                "CARDPOOL_BENCH_REDIS_DB": REDIS_DB,
            }
            run = subprocess.run(
                [PY, str(BENCH / name), *argv_], env=env, cwd=ROOT, capture_output=True, text=True
            )
            took = time.perf_counter() - t
            out = run.stdout + run.stderr
            ok = run.returncode in ALLOWED_RC.get(name, {0}) and not any(b in out for b in BROKEN)
            print(f"-- {name}: {'ok' if ok else 'FAILED'} ({took:.0f} s)", flush=True)
            if not ok:
                failed.append(name)
                print(out[-6000:])
    finally:
        demo.close()
        server.shutdown()
    print(f"\nbench smoke: {len(failed)} failed, {len(skipped)} skipped")
    return 1 if failed or (args.strict and skipped) else 0


if __name__ == "__main__":
    sys.exit(main())
