"""JupyterLab and a terminal on a Slurm lease, in a real browser, through the session proxy.

Log in → ask for 2 H800 with an environment → "Open JupyterLab" → JupyterLab loads under the
portal's URL → a cell prints the cards' visibility variable (the lease's allocation) and
``whoami`` (the holder) → "Open terminal" → another user gets 404 at the session URL →
release → the session URL answers "ended" and the step is gone from the lease's job.

Needs the Slurm lab (tests/slurm), PostgreSQL and Redis (a real worker), nginx, JupyterLab
runnable by the lab's users and Chromium; skips with the reason otherwise.
"""

from __future__ import annotations

import re
import subprocess
import time

import pytest
from django.core.management import call_command

from leasing.choices import LeaseStatus
from leasing.models import Environment, Lease, Session
from tests.e2e.conftest import purge_broker, start_worker, stop_worker
from tests.e2e.session_proxy import JUPYTER, nginx_in_front, session_missing
from tests.e2e.test_browser import CHROMIUM_ARGS, db_read
from tests.factories import CardModelFactory
from tests.leasing.test_slurm_live import CONF, WHY

WHY_NOT = WHY or session_missing(("alice", "bob"))
pytestmark = [
    pytest.mark.postgres,
    pytest.mark.broker,
    pytest.mark.browser,
    pytest.mark.slurm,
    pytest.mark.skipif(bool(WHY_NOT), reason=WHY_NOT or "-"),
]

CELL = (
    "import os, subprocess\n"
    "print('VIS=' + os.environ.get('CUDA_VISIBLE_DEVICES', 'unset'))\n"
    "print('WHO=' + subprocess.check_output(['whoami'], text=True).strip())"
)


def _scancel_ours():
    out = subprocess.run(
        ["squeue", "-h", "-o", "%i %j"], capture_output=True, text=True, env=_env(), check=False
    ).stdout
    ids = [line.split()[0] for line in out.splitlines() if " cardpool-" in f" {line.split()[-1]}"]
    if ids:
        subprocess.run(["scancel", *ids], env=_env(), check=False)


def _env():
    import os

    return {**os.environ, "SLURM_CONF": CONF} if CONF else dict(os.environ)


@pytest.fixture
def lab(settings, transactional_db, tmp_path):
    settings.CARDPOOL_SLURM = {**settings.CARDPOOL_SLURM, "CONF": CONF, "RUN_AS": "runuser"}
    workspaces = tmp_path / "workspaces"
    (workspaces / "users").mkdir(parents=True)
    (workspaces / "users").chmod(0o1777)
    (workspaces / "teams").mkdir()
    tmp_path.chmod(0o755)
    settings.CARDPOOL_SESSIONS = {
        **settings.CARDPOOL_SESSIONS,
        "JUPYTER": JUPYTER,
        "WORKSPACE_ROOT": str(workspaces),
    }
    _scancel_ours()
    h800 = CardModelFactory(slug="h800", name="H800", vendor="nvidia")
    CardModelFactory(slug="a100-80g-sxm", name="A100", vendor="nvidia")
    call_command("sync_slurm", "--map", "a100=a100-80g-sxm", "--map", "h800=h800")
    import sys

    env = Environment.objects.create(
        slug="lab-torch",
        name="PyTorch (lab venv)",
        stack_family="cuda",
        stack_version="12.4 + PyTorch",
        vendors=["nvidia"],
        entry_kind=Environment.Entry.VENV,
        entry=sys.prefix,
    )
    purge_broker()
    worker = start_worker(
        tmp_path,
        env={
            "CARDPOOL_SLURM_CONF": CONF,
            "CARDPOOL_SLURM_RUN_AS": "runuser",
            "CARDPOOL_SESSION_JUPYTER": JUPYTER,
            "CARDPOOL_SESSION_LOG_DIR": str(tmp_path / "sessions"),
            "CARDPOOL_WORKSPACE_ROOT": str(workspaces),
        },
    )
    yield h800, env
    stop_worker(worker)
    _scancel_ours()


def _diagnose(tmp_path, session_pk) -> str:
    """The session's row, its log and the worker's log's tail: why it did not load."""
    row = db_read(lambda: Session.objects.filter(pk=session_pk).values().first())
    logs = [f"session: {row}"]
    for path in sorted(tmp_path.glob("sessions/*.log")) + [tmp_path / "worker.log"]:
        if path.exists():
            logs.append(f"--- {path.name}\n{path.read_text()[-3000:]}")
    return "JupyterLab did not load through the proxy\n" + "\n".join(logs)


def _login(context, base, username):
    page = context.new_page()
    page.goto(f"{base}/accounts/login/")
    page.locator("input[name=login]").fill(username)
    page.locator("input[name=password]").fill("pw-for-tests")
    page.locator("input[name=password]").press("Enter")
    page.wait_for_url(re.compile(r"^(?!.*/accounts/login/)"))
    return page


def _step_names(job_id: int) -> list[str]:
    out = subprocess.run(
        ["squeue", "-h", "-s", "-j", str(job_id), "-o", "%j"],
        capture_output=True,
        text=True,
        env=_env(),
        check=False,
    ).stdout
    return [line.strip() for line in out.splitlines()]


def test_jupyterlab_and_terminal_through_the_portal_on_a_slurm_lease(
    lab, live_server, alice, bob, tmp_path
):
    from playwright.sync_api import expect, sync_playwright

    h800, env = lab
    with nginx_in_front(live_server.url, tmp_path) as base, sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS, headless=True
        )
        context = browser.new_context()
        context.set_default_timeout(20_000)
        page = _login(context, base, "alice")

        # Ask for two H800 with the environment; the lease turns active by itself.
        page.goto(f"{base}/leases/new/")
        page.locator("select[name=card_model]").select_option(h800.slug)
        page.locator("input[name=count]").fill("2")
        page.locator("input[name=duration]").fill("1")
        page.locator("select[name=unit]").select_option("hours")
        page.locator("select[name=team]").select_option("vision")
        page.locator("select[name=environment]").select_option(env.slug)
        page.locator("#request-form [type=submit]").click()
        page.wait_for_url(re.compile(r"/leases/\d+/$"))
        lease_pk = int(re.search(r"/leases/(\d+)/$", page.url).group(1))
        expect(page.locator("#lease-live [data-status=active]")).to_be_visible()
        lease = db_read(lambda: Lease.objects.get(pk=lease_pk))
        assert lease.environment_id == env.pk
        devices = lease.access["nodes"][0]["env"]["CUDA_VISIBLE_DEVICES"]
        job_id = lease.access["nodes"][0]["job_id"]

        # Open JupyterLab: a starting page, then JupyterLab itself under the portal's URL.
        page.reload()
        page.locator("button[name=target][value=lab]").click()
        page.wait_for_url(re.compile(r"/sessions/\d+/lab"), timeout=120_000)
        session_pk = int(re.search(r"/sessions/(\d+)/", page.url).group(1))
        session_url = f"{base}/sessions/{session_pk}/lab"
        try:
            expect(page.locator("#jp-main-dock-panel")).to_be_attached(timeout=120_000)
        except AssertionError:
            pytest.fail(_diagnose(tmp_path, session_pk))
        # On the session's own origin (s<id>.localhost), never the portal's.
        assert page.url.startswith(base.replace("127.0.0.1", f"s{session_pk}.localhost", 1))

        # A notebook with one cell, run in the browser: the cards and the user it runs as.
        notebook = {
            "cells": [
                {
                    "cell_type": "code",
                    "metadata": {},
                    "outputs": [],
                    "source": CELL,
                    "execution_count": None,
                }
            ],
            "metadata": {
                "kernelspec": {
                    "name": "python3",
                    "display_name": "Python 3 (ipykernel)",
                    "language": "python",
                },
                "language_info": {"name": "python"},
            },
            "nbformat": 4,
            "nbformat_minor": 5,
        }
        saved = page.evaluate(
            """async ([url, nb]) => (await fetch(url, {method: 'PUT',
                 headers: {'Content-Type': 'application/json'},
                 body: JSON.stringify({type: 'notebook', content: nb})})).status""",
            [f"/sessions/{session_pk}/api/contents/check.ipynb", notebook],
        )
        assert saved in (200, 201)
        page.goto(f"{base}/sessions/{session_pk}/lab/tree/check.ipynb")
        cell = page.locator(".jp-Notebook .jp-Cell").first
        expect(cell).to_be_visible(timeout=60_000)
        try:  # JupyterLab may still ask which kernel to start: the notebook's own
            page.locator(".jp-Dialog .jp-mod-accept").click(timeout=5_000)
        except Exception:  # noqa: BLE001 - no dialog: the kernel started by itself
            pass
        expect(page.locator(".jp-Notebook-ExecutionIndicator[data-status=idle]")).to_be_attached(
            timeout=60_000
        )
        cell.locator(".jp-InputArea-editor").click()
        page.keyboard.press("Shift+Enter")
        output = page.locator(".jp-OutputArea-output").first
        expect(output).to_contain_text(f"VIS={devices}", timeout=60_000)
        expect(output).to_contain_text("WHO=alice")

        # Open terminal from the lease page: the same session, a terminal over a websocket.
        page.goto(f"{base}/leases/{lease_pk}/")
        page.locator("button[name=target][value=terminal]").click()
        page.wait_for_url(re.compile(rf"/sessions/{session_pk}/lab/workspaces/"))
        expect(page.locator(".jp-Terminal").first).to_be_visible(timeout=60_000)
        page.wait_for_timeout(1500)  # the shell's prompt
        page.locator(".jp-Terminal").first.click()
        page.keyboard.type("whoami > term-check.txt\n")
        checked = None
        for _ in range(40):
            checked = page.evaluate(
                """async (url) => { const r = await fetch(url);
                     return r.ok ? (await r.json()).content : null; }""",
                f"/sessions/{session_pk}/api/contents/term-check.txt",
            )
            if checked:
                break
            page.wait_for_timeout(250)
        assert (checked or "").strip() == "alice"

        # Someone else: the session does not exist for them.
        other = browser.new_context()
        bob_page = _login(other, base, "bob")
        answer = bob_page.goto(session_url)
        assert answer.status == 404
        answer = bob_page.goto(f"{base}/sessions/{session_pk}/api/status")
        assert answer.status == 404
        other.close()

        # Release: the session URL answers "ended" and the process is gone from the node.
        page.goto(f"{base}/leases/{lease_pk}/")
        page.locator("form[action$='/release/'] [type=submit]").click()  # asks first
        with page.expect_navigation():
            page.locator("#confirm-dialog [data-confirm-ok]").click()
        expect(page.locator("#lease-live [data-status=ended]")).to_be_visible(timeout=20_000)
        answer = page.goto(session_url)
        assert answer.status == 410
        expect(page.locator("[data-testid=session-state]")).to_be_visible()
        context.close()
        browser.close()

    session = db_read(lambda: Session.objects.get(pk=session_pk))
    assert session.status == "ended" and session.end_reason == "lease_ended"
    assert db_read(lambda: Lease.objects.get(pk=lease_pk).status) == LeaseStatus.ENDED
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        alive = subprocess.run(
            ["pgrep", "-u", "alice", "-f", f"--port={session.port}"], capture_output=True
        )
        if alive.returncode != 0 and not _step_names(job_id):
            break
        time.sleep(0.5)
    else:
        pytest.fail("the session's JupyterLab still runs after the release")
