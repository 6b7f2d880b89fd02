"""What the session proxy costs a request: the same JupyterLab API call through nginx
(``auth_request`` to the portal, then the node) and straight to the node, run by hand against
a running portal with a running session (the demo will do):

    python bench/session_proxy.py --base http://127.0.0.1:8116 --session 1 \\
        --cookie 'cardpool-pass=…' --direct http://127.0.0.1:PORT --token TOKEN [-n 300]

``--cookie``: the session origin's pass cookie (open the session in a browser, copy the
``cardpool-pass`` cookie of ``s<id>.localhost``); the requests go to ``--base`` with the
session's Host (``s<id>.<host of --base>``, ``localhost`` for an address; ``--host`` to
override). ``--direct``/``--token``: the session's node address and Jupyter token
(Session.port, Session.token in the admin or the database). Prints a table of medians and
95th percentiles.
"""

from __future__ import annotations

import argparse
import statistics
import time
import urllib.request
from urllib.parse import urlsplit


def timed(url: str, headers: dict, n: int) -> list[float]:
    took = []
    for _ in range(n):
        request = urllib.request.Request(url, headers=headers)
        start = time.perf_counter()
        with urllib.request.urlopen(request, timeout=10) as answer:  # noqa: S310
            answer.read()
            assert answer.status == 200, answer.status
        took.append((time.perf_counter() - start) * 1000)
    return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", required=True)
    parser.add_argument("--session", type=int, required=True)
    parser.add_argument("--cookie", required=True)
    parser.add_argument("--host", default="", help="the session's Host (default s<id>.…)")
    parser.add_argument("--direct", required=True)
    parser.add_argument("--token", required=True)
    parser.add_argument("-n", type=int, default=300)
    args = parser.parse_args()
    where = urlsplit(args.base)
    name = where.hostname or "localhost"
    if name.replace(".", "").isdigit() or ":" in name:
        name = "localhost"
    host = args.host or f"s{args.session}.{name}" + (f":{where.port}" if where.port else "")
    path = f"/sessions/{args.session}/api/status"
    rows = [
        (
            "through the proxy",
            timed(args.base + path, {"Cookie": args.cookie, "Host": host}, args.n),
        ),
        (
            "straight to the node",
            timed(args.direct + path, {"Authorization": f"token {args.token}"}, args.n),
        ),
    ]
    print(f"{'path':<24}{'n':>6}{'median ms':>12}{'p95 ms':>10}")
    for name, took in rows:
        p95 = statistics.quantiles(took, n=20)[-1]
        print(f"{name:<24}{len(took):>6}{statistics.median(took):>12.2f}{p95:>10.2f}")


if __name__ == "__main__":
    main()
