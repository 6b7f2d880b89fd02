"""Sessions on their own origins, through the real session proxy (nginx from
``session_proxy_config``) in front of the live server, with a listener standing in for the
session on its node:

* the node receives nothing of the visitor's portal login: no portal cookie, no CSRF token,
  no Authorization of theirs (only Jupyter's token, which the proxy sends);
* Jupyter's token never reaches the browser (cut from what the node answers);
* in Chromium, a script the session serves cannot read an answer of the portal's API.

Needs nginx (with auth_request and sub); the browser test also Chromium and PostgreSQL.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from django.conf import settings

from leasing.lifecycle import provisioning
from leasing.models import Session
from leasing.workbench import sessions
from tests.e2e.session_proxy import (
    JUPYTER,
    free_port,
    nginx_in_front,
    portal_cookie,
    session_pass,
    via_proxy,
)
from tests.factories import CardModelFactory, make_node
from tests.leasing.conftest import ask

pytestmark = [
    pytest.mark.skipif(shutil.which("nginx") is None, reason="needs nginx (nginx-light)"),
    pytest.mark.django_db(transaction=True),
]

SCRIPT = """
<script>
(async () => {
  const out = {};
  for (const [name, url] of [["portal", "PORTAL/api/v1/leases/"], ["here", "/api/v1/leases/"]]) {
    try {
      const answer = await fetch(url, {credentials: "include"});
      out[name] = answer.status + " " + (await answer.text()).slice(0, 200);
    } catch (e) {
      out[name] = "unreadable: " + e;
    }
  }
  out.cookies = document.cookie;
  document.getElementById("out").textContent = JSON.stringify(out);
})();
</script>
"""


class FakeSession:
    """A listener standing in for JupyterLab on the node: it records every request's headers
    and serves a page that carries the token in its config, as JupyterLab's does, and a
    script that tries to read the portal's API."""

    def __init__(self, token: str, portal: str):
        self.seen: list[dict] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                fake.seen.append({k.lower(): v for k, v in self.headers.items()})
                config = json.dumps({"token": token, "baseUrl": "/"})
                body = (
                    f'<html><head><script id="jupyter-config-data" type="application/json">'
                    f"{config}</script></head><body><pre id=out>waiting</pre>"
                    f"{SCRIPT.replace('PORTAL', portal)}</body></html>"
                ).encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def running(alice, vision):
    """alice's active lease with a session asked for (marked running below)."""
    model = CardModelFactory(slug="origin-a10", name="A10", vendor="nvidia")
    make_node(model, cards=2, hostname="origin-node")
    lease = ask(alice, vision, model, start_at=None)
    assert provisioning.provision_step(lease_id=lease.pk)
    lease.refresh_from_db()
    return lease, sessions.session_open(lease=lease, user=alice)


@pytest.fixture
def proxied(live_server, tmp_path, running):
    lease, session = running
    with nginx_in_front(live_server.url, tmp_path) as proxy:
        fake = FakeSession(session.token, proxy)
        Session.objects.filter(pk=session.pk).update(port=fake.port)
        sessions.session_running(session_id=session.pk, address="127.0.0.1")
        try:
            yield proxy, fake, lease, Session.objects.get(pk=session.pk)
        finally:
            fake.close()


def test_the_node_receives_nothing_of_the_visitors_login(proxied, alice):
    proxy, fake, lease, session = proxied
    login = portal_cookie(alice)
    csrf = f"{settings.CSRF_COOKIE_NAME}=Zx9visitorcsrf"
    host, pass_cookie = session_pass(proxy, login, lease.pk)
    assert re.fullmatch(rf"s{session.pk}\.localhost:\d+", host)
    # Whatever the browser sends the session's origin — its pass, a portal cookie it should
    # not have, a CSRF token, an Authorization of its own — none of it reaches the node.
    status, _headers, body = via_proxy(
        proxy,
        host,
        f"/sessions/{session.pk}/lab",
        {
            "Cookie": f"{pass_cookie}; {login}; {csrf}",
            "Authorization": "Bearer visitors-own-token",
            "X-CSRFToken": "Zx9visitorcsrf",
        },
    )
    assert status == 200, body[:300]
    [seen] = fake.seen
    assert "cookie" not in seen
    assert seen["authorization"] == f"token {session.token}"
    assert "Zx9visitorcsrf" not in json.dumps(seen)
    assert login.split("=", 1)[1] not in json.dumps(seen)
    assert "x-cardpool-proxy" not in seen


def test_jupyters_token_is_not_in_the_page_source(proxied, alice):
    proxy, fake, lease, session = proxied
    host, pass_cookie = session_pass(proxy, portal_cookie(alice), lease.pk)
    status, _headers, body = via_proxy(
        proxy, host, f"/sessions/{session.pk}/lab", {"Cookie": pass_cookie}
    )
    assert status == 200
    assert b"jupyter-config-data" in body
    assert session.token.encode() not in body
    assert b'"token": ""' in body


def test_the_portal_answers_nothing_else_on_a_session_origin(proxied, alice):
    proxy, _fake, lease, session = proxied
    login = portal_cookie(alice)
    host, pass_cookie = session_pass(proxy, login, lease.pk)
    for path in ("/api/v1/leases/", "/", "/accounts/profile/", "/sessions/999999/lab"):
        status, _h, _b = via_proxy(proxy, host, path, {"Cookie": f"{pass_cookie}; {login}"})
        assert status in (302, 404), (path, status)
    # Another session's origin is not opened by this pass.
    other = host.replace(f"s{session.pk}.", f"s{session.pk + 1}.")
    status, _h, _b = via_proxy(
        proxy, other, f"/sessions/{session.pk + 1}/lab", {"Cookie": pass_cookie}
    )
    assert status in (302, 404)


@pytest.mark.postgres
@pytest.mark.browser
def test_a_script_served_by_a_session_cannot_read_the_portals_api(proxied, alice):
    """The holder signs in on the portal in Chromium and opens the session; the page the
    session serves tries to read the portal's API with the visitor's cookies."""
    from playwright.sync_api import sync_playwright

    from tests.e2e.test_browser import CHROMIUM_ARGS

    proxy, _fake, lease, session = proxied
    portal = urlsplit(proxy)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS, headless=True
        )
        try:
            page = browser.new_context(base_url=proxy).new_page()
            page.set_default_timeout(20_000)
            page.goto("/accounts/login/")
            page.locator("input[name=login]").fill("alice")
            page.locator("input[name=password]").fill("pw-for-tests")
            page.locator("input[name=password]").press("Enter")
            page.wait_for_url(re.compile(r"^(?!.*/accounts/login/)"))
            # The portal's own API answers the signed-in visitor on the portal's origin...
            own = page.evaluate("fetch('/api/v1/leases/').then(r => r.status)")
            assert own == 200
            page.goto(f"/leases/{lease.pk}/session/go/")
            page.wait_for_url(re.compile(rf"^http://s{session.pk}\.localhost:{portal.port}/"))
            page.wait_for_function("document.getElementById('out').textContent !== 'waiting'")
            out = json.loads(page.locator("#out").text_content())
        finally:
            browser.close()
    # ...but not a script of the session's: the browser keeps the answer from it, and on the
    # session's origin the portal has no API.
    assert out["portal"].startswith("unreadable"), out
    assert not out["here"].startswith("200"), out
    assert settings.SESSION_COOKIE_NAME not in out["cookies"], out
    assert settings.CSRF_COOKIE_NAME not in out["cookies"], out


@pytest.fixture
def real_lab(live_server, tmp_path, running):
    """JupyterLab itself (run here as this user, as the agent would run it as the holder)
    behind the proxy: yields (proxy, lease, session, its root directory)."""
    if not Path(JUPYTER).exists():
        pytest.skip(f"needs JupyterLab ({JUPYTER})")
    lease, session = running
    port = free_port()
    root_dir = tmp_path / "lab"
    root_dir.mkdir()
    env = {**os.environ, "JUPYTER_TOKEN": session.token, "HOME": str(tmp_path)}
    root = ["--allow-root"] if os.geteuid() == 0 else []
    lab = subprocess.Popen(
        [JUPYTER, "lab", "--no-browser", "--ip=127.0.0.1", f"--port={port}", "--port-retries=0",
         f"--ServerApp.base_url={session.base_url}", f"--ServerApp.root_dir={root_dir}",
         "--ServerApp.allow_remote_access=True", "--LabApp.news_url=None",
         "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate", *root],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        Session.objects.filter(pk=session.pk).update(port=port)
        sessions.session_running(session_id=session.pk, address="127.0.0.1")
        session.refresh_from_db()
        with nginx_in_front(live_server.url, tmp_path) as proxy:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                    break
                except OSError:
                    time.sleep(0.3)
            yield proxy, lease, session, root_dir
    finally:
        lab.terminate()
        lab.wait(timeout=20)


def test_real_jupyterlab_works_through_the_proxy_without_its_token_in_the_page(real_lab, alice):
    """Its page reaches the browser without the token, and its API — reads, and writes
    without an XSRF cookie — works, because the proxy authenticates to it."""
    proxy, lease, session, root_dir = real_lab
    host, pass_cookie = session_pass(proxy, portal_cookie(alice), lease.pk)
    headers = {"Cookie": pass_cookie}
    deadline = time.monotonic() + 60
    status = 0
    while status != 200 and time.monotonic() < deadline:
        status, _h, _b = via_proxy(proxy, host, f"/sessions/{session.pk}/api/status", headers)
        time.sleep(0.3)
    assert status == 200, "JupyterLab did not answer through the proxy"
    status, _h, page = via_proxy(proxy, host, f"/sessions/{session.pk}/lab", headers)
    assert status == 200 and b"jupyter-config-data" in page
    assert session.token.encode() not in page
    config = re.search(rb'id="jupyter-config-data"[^>]*>(.*?)</script>', page, re.S)
    assert json.loads(config.group(1))["token"] == ""
    status, _h, _b = via_proxy(
        proxy, host, f"/sessions/{session.pk}/api/contents/note.txt",
        {**headers, "Content-Type": "application/json"}, method="PUT",
        body=json.dumps({"type": "file", "format": "text", "content": "hi"}),
    )  # fmt: skip
    assert status in (200, 201)
    assert (root_dir / "note.txt").read_text() == "hi"


@pytest.mark.postgres
@pytest.mark.browser
def test_real_jupyterlab_opens_in_chromium_from_the_lease_page(real_lab, alice):
    """The whole way a holder takes: sign in, open the session, JupyterLab's launcher draws
    (its settings, kernelspecs and event websocket all through the proxy, with no token)."""
    from playwright.sync_api import expect, sync_playwright

    from tests.e2e.test_browser import CHROMIUM_ARGS

    proxy, lease, session, _root = real_lab
    with sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS, headless=True
        )
        try:
            page = browser.new_context(base_url=proxy).new_page()
            page.set_default_timeout(60_000)
            refused = []
            page.on("response", lambda r: refused.append(r.url) if r.status >= 400 else None)
            page.goto("/accounts/login/")
            page.locator("input[name=login]").fill("alice")
            page.locator("input[name=password]").fill("pw-for-tests")
            page.locator("input[name=password]").press("Enter")
            page.wait_for_url(re.compile(r"^(?!.*/accounts/login/)"))
            page.goto(f"/sessions/{session.pk}/lab")
            page.wait_for_url(re.compile(rf"^http://s{session.pk}\.localhost:\d+/sessions/"))
            expect(page.locator(".jp-Launcher").first).to_be_visible(timeout=90_000)
            assert session.token not in page.content()
            kernels = page.evaluate(
                f"fetch('/sessions/{session.pk}/api/kernelspecs').then(r => r.status)"
            )
            assert kernels == 200
            assert not [u for u in refused if "/sessions/" in u], refused
        finally:
            browser.close()
