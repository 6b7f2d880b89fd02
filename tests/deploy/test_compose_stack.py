"""The production shape, run for real: the images built without a registry
(deploy/podman/build-images.sh), docker-compose.yml brought up with podman-compose (plus the
plain-HTTP loopback override) and driven through the session proxy's published port, as a
person would: sign in, lease, watch a 1-minute lease expire and be reclaimed, export a report;
then `down` and `up` again with the volumes kept, and nothing is lost or booked twice.

The commands are those of docs/operations.md, "Containers", "Without a registry". Skipped, with
the reason, only where podman, podman-compose or debootstrap is missing or no container can
start on this machine. It takes minutes (a lease has to run out): `.ci/run` runs it.
"""

from __future__ import annotations

import csv
import http.cookiejar
import io
import json
import os
import re
import secrets
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from datetime import UTC, datetime
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PROJECT = "cardpool-smoke"
LOCAL_IMAGES = {
    "CARDPOOL_POSTGRES_IMAGE": "localhost/postgresql:15-bookworm",
    "CARDPOOL_REDIS_IMAGE": "localhost/redis:7.0-bookworm",
    "CARDPOOL_NGINX_IMAGE": "localhost/nginx:1.22-bookworm",
}
COMPOSE = [
    "podman-compose",
    "-p",
    PROJECT,
    "-f",
    "docker-compose.yml",
    "-f",
    "deploy/compose/http-loopback.yml",
]
DEMO_PASSWORD = "cardpool-demo"  # seed_demo's users (CARDPOOL_DEMO_PASSWORD's default)
MODEL = "rtx-4090"  # a demo card model with cards free after seed_demo

pytestmark = pytest.mark.compose


def _runtime_problem() -> str:
    """Why the stack cannot run here ('' when it can)."""
    for tool in ("podman", "podman-compose", "debootstrap"):
        if not shutil.which(tool):
            return (
                f"{tool} is not installed (apt-get install podman runc podman-compose debootstrap)"
            )
    if os.geteuid() != 0:
        return "builds a root file system with debootstrap: needs root"
    with tempfile.TemporaryDirectory() as rootfs:
        # The smallest root file system: /bin/true and the libraries it loads.
        libs = subprocess.run(["ldd", "/bin/true"], capture_output=True, text=True).stdout
        for path in ["/bin/true", *re.findall(r"(/\S+) \(0x", libs)]:
            target = Path(rootfs) / path.lstrip("/")
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(path, target)
        probe = subprocess.run(
            ["podman", "run", "--rm", "--network", "none", "--rootfs", rootfs, "/bin/true"],
            env=_env(),
            capture_output=True,
            text=True,
            timeout=120,
        )
    if probe.returncode != 0:
        return f"no container can start here: {(probe.stderr or probe.stdout).strip()[-300:]}"
    return ""


def _env(**extra: str) -> dict[str, str]:
    """The environment for podman and podman-compose: this machine's, less anything of the
    portal's (CI exports its own DATABASE_URL etc.), plus the local images."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("CARDPOOL_", "POSTGRES_", "DATABASE_", "CELERY_"))
    }
    env.setdefault("CONTAINERS_CONF", str(ROOT / "deploy/podman/containers.conf"))
    return env | LOCAL_IMAGES | extra


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Stack:
    """docker-compose.yml under podman-compose, on a loopback port of its own."""

    def __init__(self) -> None:
        self.port = _free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.env = _env(CARDPOOL_SECRET_KEY=secrets.token_hex(32), CARDPOOL_PORT=str(self.port))

    def compose(self, *args: str, timeout: float = 600) -> str:
        done = subprocess.run(
            [*COMPOSE, *args],
            cwd=ROOT,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if done.returncode != 0:
            raise AssertionError(
                f"podman-compose {' '.join(args)} exited {done.returncode}:\n"
                f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
            )
        return done.stdout

    def manage(self, *args: str) -> str:
        """`podman exec` rather than `podman-compose exec`, which echoes the environment
        (the secret key) on its command line."""
        return subprocess.run(
            ["podman", "exec", f"{PROJECT}_web_1", "python", "manage.py", *args],
            env=self.env,
            capture_output=True,
            text=True,
            check=True,
            timeout=300,
        ).stdout

    def up(self) -> None:
        self.compose("up", "-d")
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(self.base + "/accounts/login/", timeout=5) as r:
                    if r.status == 200:
                        return
            except (OSError, urllib.error.URLError):
                pass
            time.sleep(2)
        raise AssertionError(f"the portal did not answer on {self.base} within 300 s")

    def logs(self) -> str:
        out = subprocess.run(
            ["podman", "ps", "-a", "--filter", f"label=io.podman.compose.project={PROJECT}"],
            env=self.env,
            capture_output=True,
            text=True,
        ).stdout
        for service in ("web", "worker", "beat", "proxy", "proxy-config", "postgres", "redis"):
            logs = subprocess.run(
                ["podman", "logs", "--tail", "40", f"{PROJECT}_{service}_1"],
                env=self.env,
                capture_output=True,
                text=True,
            )
            out += f"\n--- {service}\n{logs.stdout[-4000:]}{logs.stderr[-4000:]}"
        return out


class Person:
    """A browser's worth of state: a session cookie from the sign-in form, and an API token."""

    def __init__(self, base: str, username: str) -> None:
        self.base, self.username = base, username
        self.jar = http.cookiejar.CookieJar()
        self.opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(self.jar))
        self.token = ""

    def get(self, path: str, *, api: bool = True) -> tuple[int, bytes, dict]:
        return self._send(urllib.request.Request(self.base + path), api=api)

    def post(self, path: str, body: dict) -> tuple[int, dict]:
        req = urllib.request.Request(
            self.base + path,
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        status, raw, _ = self._send(req, api=True)
        return status, json.loads(raw or b"{}")

    def json(self, path: str) -> dict:
        status, raw, _ = self.get(path)
        assert status == 200, (path, status, raw[:500])
        return json.loads(raw)

    def _send(self, req: urllib.request.Request, *, api: bool) -> tuple[int, bytes, dict]:
        if api and self.token:
            req.add_header("Authorization", f"Token {self.token}")
        try:
            with self.opener.open(req, timeout=30) as resp:
                return resp.status, resp.read(), dict(resp.headers)
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read(), dict(exc.headers)

    def sign_in(self) -> None:
        """The sign-in form (CSRF cookie, then the post), then an API token."""
        status, page, _ = self.get("/accounts/login/", api=False)
        assert status == 200
        csrf = next(c.value for c in self.jar if c.name.endswith("cardpool-csrf"))
        form = urllib.parse.urlencode(
            {"login": self.username, "password": DEMO_PASSWORD, "csrfmiddlewaretoken": csrf}
        ).encode()
        req = urllib.request.Request(
            self.base + "/accounts/login/",
            data=form,
            headers={"Referer": self.base + "/accounts/login/"},
            method="POST",
        )
        status, _, _ = self._send(req, api=False)
        assert status == 200, f"{self.username} could not sign in ({status})"
        assert any(c.name.endswith("cardpool-session") for c in self.jar), (
            "no session after signing in"
        )
        status, page, _ = self.get("/", api=False)
        assert status == 200 and self.username.encode() in page.lower()
        status, body = self.post(
            "/api/v1/auth/token/",
            {"username": self.username, "password": DEMO_PASSWORD, "name": "compose-smoke"},
        )
        assert status == 200, body
        self.token = body["token"]

    def lease(self, pk: int) -> dict:
        return self.json(f"/api/v1/leases/{pk}/")

    def wait_for(self, pk: int, status: str, timeout: float) -> tuple[dict, float]:
        """The lease once it has *status*, and how long that took."""
        started = time.monotonic()
        while True:
            lease = self.lease(pk)
            if lease["status"] == status:
                return lease, time.monotonic() - started
            assert time.monotonic() - started < timeout, (
                f"lease {pk} still {lease['status']} after {timeout} s, not {status}"
            )
            time.sleep(1)


def _all_leases(ops: Person, query: str = "") -> list[dict]:
    """Every lease an operator sees (``scope=all``), every page."""
    leases, url = [], f"/api/v1/leases/?scope=all{query}"
    while url:
        page = ops.json(url)
        leases += page["results"]
        url = page["next"] and page["next"].replace(ops.base, "")
    return leases


def _cards_in_use(ops: Person) -> list[str]:
    """The card of every allocation of every active lease (a card twice = double booking)."""
    return [
        a["card_uuid"] for lease in _all_leases(ops, "&status=active") for a in lease["allocations"]
    ]


@pytest.fixture(scope="module")
def stack():
    problem = _runtime_problem()
    if problem:
        pytest.skip(problem)
    subprocess.run(["bash", "deploy/podman/build-images.sh"], cwd=ROOT, env=_env(), check=True)
    stack = Stack()
    stack.compose("down", "-v")  # whatever an interrupted earlier run left
    try:
        started = time.monotonic()
        stack.up()
        print(f"\nstack up (first start: initdb, migrations): {time.monotonic() - started:.0f} s")
        yield stack
    except BaseException:
        print(stack.logs())
        raise
    finally:
        stack.compose("down", "-v")


def test_the_image_is_what_it_claims(stack):
    """Non-root, `check --deploy` clean with the compose file's production defaults, static
    files served by whitenoise from inside the image; its size is reported."""
    image = "localhost/cardpool:latest"
    inspect = subprocess.run(
        ["podman", "image", "inspect", "--format", "{{.Config.User}} {{.Size}}", image],
        env=stack.env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert inspect[0] == "cardpool"
    print(f"\n{image}: {int(inspect[1]) / 1e6:.0f} MB")
    whoami = subprocess.run(
        ["podman", "exec", f"{PROJECT}_web_1", "id", "-un"],
        env=stack.env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert whoami.stdout.strip() == "cardpool"

    production = {
        "CARDPOOL_SECRET_KEY": secrets.token_hex(32),
        "CARDPOOL_ALLOWED_HOSTS": "cardpool.example.org",
        "CARDPOOL_CSRF_TRUSTED_ORIGINS": "https://cardpool.example.org",
        "CARDPOOL_SITE_URL": "https://cardpool.example.org",
        "CARDPOOL_BEHIND_TLS_PROXY": "true",
        "CARDPOOL_SECURE_COOKIES": "true",
        "CARDPOOL_SSL_REDIRECT": "true",
        "CARDPOOL_HSTS_SECONDS": "31536000",
    }
    env_args = [arg for k, v in production.items() for arg in ("-e", f"{k}={v}")]
    check = subprocess.run(
        ["podman", "run", "--rm", "--network", "none", *env_args, image]
        + ["python", "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        env=stack.env,
        capture_output=True,
        text=True,
    )
    assert check.returncode == 0, check.stdout + check.stderr

    _, page, _ = Person(stack.base, "").get("/accounts/login/", api=False)
    css = re.search(rb'href="(/static/[^"]+\.css)"', page)
    assert css, "the sign-in page links no stylesheet"
    status, body, headers = Person(stack.base, "").get(css.group(1).decode(), api=False)
    assert status == 200 and body
    assert headers.get("Content-Type", "").startswith("text/css")
    # whitenoise marks hashed files as cacheable forever; nginx here only passes them on.
    assert "immutable" in headers.get("Cache-Control", ""), headers


def test_lease_expire_report_then_restart_with_volumes(stack):
    assert "demo data" in stack.manage("seed_demo")
    alice, ops, fin = (Person(stack.base, name) for name in ("alice", "ops", "fin"))
    for person in (alice, ops, fin):
        person.sign_in()

    # A lease is active within seconds of asking.
    status, short = alice.post(
        "/api/v1/leases/",
        {"card_model": MODEL, "count": 1, "duration_minutes": 1, "description": "smoke: 1 min"},
    )
    assert status == 201, short
    short, took = alice.wait_for(short["id"], "active", timeout=10)
    print(f"\n1-minute lease active {took:.1f} s after the answer to the request")
    assert short["allocations"]

    status, held = alice.post(
        "/api/v1/leases/",
        {"card_model": MODEL, "count": 1, "duration_minutes": 120, "description": "smoke: held"},
    )
    assert status == 201, held
    held, _ = alice.wait_for(held["id"], "active", timeout=10)
    in_use = _cards_in_use(ops)
    assert held["allocations"][0]["card_uuid"] in in_use
    assert len(in_use) == len(set(in_use)), "a card is held by two active leases"

    # The beat's tick and the worker reclaim it when its minute is up.
    short, _ = alice.wait_for(short["id"], "ended", timeout=120)
    assert short["end_reason"] == "expired"
    lag = datetime.now(UTC) - datetime.fromisoformat(short["end_at"])
    print(f"1-minute lease seen reclaimed {lag.total_seconds():.1f} s after its end")

    # The report export counts its usage.
    day = 24 * 3600  # today in the site's time zone lies within a day of today in UTC's
    start, end = (time.strftime("%Y-%m-%d", time.gmtime(time.time() + d)) for d in (-day, day))
    status, raw, headers = fin.get(
        f"/api/v1/reports/usage/?start={start}&end={end}&group_by=user&format=csv"
    )
    assert status == 200, raw[:500]
    assert headers.get("Content-Type", "").startswith("text/csv")
    rows = list(csv.reader(io.StringIO(raw.decode("utf-8-sig"))))
    assert any("alice" in " ".join(row).lower() for row in rows[1:]), rows

    # Down and up again, the volumes kept: every lease is still there, as it was.
    before = {lease["id"]: lease["status"] for lease in _all_leases(ops)}
    assert {short["id"], held["id"]} <= before.keys()
    started = time.monotonic()
    stack.compose("down")
    stack.up()
    print(f"down and up again: {time.monotonic() - started:.0f} s")
    for person in (alice, ops):
        person.sign_in()  # the API token survived; a fresh sign-in proves the users did
    after = {lease["id"]: lease["status"] for lease in _all_leases(ops)}
    assert after.keys() == before.keys(), "leases lost or made up by the restart"
    assert after[short["id"]] == "ended"
    held_again = alice.lease(held["id"])
    assert held_again["status"] == "active"
    assert held_again["allocations"] == held["allocations"]

    # A new lease after the restart gets other cards than the one still held.
    status, fresh = alice.post(
        "/api/v1/leases/",
        {"card_model": MODEL, "count": 1, "duration_minutes": 5, "description": "smoke: after"},
    )
    assert status == 201, fresh
    fresh, _ = alice.wait_for(fresh["id"], "active", timeout=10)
    in_use = _cards_in_use(ops)
    assert len(in_use) == len(set(in_use)), "a card is held by two active leases"
    assert held["allocations"][0]["card_uuid"] in in_use
    assert fresh["allocations"][0]["card_uuid"] != held["allocations"][0]["card_uuid"]
