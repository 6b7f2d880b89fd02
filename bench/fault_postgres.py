#!/usr/bin/env python
"""PostgreSQL restarted under load: 503s while it is down, recovery, no half-written lease.

    .venv/bin/python bench/fault_postgres.py         # 8 requesters for 40 s, restart at 10 s

Needs root for pg_ctlcluster. Counts answers by kind; afterwards every lease that was answered
201 exists and holds its card, none holds a partial set, and requests succeed again.
"""

from __future__ import annotations

import argparse
import collections
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fault_common import Rig, consistency  # noqa: E402


def pg_version() -> str:
    return sorted(os.listdir("/etc/postgresql"))[-1]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--seconds", type=float, default=40.0)
    p.add_argument("--restart-at", type=float, default=10.0)
    p.add_argument("--requesters", type=int, default=8)
    args = p.parse_args()
    rig = Rig("cardpool_bench_fault_pg", cards=2000, users=args.requesters)
    answers: list[tuple[float, int]] = []
    lock = threading.Lock()
    try:
        rig.start_worker()
        rig.start_web()
        start = time.monotonic()

        def requester(i: int) -> None:
            while time.monotonic() - start < args.seconds:
                status, _ = rig.request_lease(i)
                with lock:
                    answers.append((time.monotonic() - start, status))
                time.sleep(0.1)

        threads = [threading.Thread(target=requester, args=(i,)) for i in range(args.requesters)]
        for t in threads:
            t.start()
        time.sleep(args.restart_at)
        t0 = time.monotonic()
        cmd = ["pg_ctlcluster", "--skip-systemctl-redirect", pg_version(), "main", "restart"]
        subprocess.run(cmd, check=True)
        restart_s = time.monotonic() - t0
        for t in threads:
            t.join()
        time.sleep(8)
        from django.db import connection

        connection.close()  # ours died with the restart
        c = consistency()
    finally:
        rig.close()
    kinds = collections.Counter(
        "201" if s == 201 else "503" if s == 503 else "no answer" if s == 0 else f"{s}"
        for _, s in answers
    )
    errors = [at for at, s in answers if s != 201]
    recovered = max(errors) - args.restart_at if errors else 0.0
    print(
        "| requests | 201 | 503 | other 5xx | other | restart took (s) | last error (s after restart) |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|")
    other5 = sum(n for k, n in kinds.items() if k.startswith("5") and k != "503")
    other = sum(n for k, n in kinds.items() if k not in ("201", "503") and not k.startswith("5"))
    print(
        f"| {len(answers)} | {kinds['201']} | {kinds['503']} | {other5} | {other} | "
        f"{restart_s:.1f} | {recovered:.1f} |"
    )
    print()
    print("| leases | answered 201 | active | half-written | provisioned twice |")
    print("|---:|---:|---:|---:|---:|")
    print(f"| {c['leases']} | {kinds['201']} | {c['active']} | {c['half']} | {c['twice']} |")
    print("answers:", dict(kinds))
    return 0 if not c["half"] and not other5 else 1


if __name__ == "__main__":
    sys.exit(main())
