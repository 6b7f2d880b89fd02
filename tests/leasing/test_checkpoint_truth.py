"""A checkpoint is "sent" only when it was delivered (issue #32, DESIGN invariant 12): with the
local backend the portal hands it to the node's agent, the lease says it waits for the
agent, the agent's answer makes it delivered (or not delivered, with its reason), and no word
within ``CHECKPOINT_ACK_SECONDS`` says "not delivered" while the grace runs on. The agent,
started exactly as the demo starts it (``--sessions --no-telemetry``), delivers the signal to
a process that traps it."""

from __future__ import annotations

import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import pytest

from inventory import telemetry
from leasing.choices import LeaseStatus, Priority
from leasing.lifecycle import provisioning
from leasing.lifecycle import tasks as lease_tasks
from leasing.lifecycle.validation import Checkpoint
from leasing.models import Lease
from tests.factories import make_node
from tests.leasing.conftest import ask

SAVE = Checkpoint(signal="usr1", seconds=900, requeue=False)


def _preempted(lena, bob, vision, nlp, a100):
    job = ask(bob, nlp, a100, count=4, priority=Priority.PREEMPTIBLE, checkpoint=SAVE)
    provisioning.provision_step(lease_id=job.pk)
    ask(lena, vision, a100, count=2, priority=Priority.HIGH)
    job.refresh_from_db()
    assert job.preempt_at is not None
    assert provisioning.checkpoint_step(lease_id=job.pk)
    return job


@pytest.fixture
def four(a100):
    return make_node(a100, cards=4, domains=1, hostname="r4")


def _note(client, job) -> str:
    page = client.get(f"/leases/{job.pk}/").content.decode()
    start = page.index('data-note="checkpoint"')
    return page[start : page.index("</li>", start)]


def test_handed_to_the_agent_is_not_sent_until_it_answers(
    frozen, lena, bob, vision, nlp, a100, four, api, client
):
    job = _preempted(lena, bob, vision, nlp, a100)
    kinds = list(job.events.values_list("kind", flat=True))
    assert "checkpoint_handed" in kinds and "checkpoint_signal" not in kinds
    client.force_login(bob)
    assert 'data-checkpoint="waiting"' in _note(client, job)
    timeline = client.get(f"/leases/{job.pk}/").content.decode()
    assert "Checkpoint signal sent" not in timeline

    api.credentials(HTTP_AUTHORIZATION=f"Node {telemetry.node_token_issue(node=four)}")
    frozen.shift(timedelta(seconds=5))
    answer = api.post(f"/api/v1/checkpoints/{job.pk}/", {"ok": True, "detail": "1 process"})
    assert answer.status_code == 204
    assert 'data-checkpoint="sent"' in _note(client, job)


def test_the_agents_failure_is_not_delivered_with_its_reason(
    frozen, lena, bob, vision, nlp, a100, four, api, client
):
    job = _preempted(lena, bob, vision, nlp, a100)
    api.credentials(HTTP_AUTHORIZATION=f"Node {telemetry.node_token_issue(node=four)}")
    answer = api.post(f"/api/v1/checkpoints/{job.pk}/", {"ok": False, "detail": "pid 7: EPERM"})
    assert answer.status_code == 204
    assert not job.events.filter(kind="checkpoint_delivered").exists()
    client.force_login(bob)
    note = _note(client, job)
    assert 'data-checkpoint="failed"' in note and "pid 7: EPERM" in note
    assert api.get("/api/v1/checkpoints/").json() == []  # told once per node


def test_no_word_within_the_bound_says_not_delivered_and_the_grace_runs_on(
    frozen, lena, bob, vision, nlp, a100, four, api, client, settings
):
    settings.CARDPOOL = {**settings.CARDPOOL, "CHECKPOINT_ACK_SECONDS": 30}
    job = _preempted(lena, bob, vision, nlp, a100)
    preempt_at = job.preempt_at
    frozen.shift(timedelta(seconds=29))
    assert lease_tasks.sweep()["checkpoints_unacknowledged"] == 0
    frozen.shift(timedelta(seconds=2))
    assert lease_tasks.sweep()["checkpoints_unacknowledged"] == 1
    assert lease_tasks.sweep()["checkpoints_unacknowledged"] == 0  # once
    job.refresh_from_db()
    assert job.preempt_at == preempt_at and job.status == LeaseStatus.ACTIVE
    client.force_login(bob)
    note = _note(client, job)
    assert 'data-checkpoint="failed"' in note
    page = client.get(f"/leases/{job.pk}/").content.decode()
    assert 'data-kind="checkpoint_failed"' in page and "30" in note
    # A late word from the agent still counts: the lease then says delivered.
    api.credentials(HTTP_AUTHORIZATION=f"Node {telemetry.node_token_issue(node=four)}")
    frozen.shift(timedelta(seconds=1))
    assert api.post(f"/api/v1/checkpoints/{job.pk}/", {"ok": True}).status_code == 204
    assert 'data-checkpoint="sent"' in _note(client, job)


@pytest.mark.django_db(transaction=True)
def test_the_agent_as_the_demo_starts_it_delivers_the_signal(
    live_server, lena, bob, vision, nlp, a100, tmp_path: Path
):
    """``cardpool.py demo`` runs ``inventory.agent --sessions --no-telemetry``; that loop
    must deliver checkpoints too (it never asked for them before)."""
    node = make_node(a100, cards=4, domains=1, hostname="r4")
    job = _preempted(lena, bob, vision, nlp, a100)
    token_file = tmp_path / "token"
    token_file.write_text(telemetry.node_token_issue(node=node))
    marker = tmp_path / "saved"
    script = (
        "import signal, sys, time, pathlib\n"
        f"p = pathlib.Path({str(marker)!r})\n"
        "signal.signal(signal.SIGUSR1, lambda *a: (p.write_text('saved'), sys.exit(0)))\n"
        "print('ready', flush=True)\n"
        "time.sleep(60)\n"
    )
    holder = subprocess.Popen(
        [sys.executable, "-c", script],
        env={"PATH": "/usr/bin:/bin", "CUDA_VISIBLE_DEVICES": "0,1,2,3"},
        stdout=subprocess.PIPE,
    )
    agent = None
    try:
        assert holder.stdout.readline().strip() == b"ready"
        agent = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "inventory.agent",
                "--sessions",
                "--no-telemetry",
                "--url",
                f"{live_server.url}/api/v1/telemetry/",
                "--token-file",
                str(token_file),
                "--state-dir",
                str(tmp_path / "agent"),
                "--session-address",
                "127.0.0.1",
                "--session-interval",
                "0.5",
            ],
            cwd=Path(__file__).resolve().parents[2],
            env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
            stderr=subprocess.PIPE,
        )
        # A bound on the wait, not an assertion on time: the agent has 60 s to deliver.
        assert holder.wait(timeout=60) == 0, "the agent never delivered the signal"
        assert marker.read_text() == "saved"
        for _ in range(120):
            if job.events.filter(kind="checkpoint_delivered").exists():
                break
            time.sleep(0.25)
        delivered = job.events.get(kind="checkpoint_delivered")
        assert delivered.data == {"host": "r4", "ok": True}
        assert "SIGUSR1 to 1 process" in delivered.message
    finally:
        for p in (holder, agent):
            if p is not None and p.poll() is None:
                p.kill()
                p.wait()
    assert Lease.objects.get(pk=job.pk).status == LeaseStatus.ACTIVE
