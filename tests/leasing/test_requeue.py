"""Preemption that resumes (issue #18): a preemptible lease declares how it checkpoints and
whether to requeue; preempted, it gets its grace (at least its checkpoint time), the signal
through its backend (local: the node's agent), and a new queued lease that resumes it."""

import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import pytest
from django.core.exceptions import ValidationError

from inventory import agent, telemetry
from leasing.choices import EndReason, LeaseStatus, Priority
from leasing.lifecycle import endings, provisioning
from leasing.lifecycle.validation import Checkpoint
from leasing.models import BackendCall, Lease
from tests.factories import make_node
from tests.leasing.conftest import T0, ask, hours

SAVE = Checkpoint(signal="usr1", seconds=900, requeue=True)


def active(lease):
    provisioning.provision_step(lease_id=lease.pk)
    lease.refresh_from_db()
    return lease


@pytest.fixture
def four(a100):
    return make_node(a100, cards=4, domains=1, hostname="r4")


def test_preempted_lease_is_signalled_and_requeued_with_the_same_profile(
    frozen, lena, bob, vision, nlp, a100, four, sent_tasks, django_capture_on_commit_callbacks
):
    job = active(
        ask(
            bob,
            nlp,
            a100,
            count=4,
            duration=hours(6),
            priority=Priority.PREEMPTIBLE,
            checkpoint=SAVE,
            description="train",
        )
    )
    assert (job.checkpoint_signal, job.checkpoint_seconds, job.requeue) == ("USR1", 900, True)
    frozen.move_to(T0 + hours(1))
    with django_capture_on_commit_callbacks(execute=True):
        urgent = ask(lena, vision, a100, count=4, duration=hours(1), priority=Priority.HIGH)
    job.refresh_from_db()
    # The grace is the checkpoint's 15 minutes, longer than the site's 10.
    assert job.preempt_at == T0 + hours(1) + timedelta(minutes=15)
    assert ("leasing.tasks.checkpoint_lease", (job.pk,)) in [(t.name, t.args) for t in sent_tasks]

    # The task delivers it through the lease's backend (local: the agent will).
    assert provisioning.checkpoint_step(lease_id=job.pk)
    call = BackendCall.objects.get(lease=job, action="checkpoint")
    assert call.ok and call.backend == "local"
    assert job.events.get(kind="checkpoint_handed").data["via"] == "agent"
    assert not job.events.filter(kind="checkpoint_signal").exists()  # not sent: handed over

    frozen.move_to(job.preempt_at)
    assert endings.preemptions_due() == 1
    job.refresh_from_db()
    assert job.end_reason == EndReason.PREEMPTED
    resumed = Lease.objects.get(resumes=job)
    assert resumed.status == LeaseStatus.QUEUED
    assert (resumed.count, resumed.card_model, resumed.priority, resumed.user) == (
        4,
        a100,
        Priority.PREEMPTIBLE,
        bob,
    )
    assert (resumed.checkpoint_signal, resumed.checkpoint_seconds, resumed.requeue) == (
        "USR1",
        900,
        True,
    )
    assert resumed.description == "train"
    # It resumes with the time the old lease had left: 6 h − 1 h 15 min.
    assert resumed.duration == hours(6) - hours(1) - timedelta(minutes=15)
    assert job.events.get(kind="resumed_by").data == {"lease": resumed.pk}
    urgent.refresh_from_db()
    assert urgent.status == LeaseStatus.PROVISIONING
    assert resumed.estimated_start == urgent.end_at


def test_without_requeue_a_preempted_lease_just_ends(frozen, lena, bob, vision, nlp, a100, four):
    job = active(
        ask(
            bob,
            nlp,
            a100,
            count=4,
            priority=Priority.PREEMPTIBLE,
            checkpoint=Checkpoint(signal="TERM", seconds=30),
        )
    )
    ask(lena, vision, a100, count=4, priority=Priority.HIGH)
    job.refresh_from_db()
    assert job.preempt_at == T0 + timedelta(minutes=10)  # the site's grace: longer than 30 s
    frozen.move_to(job.preempt_at)
    endings.preemptions_due()
    assert not Lease.objects.filter(resumes=job).exists()


def test_requeue_refused_by_quota_is_told_on_the_timeline(
    frozen, lena, bob, vision, nlp, a100, four, ops
):
    from leasing.teams.services import quota_set

    job = active(ask(bob, nlp, a100, count=4, priority=Priority.PREEMPTIBLE, checkpoint=SAVE))
    quota_set(user=ops, team=nlp, card_model=a100, max_concurrent_cards=2)
    ask(lena, vision, a100, count=4, priority=Priority.HIGH)
    job.refresh_from_db()
    frozen.move_to(job.preempt_at)
    endings.preemptions_due()
    assert not Lease.objects.filter(resumes=job).exists()
    assert "at most 2 cards" in job.events.get(kind="requeue_refused").message


@pytest.mark.parametrize(
    "checkpoint, field",
    [
        (Checkpoint(signal="KILL"), "checkpoint_signal"),
        (Checkpoint(seconds=60), "checkpoint_signal"),
        (Checkpoint(requeue=True), "checkpoint_signal"),
        (Checkpoint(signal="USR1", seconds=99999), "checkpoint_seconds"),
    ],
)
def test_bad_checkpoints_are_refused(frozen, bob, nlp, a100, four, checkpoint, field):
    with pytest.raises(ValidationError) as caught:
        ask(bob, nlp, a100, priority=Priority.PREEMPTIBLE, checkpoint=checkpoint)
    assert field in caught.value.message_dict
    assert not Lease.objects.exists()


def test_api_takes_a_checkpoint_and_names_bad_fields(frozen, bob, nlp, a100, four, api):
    api.force_authenticate(bob)
    body = {
        "card_model": a100.slug,
        "count": 1,
        "duration_minutes": 60,
        "priority": "preemptible",
        "checkpoint": {"signal": "USR2", "seconds": 120, "requeue": True},
    }
    made = api.post("/api/v1/leases/", body, format="json")
    assert made.status_code == 201, made.content
    assert made.json()["checkpoint"] == {
        "signal": "USR2",
        "command": "",
        "seconds": 120,
        "requeue": True,
    }
    bad = api.post(
        "/api/v1/leases/",
        {**body, "checkpoint": {"signal": "USR2", "every": 5}},
        format="json",
    )
    assert bad.status_code == 400 and "every" in bad.content.decode()


def test_the_agent_lists_delivers_and_reports_a_checkpoint(
    frozen, lena, bob, vision, nlp, a100, four, api
):
    job = active(ask(bob, nlp, a100, count=4, priority=Priority.PREEMPTIBLE, checkpoint=SAVE))
    node = four
    token = telemetry.node_token_issue(node=node)
    api.credentials(HTTP_AUTHORIZATION=f"Node {token}")
    assert api.get("/api/v1/checkpoints/").json() == []  # nothing being preempted yet
    ask(lena, vision, a100, count=2, priority=Priority.HIGH)
    due = api.get("/api/v1/checkpoints/").json()
    assert [(d["lease"], d["signal"], d["env_var"], d["devices"]) for d in due] == [
        (job.pk, "USR1", "CUDA_VISIBLE_DEVICES", [0, 1, 2, 3])
    ]
    answer = api.post(f"/api/v1/checkpoints/{job.pk}/", {"ok": True, "detail": "2 procs"})
    assert answer.status_code == 204
    assert job.events.get(kind="checkpoint_delivered").data == {"host": "r4", "ok": True}
    assert api.get("/api/v1/checkpoints/").json() == []  # once per node
    assert api.post(f"/api/v1/checkpoints/{job.pk}/", {"ok": True}).status_code == 404
    api.credentials()
    api.force_authenticate(bob)
    assert api.get("/api/v1/checkpoints/").status_code in (401, 403)


def test_agent_signals_the_processes_on_the_leases_cards(tmp_path: Path):
    marker = tmp_path / "saved"
    script = (
        "import signal, sys, time, pathlib\n"
        f"p = pathlib.Path({str(marker)!r})\n"
        "signal.signal(signal.SIGUSR1, lambda *a: (p.write_text('saved'), sys.exit(0)))\n"
        "print('ready', flush=True)\n"
        "time.sleep(30)\n"
    )
    env = {"PATH": "/usr/bin:/bin", "CUDA_VISIBLE_DEVICES": "2,3"}
    other_env = {"PATH": "/usr/bin:/bin", "CUDA_VISIBLE_DEVICES": "0"}
    job = subprocess.Popen([sys.executable, "-c", script], env=env, stdout=subprocess.PIPE)
    bystander = subprocess.Popen(
        [sys.executable, "-c", script], env=other_env, stdout=subprocess.PIPE
    )
    try:
        assert job.stdout.readline().strip() == b"ready"
        assert bystander.stdout.readline().strip() == b"ready"
        assert agent.processes_using("CUDA_VISIBLE_DEVICES", [3]) == [job.pid]
        ok, detail = agent.deliver_checkpoint(
            {"signal": "USR1", "env_var": "CUDA_VISIBLE_DEVICES", "devices": [3], "command": ""}
        )
        assert ok and "1 process" in detail
        assert job.wait(timeout=10) == 0
        assert marker.read_text() == "saved"
        time.sleep(0.2)
        assert bystander.poll() is None  # another lease's process is left alone
    finally:
        for p in (job, bystander):
            if p.poll() is None:
                p.kill()
                p.wait()


def test_agent_runs_the_command_with_the_leases_devices(tmp_path: Path):
    out = tmp_path / "env"
    ok, detail = agent.deliver_checkpoint(
        {
            "signal": "",
            "command": f'echo "$CUDA_VISIBLE_DEVICES" > {out}',
            "seconds": 5,
            "env_var": "CUDA_VISIBLE_DEVICES",
            "devices": [1, 2],
        }
    )
    assert ok and "exited 0" in detail
    assert out.read_text().strip() == "1,2"


def test_lease_pages_link_the_preempted_and_the_resumed_lease(
    frozen, lena, bob, vision, nlp, a100, four, client
):
    job = active(ask(bob, nlp, a100, count=4, priority=Priority.PREEMPTIBLE, checkpoint=SAVE))
    ask(lena, vision, a100, count=4, priority=Priority.HIGH)
    job.refresh_from_db()
    frozen.move_to(job.preempt_at)
    endings.preemptions_due()
    resumed = Lease.objects.get(resumes=job)
    client.force_login(bob)
    old_page = client.get(f"/leases/{job.pk}/").content.decode()
    assert f'href="/leases/{resumed.pk}/"' in old_page and 'data-note="resumed-by"' in old_page
    assert "SIGUSR1" in old_page
    assert "保存需 900 秒" in old_page  # bob reads the portal in Chinese
    new_page = client.get(f"/leases/{resumed.pk}/").content.decode()
    assert f'href="/leases/{job.pk}/"' in new_page and 'data-note="resumes"' in new_page
    assert "继续被抢占的" in new_page


def test_the_sweep_sends_a_lost_checkpoint_again(
    frozen, lena, bob, vision, nlp, a100, four, sent_tasks
):
    from leasing.lifecycle import tasks as lease_tasks

    job = active(ask(bob, nlp, a100, count=4, priority=Priority.PREEMPTIBLE, checkpoint=SAVE))
    ask(lena, vision, a100, count=4, priority=Priority.HIGH)  # its on-commit send is lost here
    frozen.shift(timedelta(minutes=2))
    sent_tasks.clear()
    done = lease_tasks.sweep()
    assert done["recheckpointed"] == 1
    assert ("leasing.tasks.checkpoint_lease", (job.pk,)) in [(t.name, t.args) for t in sent_tasks]
    provisioning.checkpoint_step(lease_id=job.pk)
    sent_tasks.clear()
    assert lease_tasks.sweep()["recheckpointed"] == 0  # delivered: not sent again
