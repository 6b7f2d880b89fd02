#!/usr/bin/env python
"""Redis stopped for 60 s under a real worker and gunicorn, requests fired during the outage.

    .venv/bin/python bench/fault_redis.py            # 60 s outage, a request every 2 s

Needs root for redis-cli shutdown / redis-server (restarted with the command of the env docs).
Checks: every request answered 201 while Redis is down, every lease active after it returns,
none provisioned twice (one BackendCall ok=True per lease).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fault_common import Rig, consistency  # noqa: E402

REDIS_START = [
    "redis-server", "--daemonize", "yes", "--bind", "127.0.0.1 -::1", "--port", "6379",
    "--save", "", "--appendonly", "no", "--dir", "/var/lib/redis",
    "--logfile", "/var/log/redis/ci.log",
]  # fmt: skip


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--down", type=float, default=60.0)
    p.add_argument("--every", type=float, default=2.0)
    args = p.parse_args()
    rig = Rig("cardpool_bench_fault_redis")
    try:
        rig.start_worker()
        rig.start_web()
        before = [rig.request_lease(i) for i in range(4)]
        time.sleep(3)
        subprocess.run(["redis-cli", "shutdown", "nosave"], check=False)
        down_at = time.monotonic()
        during = []
        while time.monotonic() - down_at < args.down:
            during.append(rig.request_lease(len(during)))
            time.sleep(args.every)
        subprocess.run(REDIS_START, check=True)
        up_at = time.monotonic()
        after = [rig.request_lease(i) for i in range(4)]
        all_active = None
        restarts = 0
        while time.monotonic() - up_at < 180:
            if rig.procs["worker"].poll() is not None:
                # What docker-compose's `restart: unless-stopped` does for the worker.
                restarts += 1
                rig.start_worker()
            c = consistency()
            if c["active"] == c["leases"]:
                all_active = time.monotonic() - up_at
                break
            time.sleep(1)
        time.sleep(10)  # a couple more sweeps: nothing is done twice
        c = consistency()
    finally:
        rig.close()
    lat = [s for _, s in during]
    print("| phase | requests | 201 | other | median (s) | max (s) |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, rows in (("before", before), ("Redis down", during), ("after", after)):
        ok = sum(1 for status, _ in rows if status == 201)
        times = [s for _, s in rows]
        print(
            f"| {name} | {len(rows)} | {ok} | {len(rows) - ok} | "
            f"{statistics.median(times):.2f} | {max(times):.2f} |"
        )
    print()
    print("| leases | active | provisioned twice | half-written | all active (s after Redis up) |")
    print("|---:|---:|---:|---:|---:|")
    took = f"{all_active:.1f}" if all_active is not None else "not within 180 s"
    print(f"| {c['leases']} | {c['active']} | {c['twice']} | {c['half']} | {took} |")
    print(f"(max request time during the outage {max(lat):.2f} s; worker restarts {restarts})")
    return 0 if c["active"] == c["leases"] and not c["twice"] else 1


if __name__ == "__main__":
    sys.exit(main())
