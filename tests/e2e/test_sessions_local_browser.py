"""The local backend's sessions in a browser, through the portal: alice opens JupyterLab, a
terminal and a desktop from her lease page; they run as her managed account
(``cardpool-alice``, made by the agent in a throwaway passwd) inside the lease's fence
(stand-in device nodes); bob gets 404; after the release 410.

Needs Chromium, nginx, JupyterLab runnable by every user, bubblewrap, TigerVNC, websockify,
noVNC and root; skips with the reason otherwise. Creates no Unix user on the machine.
"""

from __future__ import annotations

import re
import threading
import time

import pytest

from inventory import agent_sessions
from inventory.telemetry import node_token_issue
from leasing.lifecycle import changes, provisioning
from leasing.models import Lease, Session
from tests.e2e.session_proxy import JUPYTER, nginx_in_front, session_missing
from tests.e2e.test_browser import CHROMIUM_ARGS, db_read
from tests.e2e.test_sessions_local_agent import NO_DESKTOP, open_root, stand_ins  # noqa: F401
from tests.factories import CardModelFactory, make_node
from tests.inventory.test_fence import WHY_NOT as NO_FENCE
from tests.leasing.conftest import ask
from tests.throwaway_accounts import throwaway_accounts, why_not


def _chromium_missing() -> str:
    from pathlib import Path

    return "" if Path("/usr/bin/chromium").exists() else "needs Debian's chromium"


WHY_NOT = _chromium_missing() or session_missing(()) or why_not() or NO_FENCE or NO_DESKTOP
pytestmark = [
    pytest.mark.skipif(bool(WHY_NOT), reason=WHY_NOT or "-"),
    pytest.mark.django_db(transaction=True),
]


def _login(context, base, username):
    page = context.new_page()
    page.goto(f"{base}/accounts/login/")
    page.locator("input[name=login]").fill(username)
    page.locator("input[name=password]").fill("pw-for-tests")
    page.locator("input[name=password]").press("Enter")
    page.wait_for_url(re.compile(r"^(?!.*/accounts/login/)"))
    return page


class AgentThread(threading.Thread):
    """The node's cardpool-agent rounds, beside the browser."""

    def __init__(self, api: str, token: str, keeper):
        super().__init__(daemon=True)
        self.api, self.token, self.keeper = api, token, keeper
        self.done = threading.Event()
        self.errors: list[str] = []

    def run(self):
        while not self.done.is_set():
            try:
                agent_sessions.sessions_round(self.api, self.token, self.keeper)
            except Exception as exc:  # noqa: BLE001 - the real agent logs and goes on too
                self.errors.append(repr(exc))
            time.sleep(0.5)


def _contents(page, session_pk: int, name: str) -> str:
    for _ in range(60):
        found = page.evaluate(
            """async (url) => { const r = await fetch(url);
                 return r.ok ? (await r.json()).content : null; }""",
            f"/sessions/{session_pk}/api/contents/{name}",
        )
        if found:
            return found
        page.wait_for_timeout(250)
    return ""


def test_jupyterlab_terminal_and_desktop_through_the_portal_on_a_local_node(
    settings,
    live_server,
    alice,
    bob,
    vision,
    tmp_path,
    open_root,  # noqa: F811 - the fixture imported above
    stand_ins,  # noqa: F811
):
    from playwright.sync_api import expect, sync_playwright

    settings.CARDPOOL_SESSIONS = {
        **settings.CARDPOOL_SESSIONS,
        "JUPYTER": JUPYTER,
        "ACCOUNTS": "managed",
        "WORKSPACE_ROOT": str(open_root),
    }
    model = CardModelFactory(slug="web-l40", name="L40S", vendor="nvidia", graphics=True)
    node = make_node(model, cards=4, hostname="web-node")
    node.session_addresses = ["127.0.0.1"]  # where the agent below says its sessions listen
    node.save()
    lease = ask(alice, vision, model, count=2)
    assert provisioning.provision_step(lease_id=lease.pk)
    lease.refresh_from_db()
    devices = lease.access["nodes"][0]["env"]["CUDA_VISIBLE_DEVICES"]
    with throwaway_accounts() as accounts:
        keeper = agent_sessions.SessionKeeper(
            tmp_path / "agent",
            address="127.0.0.1",
            accounts=accounts,
            fence=agent_sessions.Fence(dev_root=stand_ins),
            require_fence=True,
            log=lambda m: None,
        )
        agent = AgentThread(f"{live_server.url}/api/v1/", node_token_issue(node=node), keeper)
        agent.start()
        try:
            with nginx_in_front(live_server.url, tmp_path) as base, sync_playwright() as pw:
                browser = pw.chromium.launch(
                    executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS, headless=True
                )
                context = browser.new_context()
                context.set_default_timeout(30_000)
                page = _login(context, base, "alice")
                _flow(page, base, browser, lease, devices, expect)
                context.close()
                browser.close()
        finally:
            agent.done.set()
            agent.join(timeout=30)
            for session_id, pid in keeper.running().items():
                keeper.stop(session_id, pid)
        ps = accounts.run(["ps", "-o", "stat=,pid=,args=", "-u", "cardpool-alice"]).stdout
        assert [line for line in ps.splitlines() if not line.startswith("Z")] == [], ps


def _flow(page, base, browser, lease, devices, expect):
    # Open JupyterLab: a starting page, then JupyterLab under the portal's URL.
    page.goto(f"{base}/leases/{lease.pk}/")
    page.locator("button[name=target][value=lab]").click()
    page.wait_for_url(re.compile(r"/sessions/\d+/lab"), timeout=120_000)
    session_pk = int(re.search(r"/sessions/(\d+)/", page.url).group(1))
    expect(page.locator("#jp-main-dock-panel")).to_be_attached(timeout=120_000)

    # A terminal from the lease page: whoami, the cards' variable and the private /dev.
    page.goto(f"{base}/leases/{lease.pk}/")
    page.locator("button[name=target][value=terminal]").click()
    page.wait_for_url(re.compile(rf"/sessions/{session_pk}/lab/workspaces/"))
    expect(page.locator(".jp-Terminal").first).to_be_visible(timeout=60_000)
    page.wait_for_timeout(1500)  # the shell's prompt
    page.locator(".jp-Terminal").first.click()
    page.keyboard.type(
        "(whoami; echo $CUDA_VISIBLE_DEVICES; ls /dev | grep nvidia | tr '\\n' ' ') "
        "> term-check.tmp && mv term-check.tmp term-check.txt\n"
    )
    who, visible, dev = (_contents(page, session_pk, "term-check.txt").splitlines() + ["", ""])[:3]
    leased = sorted([f"nvidia{d}" for d in devices.split(",")] + ["nvidiactl"])
    assert (who, visible, dev.split()) == ("cardpool-alice", devices, leased)

    # The desktop: noVNC connects to the session's display through the same gate.
    page.goto(f"{base}/leases/{lease.pk}/")
    expect(page.locator("[data-offer=desktop]")).to_contain_text("llvmpipe")
    bad: list[str] = []
    page.on("response", lambda r: r.status >= 400 and bad.append(f"{r.status} {r.url}"))
    page.on("console", lambda m: m.type == "error" and bad.append(m.text[:200]))
    page.locator("button[name=target][value=desktop]").click()
    page.wait_for_url(re.compile(rf"/sessions/{session_pk}/desktop/vnc.html"))
    loaded = "() => !document.documentElement.classList.contains('noVNC_loading')"
    try:
        page.wait_for_function(loaded, timeout=30_000)
    except Exception:  # noqa: BLE001 - one reload when the test server dropped a module
        if not any(line[:1] == "5" for line in bad):
            raise
        page.reload()
    try:
        expect(page).to_have_title(re.compile("Cardpool"), timeout=60_000)  # the desktop's name
    except AssertionError:
        pytest.fail(f"noVNC did not connect: {bad[:20]}")
    expect(page.locator("#noVNC_container canvas")).to_be_visible()

    # Someone else: none of it exists for them.
    other = browser.new_context()
    bob_page = _login(other, base, "bob")
    for path in ("lab", "desktop/vnc.html"):
        assert bob_page.goto(f"{base}/sessions/{session_pk}/{path}").status == 404
    other.close()

    # Release: every URL of the session answers "ended".
    def release():
        held = Lease.objects.select_related("user").get(pk=lease.pk)
        changes.lease_release(lease=held, user=held.user)
        return provisioning.release_step(lease_id=lease.pk)

    assert db_read(release)
    for path in ("lab", "desktop/vnc.html"):
        assert page.goto(f"{base}/sessions/{session_pk}/{path}").status == 410
    deadline = time.monotonic() + 30
    while db_read(lambda: Session.objects.get(pk=session_pk).status) != "ended":
        assert time.monotonic() < deadline
        time.sleep(0.5)
