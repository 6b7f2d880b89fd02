"""The session flow with the local backend, without a browser: the node's cardpool-agent
creates the holder's managed account (``cardpool-alice``, in a throwaway passwd), starts
JupyterLab as it, the portal's proxy lets only the holder reach it (a kernel over a websocket
prints the visibility variable and ``whoami``), the holder's SSH key is allowed for the lease's
time, the release stops the process and takes the key off, and the account is locked when
alice leaves the portal.

Needs nginx, JupyterLab runnable by every user, and root (``runuser``, the throwaway
/etc overlay); skips with the reason otherwise. Creates no Unix user on the machine.
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

from inventory import agent_sessions
from inventory.telemetry import node_token_issue
from leasing.lifecycle import changes, provisioning
from leasing.models import Environment, Session
from leasing.workbench import keys, sessions
from tests.e2e.session_proxy import (
    JUPYTER,
    nginx_in_front,
    portal_cookie,
    session_missing,
    session_pass,
    via_proxy,
)
from tests.factories import CardModelFactory, make_node
from tests.inventory.test_fence import WHY_NOT as NO_FENCE
from tests.leasing.conftest import ask
from tests.throwaway_accounts import stand_in_devices, throwaway_accounts, why_not

WHY_NOT = session_missing(()) or why_not() or NO_FENCE
pytestmark = [
    pytest.mark.skipif(bool(WHY_NOT), reason=WHY_NOT or "-"),
    pytest.mark.django_db(transaction=True),
]
KEY = (
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGyQ0wKOm9WJ0ctIqAavyfmTfNOl6lEs0YgxRoYpOtOS alice@laptop"
)


def _get(url: str, cookie: str, host: str | None = None) -> tuple[int, bytes]:
    """GET *url* with *cookie*; *host*: as the site (a session's origin) named so."""
    request = urllib.request.Request(
        url, headers={"Cookie": cookie, **({"Host": host} if host else {})}
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, answer.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def _run_in_kernel(base: str, session_id: int, cookie: str, code: str, host: str) -> str:
    """Start a kernel through the proxy (on the session's origin *host*, with its pass
    *cookie*) and run *code* over its websocket; its stdout."""
    from tornado import httpclient, ioloop, websocket

    request = urllib.request.Request(
        f"{base}/sessions/{session_id}/api/kernels",
        data=b"{}",
        method="POST",
        headers={"Cookie": cookie, "Content-Type": "application/json", "Host": host},
    )
    with urllib.request.urlopen(request, timeout=30) as answer:
        kernel = json.load(answer)["id"]

    async def run() -> str:
        ws_url = base.replace("http://", "ws://") + (
            f"/sessions/{session_id}/api/kernels/{kernel}/channels"
        )
        conn = await websocket.websocket_connect(
            httpclient.HTTPRequest(
                ws_url, headers={"Cookie": cookie, "Host": host}, connect_timeout=30
            )
        )
        msg_id = uuid.uuid4().hex
        await conn.write_message(
            json.dumps(
                {
                    "header": {
                        "msg_id": msg_id,
                        "msg_type": "execute_request",
                        "username": "test",
                        "session": uuid.uuid4().hex,
                        "version": "5.3",
                    },
                    "parent_header": {},
                    "metadata": {},
                    "content": {"code": code, "silent": False},
                    "channel": "shell",
                    "buffers": [],
                }
            )
        )
        out = []
        while True:
            raw = await conn.read_message()
            assert raw is not None, "the websocket closed"
            msg = json.loads(raw)
            if msg.get("parent_header", {}).get("msg_id") != msg_id:
                continue
            if msg["msg_type"] == "stream":
                out.append(msg["content"]["text"])
            if msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
                conn.close()
                return "".join(out)

    return ioloop.IOLoop.current().run_sync(run, timeout=60)


def _rounds(api: str, token: str, keeper, until, seconds: float = 90):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        agent_sessions.sessions_round(api, token, keeper)
        if until():
            return
        time.sleep(0.5)
    pytest.fail(f"not reached in {seconds} s; log: {keeper.log_tail(0)}")


@pytest.fixture
def stand_ins():
    with stand_in_devices() as root:
        yield root


@pytest.fixture
def open_root():
    """A workspace root every account can reach (pytest's tmp_path sits under a 0700 one)."""
    root = Path(tempfile.mkdtemp(prefix="cardpool-ws-", dir="/tmp"))
    root.chmod(0o755)
    yield root
    shutil.rmtree(root, ignore_errors=True)


def test_the_agent_runs_a_session_and_keys_for_the_local_backend(
    settings, live_server, alice, bob, vision, tmp_path, open_root, stand_ins
):
    settings.CARDPOOL_SESSIONS = {
        **settings.CARDPOOL_SESSIONS,
        "JUPYTER": JUPYTER,
        "ACCOUNTS": "managed",
        "WORKSPACE_ROOT": str(open_root),
    }
    model = CardModelFactory(slug="agent-a10", name="A10", vendor="nvidia")
    node = make_node(model, cards=4, hostname="agent-node")
    node.session_addresses = ["127.0.0.1"]  # where the agent below says its sessions listen
    node.save()
    token = node_token_issue(node=node)
    env = Environment.objects.create(
        slug="venv",
        name="Lab venv",
        stack_family="cuda",
        stack_version="12",
        vendors=["nvidia"],
        entry_kind=Environment.Entry.VENV,
        entry=sys.prefix,
    )
    lease = ask(alice, vision, model, count=2, environment=env)
    assert provisioning.provision_step(lease_id=lease.pk)
    lease.refresh_from_db()
    keys.ssh_key_add(user=alice, public_key=KEY)
    session = sessions.session_open(lease=lease, user=alice)

    with throwaway_accounts() as accounts:
        keeper = agent_sessions.SessionKeeper(
            tmp_path / "agent",
            address="127.0.0.1",
            accounts=accounts,
            fence=agent_sessions.Fence(dev_root=stand_ins),
            require_fence=True,
        )
        try:
            _flow(live_server, tmp_path, keeper, token, lease, session, alice, bob, open_root)
        finally:  # a failed run must not leave JupyterLab behind
            for session_id, pid in keeper.running().items():
                keeper.stop(session_id, pid)


def _flow(live_server, tmp_path, keeper, token, lease, session, alice, bob, root):
    home = root / "homes" / "cardpool-alice"
    devices = lease.access["nodes"][0]["env"]["CUDA_VISIBLE_DEVICES"]
    api = f"{live_server.url}/api/v1/"
    running = lambda: Session.objects.get(pk=session.pk).status == "running"  # noqa: E731
    _rounds(api, token, keeper, running)

    account = keeper.accounts.lookup("cardpool-alice")
    assert account is not None and account.home == home and account.uid != 0
    assert keeper.managed() == ["cardpool-alice"]
    authorized = (home / ".ssh" / "authorized_keys").read_text()
    assert (home / ".ssh" / "authorized_keys").stat().st_uid == account.uid
    assert KEY.rsplit(" ", 1)[0] in authorized
    assert f"cardpool-lease-{lease.pk}" in authorized and 'expiry-time="' in authorized
    pid = keeper.running()[session.pk]

    with nginx_in_front(live_server.url, tmp_path) as base:
        alice_cookie, bob_cookie = portal_cookie(alice), portal_cookie(bob)
        # "Open JupyterLab": the session's own origin, with its pass (not the portal login).
        host, alice_pass = session_pass(base, alice_cookie, lease.pk)
        status, body = _get(f"{base}/sessions/{session.pk}/api/status", alice_pass, host)
        assert status == 200, body
        code = (
            "import os, subprocess\n"
            "print('VIS=' + os.environ.get('CUDA_VISIBLE_DEVICES', 'unset'))\n"
            "print('WHO=' + subprocess.check_output(['whoami'], text=True).strip())\n"
            "print('DEV=' + ','.join(sorted(n for n in os.listdir('/dev') if 'nvidia' in n)))\n"
            "for n in range(4):\n"
            "    try:\n"
            "        os.close(os.open(f'/dev/nvidia{n}', os.O_RDWR)); print(f'OPENED{n}')\n"
            "    except OSError as e:\n"
            "        print(f'REFUSED{n}', type(e).__name__)\n"
        )
        out = _run_in_kernel(base, session.pk, alice_pass, code, host)
        assert f"VIS={devices}" in out and "WHO=cardpool-alice" in out, out
        leased = [int(d) for d in devices.split(",")]
        fenced = sorted([f"nvidia{d}" for d in leased] + ["nvidiactl"])
        assert f"DEV={','.join(fenced)}" in out, out  # a private /dev: only the leased cards
        for n in range(4):
            assert (f"OPENED{n}" if n in leased else f"REFUSED{n} FileNotFoundError") in out
        assert _get(f"{base}/sessions/{session.pk}/lab", bob_cookie)[0] == 404
        assert _get(f"{base}/sessions/{session.pk}/api/status", bob_cookie)[0] == 404

        changes.lease_release(lease=lease, user=alice)
        assert provisioning.release_step(lease_id=lease.pk)
        status, body = _get(f"{base}/sessions/{session.pk}/lab", alice_cookie)
        assert status == 410 and b"session-state" in body

    _rounds(api, token, keeper, lambda: session.pk not in keeper.running(), seconds=20)
    assert not agent_sessions._alive(pid)
    authorized = (home / ".ssh" / "authorized_keys").read_text()
    assert "cardpool-lease-" not in authorized
    assert Session.objects.get(pk=session.pk).end_reason == "lease_ended"
    ps = keeper.accounts.run(["ps", "-o", "stat=,pid=,args=", "-u", "cardpool-alice"]).stdout
    left = [line for line in ps.splitlines() if not line.startswith("Z")]  # zombies: PID 1's
    assert left == [], ps  # no process left

    # alice leaves: the agent locks her account (password and expiry), her files stay.
    agent_sessions.sessions_round(api, token, keeper, leavers_due=True)
    assert keeper.managed() == ["cardpool-alice"]  # still with us
    alice.is_active = False
    alice.save(update_fields=["is_active"])
    assert agent_sessions.sessions_round(api, token, keeper, leavers_due=True)["locked"] == 1
    status = keeper.accounts.run(["passwd", "--status", "cardpool-alice"]).stdout.split()
    assert status[1] == "L" and keeper.managed() == [] and home.exists()


def _desktop_missing() -> str:
    if not (shutil.which("Xvnc") or shutil.which("Xtigervnc")) or not shutil.which("websockify"):
        return (
            "needs TigerVNC and websockify (apt-get install tigervnc-standalone-server websockify)"
        )
    if not Path("/usr/share/novnc/vnc.html").exists():
        return "needs noVNC (apt-get install novnc)"
    return ""


NO_DESKTOP = _desktop_missing()


def _rfb_banner(base: str, session_id: int, cookie: str, host: str) -> bytes:
    """Open the desktop's websocket through the proxy (on the session's origin *host*, with
    its pass *cookie*); the VNC server's first words."""
    from tornado import httpclient, ioloop, websocket

    async def run() -> bytes:
        conn = await websocket.websocket_connect(
            httpclient.HTTPRequest(
                base.replace("http://", "ws://") + f"/sessions/{session_id}/desktop/websockify",
                headers={"Cookie": cookie, "Host": host},
                connect_timeout=30,
            ),
            subprotocols=["binary"],
        )
        banner = await conn.read_message()
        conn.close()
        return banner

    return ioloop.IOLoop.current().run_sync(run, timeout=60)


@pytest.mark.skipif(bool(NO_DESKTOP), reason=NO_DESKTOP or "-")
def test_the_desktop_runs_beside_the_lab_and_reaches_only_its_holder(
    settings, live_server, alice, bob, vision, tmp_path, open_root, stand_ins
):
    settings.CARDPOOL_SESSIONS = {
        **settings.CARDPOOL_SESSIONS,
        "JUPYTER": JUPYTER,
        "ACCOUNTS": "managed",
        "WORKSPACE_ROOT": str(open_root),
    }
    model = CardModelFactory(slug="desk-l40", name="L40S", vendor="nvidia", graphics=True)
    node = make_node(model, cards=2, hostname="desk-node")
    node.session_addresses = ["127.0.0.1"]  # where the agent below says its sessions listen
    node.save()
    token = node_token_issue(node=node)
    lease = ask(alice, vision, model)
    assert provisioning.provision_step(lease_id=lease.pk)
    lease.refresh_from_db()
    session = sessions.session_open(lease=lease, user=alice, want="desktop")
    api = f"{live_server.url}/api/v1/"
    with throwaway_accounts() as accounts:
        keeper = agent_sessions.SessionKeeper(
            tmp_path / "agent",
            address="127.0.0.1",
            accounts=accounts,
            fence=agent_sessions.Fence(dev_root=stand_ins),
            require_fence=True,
        )
        try:
            running = lambda: Session.objects.get(pk=session.pk).status == "running"  # noqa: E731
            _rounds(api, token, keeper, running)
            with nginx_in_front(live_server.url, tmp_path) as base:
                alice_cookie, bob_cookie = portal_cookie(alice), portal_cookie(bob)
                # "Open desktop": a ticket for the session's own origin, then noVNC there.
                go = via_proxy(
                    base,
                    urlsplit(base).netloc,
                    f"/leases/{lease.pk}/session/go/?target=desktop",
                    {"Cookie": alice_cookie},
                )
                assert go[0] == 302 and "desktop/vnc.html" in unquote(go[1]["Location"])
                host, alice_pass = session_pass(base, alice_cookie, lease.pk)
                page = f"{base}/sessions/{session.pk}/desktop/vnc.html"
                deadline = time.monotonic() + 30
                while _get(page, alice_pass, host)[0] != 200 and time.monotonic() < deadline:
                    time.sleep(0.5)
                status, body = _get(page, alice_pass, host)
                assert status == 200 and b"noVNC" in body, body[:300]
                assert _get(page, bob_cookie)[0] == 404  # on the portal: not bob's to know
                direct = (
                    f"http://127.0.0.1:{session.port + 1}/sessions/{session.pk}/desktop/vnc.html"
                )
                assert _get(direct, "")[0] == 403  # the node's port wants the session's token
                assert _rfb_banner(base, session.pk, alice_pass, host).startswith(b"RFB 003.")
                changes.lease_release(lease=lease, user=alice)
                assert provisioning.release_step(lease_id=lease.pk)
                assert _get(page, alice_pass, host)[0] == 410
            _rounds(api, token, keeper, lambda: session.pk not in keeper.running(), seconds=20)
        finally:
            for session_id, pid in keeper.running().items():
                keeper.stop(session_id, pid)
        ps = keeper.accounts.run(["ps", "-o", "stat=,pid=,args=", "-u", "cardpool-alice"]).stdout
        assert [line for line in ps.splitlines() if not line.startswith("Z")] == [], ps
    assert list(Path("/tmp").glob(f"cardpool-desktop-{session.pk}-*")) == []  # nothing left
    assert not Path(f"/tmp/.X{agent_sessions.desktop_display(session.pk)}-lock").exists()
