"""The session flow with the local backend, without a browser: the node's cardpool-agent
starts JupyterLab as the holder, the portal's proxy lets only the holder reach it (a kernel
over a websocket prints the visibility variable and ``whoami``), the holder's SSH key is
allowed for the lease's time, and the release stops the process and takes the key off.

Needs nginx, JupyterLab runnable by Unix users alice and bob, and root (``runuser``);
skips with the reason otherwise.
"""

from __future__ import annotations

import json
import sys
import time
import urllib.error
import urllib.request
import uuid

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
)
from tests.factories import CardModelFactory, make_node
from tests.leasing.conftest import ask

WHY_NOT = session_missing(("alice", "bob"))
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


def test_the_agent_runs_a_session_and_keys_for_the_local_backend(
    settings, live_server, alice, bob, vision, tmp_path
):
    settings.CARDPOOL_SESSIONS = {**settings.CARDPOOL_SESSIONS, "JUPYTER": JUPYTER}
    tmp_path.chmod(0o755)
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

    homes = tmp_path / "homes"
    (homes / "alice").mkdir(parents=True)
    keeper = agent_sessions.SessionKeeper(
        tmp_path / "agent", address="127.0.0.1", home_of=lambda user: homes / user
    )
    try:
        _flow(live_server, tmp_path, keeper, token, lease, session, alice, bob, homes)
    finally:  # a failed run must not leave JupyterLab behind
        for session_id, pid in keeper.running().items():
            keeper.stop(session_id, pid)


def _flow(live_server, tmp_path, keeper, token, lease, session, alice, bob, homes):
    devices = lease.access["nodes"][0]["env"]["CUDA_VISIBLE_DEVICES"]
    api = f"{live_server.url}/api/v1/"
    running = lambda: Session.objects.get(pk=session.pk).status == "running"  # noqa: E731
    _rounds(api, token, keeper, running)

    authorized = (homes / "alice" / ".ssh" / "authorized_keys").read_text()
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
            "print('WHO=' + subprocess.check_output(['whoami'], text=True).strip())"
        )
        out = _run_in_kernel(base, session.pk, alice_pass, code, host)
        assert f"VIS={devices}" in out and "WHO=alice" in out, out
        assert _get(f"{base}/sessions/{session.pk}/lab", bob_cookie)[0] == 404
        assert _get(f"{base}/sessions/{session.pk}/api/status", bob_cookie)[0] == 404

        changes.lease_release(lease=lease, user=alice)
        assert provisioning.release_step(lease_id=lease.pk)
        status, body = _get(f"{base}/sessions/{session.pk}/lab", alice_cookie)
        assert status == 410 and b"session-state" in body

    _rounds(api, token, keeper, lambda: session.pk not in keeper.running(), seconds=20)
    assert not agent_sessions._alive(pid)
    authorized = (homes / "alice" / ".ssh" / "authorized_keys").read_text()
    assert "cardpool-lease-" not in authorized
    assert Session.objects.get(pk=session.pk).end_reason == "lease_ended"
