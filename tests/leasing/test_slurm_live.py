"""The slurm backend against a real Slurm (the lab: tests/slurm/slurm-lab.sh, or any
cluster with nodes gpu01 (gpu:a100:4,gpu:h800:2) and gpu02 (gpu:a100:2) and Unix users
alice and bob). Skipped, with the reason, where Slurm's client or the cluster is missing.

    LAB_NODES="gpu01:a100=4,h800=2 gpu02:a100=2" bash slurm-lab.sh up
    SLURM_CONF=/tmp/slurmlab/etc/slurm.conf .venv/bin/pytest -m slurm
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import time
from datetime import timedelta

import pytest
from django.core.management import call_command

from inventory.models import Card, Node
from leasing.backends.slurm import SlurmBackend, SlurmCli
from leasing.choices import EndReason, LeaseStatus
from leasing.lifecycle import changes, endings, provisioning
from leasing.lifecycle.reconcile import slurm_reconcile
from tests.factories import CardModelFactory
from tests.leasing.conftest import ask

LAB_CONF = "/tmp/slurmlab/etc/slurm.conf"
CONF = os.environ.get("SLURM_CONF") or (LAB_CONF if os.path.exists(LAB_CONF) else "")


def _why_not() -> str:
    if shutil.which("sinfo") is None:
        return "Slurm's client (sinfo) is not installed; see tests/leasing/test_slurm_live.py"
    env = {**os.environ, **({"SLURM_CONF": CONF} if CONF else {})}
    try:
        out = subprocess.run(
            ["sinfo", "-h", "-N", "-o", "%N"], capture_output=True, text=True, env=env, timeout=10
        )
    except subprocess.TimeoutExpired:
        return "sinfo timed out: is slurmctld up?"
    if out.returncode != 0:
        return f"Slurm is not up ({out.stderr.strip()[:200]}); start the lab: slurm-lab.sh up"
    if not {"gpu01", "gpu02"} <= set(out.stdout.split()):
        return "the cluster lacks nodes gpu01 and gpu02 (LAB_NODES of the module docstring)"
    for user in ("alice", "bob"):
        try:
            pwd.getpwnam(user)
        except KeyError:
            return f"no Unix user {user}: the lab makes its users (slurm-lab.sh up)"
    if os.geteuid() != 0:
        return "needs root (salloc as the holder through runuser)"
    return ""


WHY = _why_not()
pytestmark = [
    pytest.mark.slurm,
    pytest.mark.skipif(bool(WHY), reason=WHY or "-"),
    pytest.mark.django_db(transaction=True),
]


@pytest.fixture
def slurm(settings):
    settings.CARDPOOL = {**settings.CARDPOOL, "BACKEND": "slurm"}
    settings.CARDPOOL_SLURM = {
        **getattr(settings, "CARDPOOL_SLURM", {}),
        "CONF": CONF,
        "RUN_AS": "runuser",
        "GRES_TYPES": {},
    }
    cli = SlurmCli()
    cli.cancel([j.job_id for j in cli.queue() if j.name.startswith("cardpool-")])
    # Slurm's job ids restart with the lab but the test database's lease ids do too:
    # leftovers were cancelled above so a new lease never meets an old job of its id.
    yield cli
    cli.cancel([j.job_id for j in cli.queue() if j.name.startswith("cardpool-")])


@pytest.fixture
def pool(slurm):
    a100 = CardModelFactory(slug="a100-80g-sxm", name="A100")
    h800 = CardModelFactory(slug="h800", name="H800")
    call_command("sync_slurm", "--map", "a100=a100-80g-sxm", "--map", "h800=h800")
    return a100, h800


def _job(cli, lease):
    jobs = [j for j in cli.queue([f"cardpool-{lease.pk}"]) if j.live]
    return cli.job(jobs[0].job_id) if jobs else None


def _gone_within(cli, lease, seconds: float) -> float:
    start = time.monotonic()
    while time.monotonic() - start < seconds:
        if _job(cli, lease) is None:
            return time.monotonic() - start
        time.sleep(0.05)
    raise AssertionError(f"job of lease {lease.pk} still there after {seconds}s")


def test_sync_imports_the_lab_and_is_idempotent(pool, capsys):
    assert Card.objects.filter(node__hostname="gpu01").count() == 6
    assert Card.objects.filter(node__hostname="gpu02").count() == 2
    assert Node.objects.get(hostname="gpu01").labels["backend"] == "slurm"
    call_command("sync_slurm", "--map", "a100=a100-80g-sxm", "--map", "h800=h800")
    assert "0 created, 0 updated, 2 unchanged" in capsys.readouterr().out.splitlines()[-1]


def test_a_lease_is_a_job_of_its_holder_holding_exactly_its_cards(slurm, pool, alice, vision):
    _, h800 = pool
    lease = ask(alice, vision, h800, count=2)
    assert provisioning.provision_step(lease_id=lease.pk)
    lease.refresh_from_db()
    assert lease.status == LeaseStatus.ACTIVE
    job = _job(slurm, lease)
    assert job.user == "alice" and job.state == "RUNNING" and job.nodes == "gpu01"
    assert [(g.type, g.count, g.indices) for g in job.gres["gpu01"]] == [("h800", 2, (4, 5))]
    assert lease.access["nodes"][0]["shell"] == f"srun --jobid={job.job_id} --overlap --pty bash"

    # Nobody outside Cardpool can take those cards now.
    outside = subprocess.run(
        ["runuser", "-u", "bob", "--", "env", f"SLURM_CONF={CONF}", "salloc", "--no-shell",
         "-I2", "--gres=gpu:h800:1", "-t", "5"],
        capture_output=True, text=True,
    )  # fmt: skip
    assert outside.returncode != 0

    # Extend raises the time limit.
    before = job.time_limit_minutes
    changes.lease_extend(lease=lease, user=alice, minutes=60)
    lease.refresh_from_db()
    assert SlurmBackend().extend(provisioning.holding_of(lease)) == 1
    assert _job(slurm, lease).time_limit_minutes >= before + 60

    # Release cancels it within seconds.
    changes.lease_release(lease=lease, user=alice)
    assert provisioning.release_step(lease_id=lease.pk)
    assert _gone_within(slurm, lease, 5) < 5


def test_expiry_cancels_the_job(slurm, pool, alice, vision):
    a100, _ = pool
    lease = ask(alice, vision, a100, count=1)
    assert provisioning.provision_step(lease_id=lease.pk)
    lease.refresh_from_db()
    assert endings.lease_expire(lease_id=lease.pk, now=lease.end_at)
    assert provisioning.release_step(lease_id=lease.pk)
    _gone_within(slurm, lease, 5)


def test_a_job_cancelled_behind_cardpools_back_ends_the_lease(slurm, pool, alice, vision):
    a100, _ = pool
    lease = ask(alice, vision, a100, count=2)
    assert provisioning.provision_step(lease_id=lease.pk)
    slurm.cancel([_job(slurm, lease).job_id])
    _gone_within(slurm, lease, 5)
    done = slurm_reconcile()
    assert done["ended"] == [lease.pk]
    lease.refresh_from_db()
    assert lease.status == LeaseStatus.RELEASING  # the release task finishes it
    assert lease.events.filter(kind=EndReason.ADMIN).exists()


def test_an_orphan_job_is_cancelled(slurm, pool, alice):
    subprocess.run(
        ["runuser", "-u", "alice", "--", "env", f"SLURM_CONF={CONF}", "salloc", "--no-shell",
         "-I5", "--gres=gpu:a100:1", "-t", "5", "--job-name=cardpool-999999"],
        check=True, capture_output=True,
    )  # fmt: skip
    done = slurm_reconcile()
    assert len(done["cancelled"]) == 1


def _devices(cli, lease) -> dict[int, tuple]:
    """Each live job of the lease → the GRES indices it holds (all nodes)."""
    held = {}
    for queued in cli.queue([f"cardpool-{lease.pk}"]):
        if queued.live:
            job = cli.job(queued.job_id)
            held[job.job_id] = tuple(
                i for gres in job.gres.values() for g in gres for i in g.indices
            )
    return held


def test_a_swap_and_a_resize_change_the_slurm_jobs(slurm, pool, alice, ops, vision):
    from leasing.lifecycle import maintenance, resize

    a100, h800 = pool
    # A faulty card: the job moves off it, new job first.
    lease = ask(alice, vision, h800, count=1)
    assert provisioning.provision_step(lease_id=lease.pk)
    ((old_job, (device,)),) = _devices(slurm, lease).items()
    card = Card.objects.get(node__hostname="gpu01", index=device)
    assert maintenance.card_mark_faulty(user=ops, card=card) == "moved"
    assert provisioning.change_step(lease_id=lease.pk)
    lease.refresh_from_db()
    ((job, devices),) = _devices(slurm, lease).items()
    assert job != old_job and device not in devices and len(devices) == 1
    assert lease.access["backend"] == "slurm" and lease.access["job_ids"] == [job]
    assert lease.access["nodes"][0]["devices"] == list(devices)

    # A resize in place: growing keeps the job and adds one; shrinking drops the extra.
    grown = ask(alice, vision, a100, count=1)
    assert provisioning.provision_step(lease_id=grown.pk)
    (first,) = _devices(slurm, grown)
    resize.lease_resize(lease=grown, user=alice, count=2)
    assert provisioning.change_step(lease_id=grown.pk)
    held = _devices(slurm, grown)
    assert first in held and sum(len(d) for d in held.values()) == 2
    grown.refresh_from_db()
    assert sorted(grown.access["job_ids"]) == sorted(held)
    resize.lease_resize(lease=grown, user=alice, count=1)
    assert provisioning.change_step(lease_id=grown.pk)
    held = _devices(slurm, grown)
    assert sum(len(d) for d in held.values()) == 1


def test_preemption_signals_the_job_and_requeues_it(slurm, pool, alice, bob, vision, nlp):
    """A preemptible lease that declared USR1 and requeue: preempted for bob's high-priority
    request, its job's steps get SIGUSR1 through ``scancel --signal`` (the job saves its
    state), the job is cancelled at the grace's end, and a new lease resumes the work."""
    from leasing.choices import Priority
    from leasing.lifecycle.validation import Checkpoint
    from leasing.models import Lease
    from portal.models import Membership

    Membership.objects.filter(user=bob).update(role=Membership.Role.LEAD)  # may ask for high
    _, h800 = pool
    lease = ask(
        alice,
        vision,
        h800,
        count=2,
        duration=timedelta(hours=2),
        priority=Priority.PREEMPTIBLE,
        checkpoint=Checkpoint(signal="USR1", seconds=60, requeue=True),
    )
    assert provisioning.provision_step(lease_id=lease.pk)
    job = _job(slurm, lease)
    marker = f"/tmp/cardpool-checkpoint-{lease.pk}-{os.getpid()}"
    if os.path.exists(marker):
        os.unlink(marker)
    step = subprocess.Popen(
        ["runuser", "-u", "alice", "--", "env", f"SLURM_CONF={CONF}", "srun",
         f"--jobid={job.job_id}", "--overlap", "bash", "-c",
         f'trap "echo saved > {marker}; exit 0" USR1; echo ready; '
         "for i in $(seq 600); do sleep 0.1; done"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    try:
        assert step.stdout.readline().strip() == "ready"
        urgent = ask(bob, nlp, h800, count=2, priority=Priority.HIGH)
        lease.refresh_from_db()
        assert lease.preempt_at is not None and lease.preempted_for_id == urgent.pk

        assert provisioning.checkpoint_step(lease_id=lease.pk)
        assert step.wait(timeout=15) == 0
        with open(marker) as saved:
            assert saved.read().strip() == "saved"
        assert lease.events.get(kind="checkpoint_signal").data["signal"] == "USR1"
        assert _job(slurm, lease) is not None  # the signal does not end the job

        assert endings.preemptions_due(now=lease.preempt_at) == 1
        assert provisioning.release_step(lease_id=lease.pk)
        _gone_within(slurm, lease, 5)
        resumed = Lease.objects.get(resumes=lease)
        assert resumed.status == LeaseStatus.QUEUED and resumed.checkpoint_signal == "USR1"
        assert resumed.user == alice and resumed.count == 2 and resumed.card_model == h800
        urgent.refresh_from_db()
        assert urgent.status == LeaseStatus.PROVISIONING
        assert provisioning.provision_step(lease_id=urgent.pk)
        assert _job(slurm, urgent).user == "bob"
    finally:
        if step.poll() is None:
            step.kill()
        if os.path.exists(marker):
            os.unlink(marker)
