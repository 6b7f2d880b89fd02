"""How each backend starts and stops a session (the live Slurm run is in
tests/e2e/test_sessions_slurm_browser.py): on Slurm a step of the lease's own job, its script
on stdin; with the local backend the node's agent."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone

from leasing.backends import Holding, NodeCards, SessionSpec, TransientBackendError
from leasing.backends.local import LocalBackend
from leasing.backends.slurm import Result, SlurmBackend
from tests.leasing.slurm_fake import FakeSlurm


@dataclass
class StepSlurm(FakeSlurm):
    """The in-memory Slurm, with job steps started by ``spawn`` and listed by ``squeue -s``."""

    step_ids: dict[str, str] = field(default_factory=dict)  # step name -> "job.step"
    spawned: list[tuple] = field(default_factory=list)

    def spawn(self, tool, args, *, as_user, stdin, log):
        self.spawned.append((tool, list(args), as_user, stdin))
        job = next(a.split("=", 1)[1] for a in args if a.startswith("--jobid="))
        name = next(a.split("=", 1)[1] for a in args if a.startswith("--job-name="))
        self.step_ids[name] = f"{job}.{len(self.step_ids)}"
        return 4242

    def _squeue(self, args, user):
        if "-s" in args:
            return Result(0, "".join(f"{sid} {name}\n" for name, sid in self.step_ids.items()))
        return super()._squeue(args, user)

    def _scontrol(self, args, user):
        if args[:2] == ["show", "node"] and len(args) == 3:
            return Result(0, f"NodeName={args[2]} NodeAddr=10.1.2.3 NodeHostName={args[2]}\n")
        return super()._scontrol(args, user)

    def _scancel(self, args, user):
        for a in args:
            if "." in a:
                self.step_ids = {n: s for n, s in self.step_ids.items() if s != a}
        return super()._scancel([a for a in args if "." not in a], user)


def _holding(status="active") -> Holding:
    return Holding(
        lease_id=7,
        username="alice",
        slurm_user="alice",
        status=status,
        card_model_slug="a100",
        devices_env="CUDA_VISIBLE_DEVICES",
        end_at=timezone.now() + timedelta(hours=1),
        nodes=(NodeCards("gpu01", (1, 2)),),
    )


SPEC = SessionSpec(
    session_id=3,
    host="gpu01",
    port=23456,
    script="export JUPYTER_TOKEN=secret-token\nexec jupyter lab\n",
)


def test_a_slurm_session_is_a_step_of_the_leases_job_run_as_the_holder(settings, tmp_path):
    settings.CARDPOOL_SESSIONS = {**settings.CARDPOOL_SESSIONS, "LOG_DIR": str(tmp_path)}
    slurm = StepSlurm(nodes_spec={"gpu01": [(i, "a100") for i in range(4)]})
    backend = SlurmBackend(cli=slurm, config={**slurm.config, **_config()})
    with pytest.raises(TransientBackendError):
        backend.session_start(_holding(), SPEC)  # no job yet
    backend.provision(_holding())
    placement = backend.session_start(_holding(), SPEC)
    [(tool, args, user, stdin)] = slurm.spawned
    job = placement["job_id"]
    assert (tool, user) == ("srun", "alice")
    assert f"--jobid={job}" in args and "--overlap" in args and "--nodelist=gpu01" in args
    assert args[-2:] == ["/bin/bash", "-s"]
    assert "secret-token" not in " ".join(args)  # the token comes on stdin only
    assert stdin.startswith("export CARDPOOL_SESSION_IP=10.1.2.3\n") and "secret-token" in stdin
    assert placement["address"] == "10.1.2.3"
    assert Path(placement["log"]).parent == tmp_path

    # Asked again (a retried task): the step is there, nothing new is started.
    assert backend.session_start(_holding(), SPEC)["step"] == placement["step"]
    assert len(slurm.spawned) == 1

    backend.session_stop(_holding(), placement)
    assert slurm.step_ids == {}
    assert live_jobs(slurm)  # stopping the session keeps the lease's job
    backend.session_stop(_holding(), placement)  # already stopped: no error


def test_the_local_backend_leaves_sessions_to_the_nodes_agent():
    assert LocalBackend().session_start(_holding(), SPEC) == {"by": "agent"}


def _config() -> dict:
    return {
        "IMMEDIATE_SECONDS": 5,
        "JOB_PREFIX": "cardpool-",
        "GRES_NAME": "gpu",
        "GRES_TYPES": {},
        "PARTITION": "",
        "ACCOUNT": "",
        "GRACE_MINUTES": 2,
    }


def live_jobs(slurm) -> list:
    return [j for j in slurm.jobs.values() if j.name == "cardpool-7"]
