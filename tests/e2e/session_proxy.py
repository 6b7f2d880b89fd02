"""The session proxy (nginx, configured by ``manage.py session_proxy_config``) in front of the
live server, and the checks that say why session tests cannot run somewhere."""

from __future__ import annotations

import http.client
import os
import shutil
import socket
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlparse, urlsplit

from django.conf import settings

from leasing.workbench.proxy import nginx_config

JUPYTER = str(Path(sys.prefix) / "bin" / "jupyter")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def runs_as(user: str, path: str) -> bool:
    """Whether Unix user *user* can run *path* (the venv's jupyter for the lab's users)."""
    if os.geteuid() != 0:
        return False
    done = subprocess.run(
        ["runuser", "-u", user, "--", path, "--version"], capture_output=True, timeout=60
    )
    return done.returncode == 0


def session_missing(users: tuple[str, ...] = ("alice",)) -> str:
    """Why the session tests cannot run here ("" when they can). With *users* empty the
    sessions run as accounts the agent creates (checked with ``nobody`` instead)."""
    if shutil.which("nginx") is None:
        return "needs nginx with auth_request for the session proxy (apt-get install nginx-light)"
    if not Path(JUPYTER).exists():
        return f"needs JupyterLab in the test environment ({JUPYTER}; pip install -e '.[test]')"
    if os.geteuid() != 0:
        return "needs root (the session runs as the holder's Unix user through runuser)"
    if not users and not runs_as("nobody", JUPYTER):
        return f"other users cannot run {JUPYTER}: the venv must be readable by every user"
    for user in users:
        try:
            subprocess.run(["id", user], check=True, capture_output=True)
        except subprocess.CalledProcessError:
            return f"no Unix user {user} (useradd -m {user})"
        if not runs_as(user, JUPYTER):
            return f"{user} cannot run {JUPYTER}: the venv must be readable by every user"
    return ""


@contextmanager
def nginx_in_front(live_server_url: str, tmp_path: Path):
    """nginx on a free port passing everything to the live server; yields its base URL."""
    portal = urlparse(live_server_url).netloc
    port = free_port()
    var = tmp_path / "nginx"
    for sub in ("body", "proxy", "fastcgi", "uwsgi", "scgi"):
        (var / sub).mkdir(parents=True, exist_ok=True)
    conf = var / "nginx.conf"
    conf.write_text(nginx_config(listen=f"127.0.0.1:{port}", portal=portal, var_dir=str(var)))
    log = open(var / "nginx.log", "w")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(["nginx", "-c", str(conf)], stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                if proc.poll() is not None:
                    raise RuntimeError((var / "nginx.log").read_text()) from None
                time.sleep(0.1)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


def portal_cookie(user) -> str:
    """A Cookie header with *user*'s portal login (as a browser holding it would send)."""
    from django.test import Client

    client = Client()
    client.force_login(user)
    name = settings.SESSION_COOKIE_NAME
    return f"{name}={client.cookies[name].value}"


def via_proxy(
    proxy: str, host: str, path: str, headers: dict | None = None, method: str = "GET", body=None
) -> tuple[int, dict, bytes]:
    """One request to the proxy at *proxy* (``http://127.0.0.1:port``) for the site *host*
    (a session's origin ``s<id>.localhost:port`` is not in this machine's resolver)."""
    where = urlsplit(proxy)
    conn = http.client.HTTPConnection(where.hostname, where.port, timeout=30)
    try:
        conn.request(method, path, body=body, headers={"Host": host, **(headers or {})})
        answer = conn.getresponse()
        return answer.status, dict(answer.getheaders()), answer.read()
    finally:
        conn.close()


def session_pass(proxy: str, cookie: str, lease_id: int) -> tuple[str, str]:
    """What a browser does on "Open JupyterLab": ask the portal (with its login *cookie*) to
    go to the lease's running session, follow the one-time ticket to the session's own
    origin and keep the pass cookie it sets. Returns (the origin's Host, its Cookie header)."""
    portal_host = urlsplit(proxy).netloc
    status, headers, _ = via_proxy(
        proxy, portal_host, f"/leases/{lease_id}/session/go/", {"Cookie": cookie}
    )
    assert status == 302, status
    ticket = urlsplit(headers["Location"])
    status, headers, _ = via_proxy(proxy, ticket.netloc, f"{ticket.path}?{ticket.query}")
    assert status == 302, status
    name, value = headers["Set-Cookie"].split(";", 1)[0].split("=", 1)
    return ticket.netloc, f"{name}={value}"
