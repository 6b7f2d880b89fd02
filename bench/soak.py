"""Soak a running demo (``python3 cardpool.py demo``) for hours, as its users would.

Run by hand against a demo that is already up; it needs only the standard library:

    python bench/soak.py --base http://127.0.0.1:8000 --minutes 120 --out /tmp/soak.txt

Every ``--interval`` seconds one of the demo users (alice, lena, bob; password
``--password``) asks for 1–2 cards for a few minutes through the API, so leases queue,
activate and expire all the time; open leases are looked at again, some are released,
cancelled or extended, a lead approves what waits for her, and now and then a page of the
site is fetched with a signed-in browser session. It checks that the worker and the beat stay
up (their pids in ``var/demo-processes.json``, written by the launcher) and that leases do
get activated and ended (both need the worker, expiry needs the beat), counts 5xx answers and
connection errors, and prints a summary table every ``--report-minutes`` and at the end (also
written to ``--out``). bench/README.md says how to read it.
"""

from __future__ import annotations

import argparse
import http.cookiejar
import json
import os
import random
import re
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

USERS = ("alice", "lena", "bob")
# Models with cards in the demo pool, spread so that no single queue only grows.
MODELS = {
    "alice": ("a100-80g-sxm", "mlu370-x8", "kunlunxin-r200"),
    "lena": ("a100-80g-sxm", "mtt-s4000"),
    "bob": ("rtx-4090", "dcu-k100", "metax-c500"),
}
LEAD = "lena"
OPEN = {"pending_approval", "queued", "scheduled", "provisioning", "active", "releasing"}
WAITING = {"pending_approval", "queued", "scheduled"}


class Client:
    """One user: an API token for the API, a session (cookies) for the HTML pages."""

    def __init__(self, base: str, name: str, password: str, stats: Counter, timeout: float):
        self.base, self.name, self.password = base.rstrip("/"), name, password
        self.stats, self.timeout = stats, timeout
        self.token = None
        self.jar = http.cookiejar.CookieJar()
        self.opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(self.jar))

    def call(self, method: str, path: str, body=None, *, api=True, form=None, headers=None):
        """(status, parsed body or text); status 0 for a connection error. Counts everything."""
        data, hdrs = None, dict(headers or {})
        if body is not None:
            data, hdrs["Content-Type"] = json.dumps(body).encode(), "application/json"
        if form is not None:
            data = urllib.parse.urlencode(form).encode()
            hdrs["Content-Type"] = "application/x-www-form-urlencoded"
        if api and self.token:
            hdrs["Authorization"] = f"Token {self.token}"
        req = urllib.request.Request(self.base + path, data=data, method=method, headers=hdrs)
        self.stats["requests"] += 1
        started = time.monotonic()
        try:
            with self.opener.open(req, timeout=self.timeout) as resp:
                status, raw = resp.status, resp.read()
        except urllib.error.HTTPError as exc:
            status, raw = exc.code, exc.read()
        except (OSError, urllib.error.URLError) as exc:
            self.stats["connection errors"] += 1
            log(f"connection error: {method} {path}: {exc}")
            return 0, None
        finally:
            LATENCIES.append(time.monotonic() - started)
        if status >= 500:
            self.stats["5xx"] += 1
            log(f"{status} on {method} {path}: {raw[:300]!r}")
        elif status >= 400:
            self.stats["4xx"] += 1
            what = re.sub(r"/\d+/", "/<id>/", path)
            REFUSALS[f"{status} {method} {what}: {raw[:120].decode(errors='replace')}"] += 1
        try:
            return status, json.loads(raw) if raw and api else raw.decode(errors="replace")
        except ValueError:
            return status, raw.decode(errors="replace")

    def sign_in(self) -> bool:
        status, body = self.call(
            "POST",
            "/api/v1/auth/token/",
            {"username": self.name, "password": self.password, "name": f"soak-{os.getpid()}"},
        )
        if status != 200:
            log(f"{self.name}: no API token ({status}): {body}")
            return False
        self.token = body["token"]
        status, page = self.call("GET", "/accounts/login/", api=False)
        csrf = next((c.value for c in self.jar if c.name == "csrftoken"), None)
        if status != 200 or not csrf:
            return True  # the API still works; pages will show up as 3xx/4xx
        self.call(
            "POST",
            "/accounts/login/",
            api=False,
            form={"login": self.name, "password": self.password, "csrfmiddlewaretoken": csrf},
            headers={"Referer": self.base + "/accounts/login/"},
        )
        return True


LATENCIES: list[float] = []
REFUSALS: Counter = Counter()  # the 4xx answers, by path and message: expected ones or a bug


def log(msg: str) -> None:
    line = f"{time.strftime('%H:%M:%S')} {msg}"
    print(line, flush=True)


def demo_processes(state_file: Path) -> dict:
    """{name: {"pid", "restarts", "alive"}} from the launcher's state file."""
    try:
        state = json.loads(state_file.read_text())
    except (OSError, ValueError):
        return {}
    out = {}
    for name, child in state.get("children", {}).items():
        try:
            os.kill(child["pid"], 0)
            alive = True
        except ProcessLookupError:
            alive = False
        except PermissionError:
            alive = True
        out[name] = {**child, "alive": alive}
    return out


def demo_log_errors(path: Path | None) -> Counter:
    counts: Counter = Counter()
    if path is None or not path.exists():
        return counts
    with open(path, errors="replace") as f:
        for line in f:
            if "Unrecoverable error" in line:
                counts["unrecoverable"] += 1
            if "Traceback (most recent call last)" in line:
                counts["tracebacks"] += 1
            if re.search(r"\b(ERROR|CRITICAL)\b", line):
                counts["ERROR/CRITICAL lines"] += 1
            if "exited with code" in line:
                counts["child exits"] += 1
    return counts


class Soak:
    def __init__(self, args):
        self.args = args
        self.stats: Counter = Counter()
        self.clients = {
            u: Client(args.base, u, args.password, self.stats, args.timeout) for u in USERS
        }
        self.leases: dict[int, dict] = {}  # id -> {"user", "status", "seen_at", "submitted"}
        self.to_active: list[float] = []
        self.started = time.monotonic()
        self.started_wall = time.strftime("%Y-%m-%d %H:%M:%S %Z")
        self.first_pids: dict[str, int] = {}
        self.pid_changes: Counter = Counter()
        self.dead_checks: Counter = Counter()
        self.reports: list[str] = []
        self.draining = False
        # The longest stretch without a lease activated (needs the worker) or expired (needs
        # the beat's tick and the worker), from the start: a stalled worker or beat shows here.
        self.last = {"activation": self.started, "expiry": self.started}
        self.gaps = {"activation": 0.0, "expiry": 0.0}

    # --- the load -----------------------------------------------------------------------
    def request_one(self) -> None:
        user = random.choice(USERS)
        client = self.clients[user]
        minutes = random.randint(self.args.min_lease, self.args.max_lease)
        status, body = client.call(
            "POST",
            "/api/v1/leases/",
            {
                "card_model": random.choice(MODELS[user]),
                "count": random.choice((1, 1, 1, 2)),
                "duration_minutes": minutes,
                "description": "soak",
            },
        )
        if status == 201:
            self.stats["leases requested"] += 1
            self.leases[body["id"]] = {
                "user": user,
                "status": body["status"],
                "submitted": time.monotonic(),
                "checked": 0.0,
            }
            self.note(body["id"], body)
        elif 400 <= status < 500:
            self.stats["requests refused (4xx)"] += 1

    def note(self, lease_id: int, body: dict) -> None:
        lease = self.leases[lease_id]
        old, new = lease["status"], body["status"]
        lease["status"] = new
        if new == "active" and "activated_at" not in lease:
            lease["activated_at"] = time.monotonic()
            self.gaps["activation"] = max(
                self.gaps["activation"], lease["activated_at"] - self.last["activation"]
            )
            self.last["activation"] = lease["activated_at"]
            self.stats["leases activated"] += 1
            # The lease's own times, not when this script noticed (it looks every few ticks).
            try:
                waited = datetime.fromisoformat(body["activated_at"]) - datetime.fromisoformat(
                    body["submitted_at"]
                )
                self.to_active.append(waited.total_seconds())
            except (KeyError, TypeError, ValueError):
                pass
        if new not in OPEN and old in OPEN:
            reason = body.get("end_reason") or new
            self.stats[f"ended: {reason}"] += 1
            if reason == "expired":
                now = time.monotonic()
                self.gaps["expiry"] = max(self.gaps["expiry"], now - self.last["expiry"])
                self.last["expiry"] = now

    def refresh_some(self) -> None:
        open_ids = sorted(
            (i for i, le in self.leases.items() if le["status"] in OPEN),
            key=lambda i: self.leases[i]["checked"],
        )
        for lease_id in open_ids[: self.args.refresh]:
            lease = self.leases[lease_id]
            lease["checked"] = time.monotonic()
            status, body = self.clients[lease["user"]].call("GET", f"/api/v1/leases/{lease_id}/")
            if status != 200:
                continue
            self.note(lease_id, body)
            self.act(lease_id, body)
            # Provisioning since its cards were placed (start_at), not since it was asked for:
            # a lease that waited in the queue is not stuck.
            if body["status"] == "provisioning" and body.get("start_at"):
                since = datetime.now(UTC) - datetime.fromisoformat(body["start_at"])
                if since.total_seconds() > self.args.stuck_seconds:
                    self.stats["stuck in provisioning (seen)"] += 1

    def act(self, lease_id: int, body: dict) -> None:
        """What a holder does now and then: release early, extend a little, give up waiting."""
        if self.draining:
            return
        client = self.clients[self.leases[lease_id]["user"]]
        roll = random.random()
        path = f"/api/v1/leases/{lease_id}/"
        if body["status"] == "active":
            if roll < 0.10:
                status, out = client.call("POST", path + "release/")
                if status == 200:
                    self.stats["releases sent"] += 1
                    self.note(lease_id, out)
            elif roll < 0.16:
                status, out = client.call("POST", path + "extend/", {"minutes": 1})
                if status == 200:
                    self.stats["extends"] += 1
        elif body["status"] in WAITING and roll < 0.12:
            status, out = client.call("POST", path + "cancel/")
            if status == 200:
                self.stats["cancels"] += 1
                self.note(lease_id, out)

    def approve_some(self) -> None:
        lead = self.clients[LEAD]
        status, body = lead.call("GET", "/api/v1/approvals/")
        if status != 200:
            return
        for item in (body.get("results", body) if isinstance(body, dict) else body)[:2]:
            status, out = lead.call(
                "POST", f"/api/v1/approvals/{item['id']}/approve/", {"reason": "soak"}
            )
            if status == 200:
                self.stats["approvals"] += 1
                if item["id"] in self.leases:
                    self.note(item["id"], out)

    def browse(self) -> None:
        client = self.clients[random.choice(USERS)]
        for path in random.sample(["/", "/leases/", "/pool/", "/notifications/"], 2):
            client.call("GET", path, api=False)
            self.stats["pages fetched"] += 1

    def since_activation(self) -> float:
        """Seconds since the last activation, while requests are still being made."""
        return 0.0 if self.draining else time.monotonic() - self.last["activation"]

    def check_processes(self) -> None:
        for name, child in demo_processes(self.args.state_file).items():
            first = self.first_pids.setdefault(name, child["pid"])
            if child["pid"] != first:
                self.pid_changes[name] = child["restarts"]
            if not child["alive"]:
                self.dead_checks[name] += 1

    # --- the report ---------------------------------------------------------------------
    def table(self, final: bool) -> str:
        elapsed = time.monotonic() - self.started
        procs = demo_processes(self.args.state_file)
        errors = demo_log_errors(self.args.demo_log)
        lat = sorted(LATENCIES)
        act = sorted(self.to_active)

        def pct(xs, p):
            return f"{xs[min(len(xs) - 1, int(p * len(xs)))]:.2f}" if xs else "-"

        still_open = Counter(le["status"] for le in self.leases.values() if le["status"] in OPEN)
        rows = [
            ("started", self.started_wall),
            ("elapsed", f"{elapsed / 60:.1f} min of {self.args.minutes}"),
            ("HTTP requests", self.stats["requests"]),
            ("5xx answers", self.stats["5xx"]),
            ("connection errors", self.stats["connection errors"]),
            ("4xx answers (refusals, limits)", self.stats["4xx"]),
            (
                "HTTP latency p50 / p95 / max (s)",
                f"{pct(lat, 0.5)} / {pct(lat, 0.95)} / {(lat[-1] if lat else 0):.2f}",
            ),
            ("pages fetched (signed in)", self.stats["pages fetched"]),
            ("leases requested", self.stats["leases requested"]),
            ("leases activated", self.stats["leases activated"]),
            ("request -> active p50 / p95 (s)", f"{pct(act, 0.5)} / {pct(act, 0.95)}"),
            ("ended: expired", self.stats["ended: expired"]),
            ("ended: released", self.stats["ended: released"]),
            ("cancelled", self.stats["ended: cancelled"]),
            (
                "other ends",
                sum(
                    v
                    for k, v in self.stats.items()
                    if k.startswith("ended:")
                    and k not in {"ended: expired", "ended: released", "ended: cancelled"}
                ),
            ),
            (
                "releases / extends / cancels sent",
                f"{self.stats['releases sent']} / "
                f"{self.stats['extends']} / {self.stats['cancels']}",
            ),
            ("approvals by the lead", self.stats["approvals"]),
            ("open now", ", ".join(f"{k} {v}" for k, v in sorted(still_open.items())) or "-"),
            ("seen stuck in provisioning", self.stats["stuck in provisioning (seen)"]),
            (
                "longest wait for an activation / expiry (s)",
                f"{max(self.gaps['activation'], self.since_activation()):.0f} / "
                f"{self.gaps['expiry']:.0f}",
            ),
        ]
        for name in ("web", "worker", "beat"):
            child = procs.get(name)
            if child is None:
                rows.append((f"{name} process", "unknown (no state file)"))
                continue
            rows.append(
                (
                    f"{name}: pid / alive / restarts",
                    f"{child['pid']} / {'yes' if child['alive'] else 'NO'} / {child['restarts']}"
                    f" (seen dead {self.dead_checks[name]}x)",
                )
            )
        if self.args.demo_log:
            rows += [
                ("demo log: child exits", errors["child exits"]),
                ("demo log: 'Unrecoverable error'", errors["unrecoverable"]),
                ("demo log: tracebacks", errors["tracebacks"]),
                ("demo log: ERROR/CRITICAL lines", errors["ERROR/CRITICAL lines"]),
            ]
        width = max(len(k) for k, _ in rows)
        title = "FINAL" if final else "progress"
        lines = [f"== soak {title} report ({time.strftime('%Y-%m-%d %H:%M:%S %Z')}) =="]
        lines += [f"{k:<{width}}  {v}" for k, v in rows]
        if final and REFUSALS:
            lines.append("4xx answers by kind (most frequent first):")
            lines += [f"  {n:>6}  {k}" for k, n in REFUSALS.most_common(12)]
        return "\n".join(lines)

    def report(self, final: bool = False) -> None:
        text = self.table(final)
        print(text, flush=True)
        self.reports.append(text)
        if self.args.out:
            Path(self.args.out).write_text("\n\n".join(self.reports) + "\n")

    # --- the loop -----------------------------------------------------------------------
    def run(self) -> int:
        for client in self.clients.values():
            if not client.sign_in():
                return 1
        self.check_processes()
        end = self.started + self.args.minutes * 60
        next_report = self.started + self.args.report_minutes * 60
        tick = 0
        while time.monotonic() < end:
            t0 = time.monotonic()
            tick += 1
            self.request_one()
            self.refresh_some()
            if tick % 5 == 0:
                self.approve_some()
            if tick % 7 == 0:
                self.browse()
            self.check_processes()
            if time.monotonic() >= next_report:
                self.report()
                next_report += self.args.report_minutes * 60
            time.sleep(max(0.0, self.args.interval - (time.monotonic() - t0)))
        # No new requests: let what is still open run out, so the last expiries count too.
        self.gaps["activation"] = max(self.gaps["activation"], self.since_activation())
        self.draining = True
        end = time.monotonic() + self.args.drain_minutes * 60
        while time.monotonic() < end and any(le["status"] in OPEN for le in self.leases.values()):
            self.refresh_some()
            self.check_processes()
            time.sleep(self.args.interval)
        self.report(final=True)
        return 0 if not (self.stats["5xx"] or self.stats["connection errors"]) else 3


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--base", default="http://127.0.0.1:8000")
    p.add_argument("--minutes", type=float, default=120)
    p.add_argument("--interval", type=float, default=4.0, help="seconds between requests")
    p.add_argument("--min-lease", type=int, default=2, help="shortest lease, minutes")
    p.add_argument("--max-lease", type=int, default=5, help="longest lease, minutes")
    p.add_argument("--refresh", type=int, default=4, help="open leases looked at per tick")
    p.add_argument(
        "--drain-minutes",
        type=float,
        default=8,
        help="after the last request, how long to watch open leases end",
    )
    p.add_argument("--report-minutes", type=float, default=10)
    p.add_argument("--password", default=os.environ.get("CARDPOOL_DEMO_PASSWORD", "cardpool-demo"))
    p.add_argument(
        "--state-file",
        type=Path,
        default=Path("var/demo-processes.json"),
        help="the launcher's record of its children (in the demo's CARDPOOL_VAR_DIR)",
    )
    p.add_argument(
        "--demo-log",
        type=Path,
        default=None,
        help="the demo's output, to count crashes and errors in it",
    )
    p.add_argument("--stuck-seconds", type=float, default=120)
    p.add_argument("--timeout", type=float, default=30, help="HTTP timeout, seconds")
    p.add_argument("--seed", type=int, default=14)
    p.add_argument("--out", help="write the reports here too")
    args = p.parse_args(argv)
    random.seed(args.seed)
    return Soak(args).run()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
