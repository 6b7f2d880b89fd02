"""The ``slurm`` backend: a lease is a Slurm allocation that holds exactly its cards.

Provisioning runs, for each node of the holding,
``salloc --no-shell --immediate=N --nodelist=NODE --gres=gpu:TYPE:COUNT --time=MIN
--job-name=cardpool-<lease id>`` as the holder's Slurm user (through ``sudo -n -u`` or
``runuser -u``, see CARDPOOL_SLURM["RUN_AS"]), so the job is theirs and they attach to it
with ``srun --jobid=… --overlap --pty bash``. The job holds the GRES until it is cancelled;
no one else's job can take those cards meanwhile. Everything else (reading jobs back,
cancelling, raising time limits) runs as the portal's own account, which must be root,
SlurmUser or a Slurm operator.

Every call is idempotent on the lease id: the job name carries it, and an existing live
``cardpool-<id>`` job on a node is reused rather than a second one made.
"""

from __future__ import annotations

import logging
import math
import os
import subprocess
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

from django.conf import settings
from django.utils import timezone

from leasing.backends.base import (
    Backend,
    Holding,
    NodeCards,
    PermanentBackendError,
    SessionSpec,
    TransientBackendError,
)
from leasing.backends.slurm_parse import (
    SQUEUE_FORMAT,
    QueuedJob,
    SlurmJob,
    SlurmNode,
    classify_salloc_failure,
    expand_hostlist,
    format_time_limit,
    parse_jobs,
    parse_nodes,
    parse_salloc,
    parse_squeue,
    parse_time_limit,
)

logger = logging.getLogger(__name__)


def slurm_settings() -> dict:
    """CARDPOOL_SLURM (its defaults are in settings)."""
    return settings.CARDPOOL_SLURM


def parse_gres_types(text: str) -> dict[str, str]:
    """``a100-80g-sxm=a100,h800=h800`` → {card model slug: GRES type}."""
    pairs = (item.split("=", 1) for item in text.split(",") if "=" in item)
    return {slug.strip(): gres.strip() for slug, gres in pairs if slug.strip() and gres.strip()}


@dataclass
class Result:
    """What a command printed (stdout and stderr together) and its exit status."""

    rc: int
    output: str


class SlurmCli:
    """Runs Slurm's client tools, optionally as another user. The one place with subprocess."""

    def __init__(self, config: dict | None = None):
        self.config = config or slurm_settings()

    def _bin(self, tool: str) -> str:
        return os.path.join(self.config["BIN_DIR"], tool) if self.config["BIN_DIR"] else tool

    def argv(self, tool: str, args: list[str], *, as_user: str | None = None) -> list[str]:
        env = [f"SLURM_CONF={self.config['CONF']}"] if self.config["CONF"] else []
        cmd = [self._bin(tool), *args]
        run_as = self.config["RUN_AS"]
        if as_user is None or run_as == "none":
            return cmd
        if run_as == "uid":  # root only: salloc --uid
            return [cmd[0], f"--uid={as_user}", *cmd[1:]]
        if run_as == "runuser":
            return ["runuser", "-u", as_user, "--", "env", *env, *cmd]
        return ["sudo", "-n", "-u", as_user, "--", "env", *env, *cmd]

    def run(self, tool: str, args: list[str], *, as_user: str | None = None) -> Result:
        argv = self.argv(tool, args, as_user=as_user)
        env = dict(os.environ)
        if self.config["CONF"]:
            env["SLURM_CONF"] = self.config["CONF"]
        try:
            done = subprocess.run(  # noqa: S603 - fixed argv, no shell
                argv,
                capture_output=True,
                text=True,
                timeout=self.config["COMMAND_TIMEOUT"],
                env=env,
                check=False,
            )
        except FileNotFoundError as exc:
            raise PermanentBackendError(
                f"{argv[0]} is not installed on the portal host ({exc})."
            ) from exc
        except subprocess.TimeoutExpired as exc:
            raise TransientBackendError(f"{tool} did not answer in time.") from exc
        return Result(done.returncode, (done.stdout or "") + (done.stderr or ""))

    def checked(self, tool: str, args: list[str]) -> str:
        """Run as the portal's account; a non-zero exit is a transient error (controller busy)."""
        result = self.run(tool, args)
        if result.rc != 0:
            raise TransientBackendError(f"{tool} failed: {result.output.strip()[-500:]}")
        return result.output

    # --- reads ---------------------------------------------------------------------------

    def queue(self, names: list[str] | None = None) -> list[QueuedJob]:
        args = ["-h", "-a", "-o", SQUEUE_FORMAT]
        if names:
            args.append(f"--name={','.join(names)}")
        return parse_squeue(self.checked("squeue", args))

    def job(self, job_id: int) -> SlurmJob | None:
        result = self.run("scontrol", ["show", "job", "-d", str(job_id)])
        if result.rc != 0:
            if "Invalid job id" in result.output:
                return None
            raise TransientBackendError(f"scontrol failed: {result.output.strip()[-500:]}")
        jobs = parse_jobs(result.output)
        return jobs[0] if jobs else None

    def nodes(self) -> list[SlurmNode]:
        return parse_nodes(self.checked("scontrol", ["show", "node", "-d"]))

    # --- writes --------------------------------------------------------------------------

    def cancel(self, job_ids: list[int]) -> None:
        if job_ids:
            self.checked("scancel", [str(j) for j in job_ids])

    def signal(self, job_ids: list[int], signal: str) -> None:
        """Send *signal* to the jobs' steps (``scancel --signal``: the holder's ``srun``
        steps; the job itself keeps running)."""
        if job_ids:
            self.checked("scancel", [f"--signal={signal}", *[str(j) for j in job_ids]])

    def steps(self, job_id: int) -> dict[str, str]:
        """{step name: step id ("123.4")} of a job's running steps."""
        out = self.checked("squeue", ["-h", "-s", "-j", str(job_id), "-o", "%i %j"])
        steps = {}
        for line in out.splitlines():
            parts = line.split(None, 1)
            if len(parts) == 2:
                steps[parts[1].strip()] = parts[0]
        return steps

    def node_address(self, hostname: str) -> str:
        """The NodeAddr Slurm reaches *hostname* at (the hostname itself when it says none)."""
        out = self.run("scontrol", ["show", "node", hostname]).output
        for word in out.split():
            if word.startswith("NodeAddr="):
                return word.split("=", 1)[1] or hostname
        return hostname

    def spawn(self, tool: str, args: list[str], *, as_user: str, stdin: str, log: Path) -> int:
        """Start *tool* as *as_user* in its own session, detached from the worker (it outlives
        the task), *stdin* written to it; its output goes to *log*. Returns its pid."""
        _reap()
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8"}
        if self.config["CONF"]:
            env["SLURM_CONF"] = self.config["CONF"]
        log.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "ab") as out:
            try:
                proc = subprocess.Popen(  # noqa: S603 - fixed argv, no shell
                    self.argv(tool, args, as_user=as_user),
                    stdin=subprocess.PIPE,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    env=env,
                    start_new_session=True,
                )
            except FileNotFoundError as exc:
                raise PermanentBackendError(f"{tool} is not installed on the portal host.") from exc
        assert proc.stdin is not None
        proc.stdin.write(stdin.encode())
        proc.stdin.close()
        _children.append(proc)
        return proc.pid

    def set_time_limit(self, job_id: int, minutes: int) -> None:
        self.checked(
            "scontrol", ["update", f"JobId={job_id}", f"TimeLimit={format_time_limit(minutes)}"]
        )


_children: list[subprocess.Popen] = []


def _reap() -> None:
    """Collect spawned processes that have exited (no zombies in a long-lived worker)."""
    _children[:] = [proc for proc in _children if proc.poll() is None]


def gres_type_for(node: NodeCards, card_model_slug: str, config: dict | None = None) -> str:
    """The GRES type of a card model on a node.

    Node.labels["slurm:gres:<slug>"] (written by sync_slurm) wins over
    CARDPOOL_SLURM["GRES_TYPES"]; without either the slug itself is tried.
    """
    config = config or slurm_settings()
    labels = node.labels or {}
    return (
        labels.get(f"slurm:gres:{card_model_slug}")
        or config["GRES_TYPES"].get(card_model_slug)
        or card_model_slug
    )


class SlurmBackend(Backend):
    name = "slurm"

    def __init__(self, cli: SlurmCli | None = None, config: dict | None = None):
        self.config = config or slurm_settings()
        self.cli = cli or SlurmCli(self.config)

    def job_name(self, holding: Holding) -> str:
        return f"{self.config['JOB_PREFIX']}{holding.lease_id}"

    def live_jobs(self, holding: Holding) -> list[QueuedJob]:
        return [j for j in self.cli.queue([self.job_name(holding)]) if j.live]

    # --- interface -----------------------------------------------------------------------

    def provision(self, holding: Holding) -> dict:
        minutes = self._minutes_left(holding)
        user = holding.slurm_user
        existing = self.live_jobs(holding)
        made: list[int] = []
        for place in holding.nodes:
            if any(place.hostname in expand_hostlist(j.nodes) for j in existing):
                continue
            if any(j.nodes == "" and j.state == "PENDING" for j in existing):
                # A salloc of an earlier attempt still waits; let it end before another.
                raise TransientBackendError("An earlier allocation for this lease is pending.")
            try:
                made.append(self._salloc(holding, place, user, minutes))
            except PermanentBackendError:
                self.cli.cancel(made + [j.job_id for j in existing])
                raise
        return self.access(holding, user)

    def release(self, holding: Holding) -> None:
        self.cli.cancel([j.job_id for j in self.live_jobs(holding)])

    def status(self, holding: Holding) -> str:
        jobs = self.live_jobs(holding)
        if not jobs:
            return "released"
        return "active" if all(j.state == "RUNNING" for j in jobs) else "unknown"

    def checkpoint(self, holding: Holding, *, signal: str, command: str) -> dict:
        """``scancel --signal=SIG`` on the lease's jobs; a command runs as the holder in one
        more step of each job (``srun --jobid --overlap``)."""
        jobs = [j.job_id for j in self.live_jobs(holding)]
        if not jobs:
            raise PermanentBackendError("The lease's Slurm jobs are gone; nothing to signal.")
        done: dict = {"via": "slurm", "jobs": jobs}
        if signal:
            self.cli.signal(jobs, signal)
            done["signal"] = signal
        if command:
            for job_id in jobs:
                result = self.cli.run(
                    "srun",
                    [f"--jobid={job_id}", "--overlap", "--nodes=1", "--ntasks=1"]
                    + ["bash", "-c", command],
                    as_user=holding.slurm_user,
                )
                done.setdefault("command_rc", []).append(result.rc)
        return done

    def change(self, holding: Holding) -> dict:
        """Make the lease's jobs hold exactly the holding's cards, and say how to reach them.

        A running job's GRES cannot be changed in Slurm, so a job is kept only while every
        device it holds is still the lease's (a resize that only adds cards keeps it, and a
        job for the extra cards is added); any other job (it holds a swapped-out or dropped
        card, or a node the lease left) is replaced: the new job is taken first, then the
        old one cancelled, so the holder is never without cards. Where the node cannot
        hold both at once (a shrink on a full node), the old job goes first and the new one
        is asked for at once. Idempotent: a second call finds the jobs already matching."""
        minutes = self._minutes_left(holding)
        user = holding.slurm_user
        wanted = {place.hostname: place for place in holding.nodes}
        keep: list[int] = []
        drop: list[int] = []
        have: dict[str, int] = {}
        for queued in self.live_jobs(holding):
            job = self.cli.job(queued.job_id)
            held = {
                host: {i for g in gres for i in g.indices}
                for host, gres in (job.gres if job else {}).items()
            }
            fits = bool(held) and all(
                host in wanted and devices <= set(wanted[host].indices)
                for host, devices in held.items()
            )
            if fits:
                keep.append(queued.job_id)
                for host, devices in held.items():
                    have[host] = have.get(host, 0) + len(devices)
            else:
                drop.append(queued.job_id)
        try:
            self._add_missing(holding, user, minutes, have)
        except TransientBackendError:
            if not drop:
                raise
            logger.info("lease %s: no room beside the old job; replacing it", holding.lease_id)
            self.cli.cancel(drop)
            drop = []
            self._add_missing(holding, user, minutes, have)
        self.cli.cancel(drop)
        return self.access(holding, user)

    def _add_missing(self, holding: Holding, user: str, minutes: int, have: dict) -> None:
        """A job per node for the cards the kept jobs do not hold; all or none."""
        made: list[int] = []
        try:
            for place in holding.nodes:
                missing = len(place.indices) - have.get(place.hostname, 0)
                if missing > 0:
                    made.append(self._salloc(holding, place, user, minutes, count=missing))
        except Exception:
            self.cli.cancel(made)
            raise

    def extend(self, holding: Holding) -> int:
        """Raise each job's time limit to the lease's (new) end plus the grace; returns jobs."""
        changed = 0
        for queued in self.live_jobs(holding):
            job = self.cli.job(queued.job_id)
            if job is None or not job.live:
                continue
            elapsed = self._elapsed_minutes(job)
            left = math.ceil((holding.end_at - timezone.now()) / timedelta(minutes=1))
            wanted = elapsed + max(left, 0) + self.config["GRACE_MINUTES"]
            if job.time_limit_minutes is not None and job.time_limit_minutes >= wanted:
                continue
            self.cli.set_time_limit(job.job_id, wanted)
            changed += 1
        return changed

    # --- sessions ------------------------------------------------------------------------

    def session_start(self, holding: Holding, spec: SessionSpec) -> dict:
        """Run the session as a step of the lease's own job on its node (``srun --jobid
        --overlap``): the job's cards, cgroup and time limit apply, and cancelling the job
        (the lease's release) ends it. The srun client stays on the portal host."""
        job_id = next(
            (
                j.job_id
                for j in self.live_jobs(holding)
                if spec.host in expand_hostlist(j.nodes) and j.state == "RUNNING"
            ),
            None,
        )
        if job_id is None:
            raise TransientBackendError(f"The lease has no running job on {spec.host} yet.")
        name = f"{self.job_name(holding)}-session-{spec.session_id}"
        if name in self.cli.steps(job_id):
            return {"job_id": job_id, "step": name, "address": self.cli.node_address(spec.host)}
        address = self.cli.node_address(spec.host)
        script = f"export CARDPOOL_SESSION_IP={address}\n{spec.script}"
        log = Path(settings.CARDPOOL_SESSIONS["LOG_DIR"]) / f"session-{spec.session_id}.log"
        self.cli.spawn(
            "srun",
            [
                f"--jobid={job_id}",
                "--overlap",
                "--nodes=1",
                "--ntasks=1",
                f"--nodelist={spec.host}",
                f"--job-name={name}",
                "--input=all",
                "/bin/bash",
                "-s",
            ],
            as_user=holding.slurm_user,
            stdin=script,
            log=log,
        )
        return {"job_id": job_id, "step": name, "address": address, "log": str(log)}

    def session_stop(self, holding: Holding, placement: dict) -> None:
        job_id, step = placement.get("job_id"), placement.get("step")
        if not job_id or not step:
            return
        step_id = self.cli.steps(int(job_id)).get(step)
        if step_id:
            self.cli.checked("scancel", [step_id])

    # --- helpers -------------------------------------------------------------------------

    def _minutes_left(self, holding: Holding) -> int:
        left = (holding.end_at - timezone.now()) / timedelta(minutes=1)
        if left <= 0:
            raise PermanentBackendError("The lease ended before its cards could be handed over.")
        # Slurm's own limit is a backstop behind Cardpool's expiry, never ahead of it.
        return math.ceil(left) + self.config["GRACE_MINUTES"]

    def _salloc(
        self, holding: Holding, place: NodeCards, user: str, minutes: int, count: int = 0
    ) -> int:
        gres_type = gres_type_for(place, holding.card_model_slug, self.config)
        gres = f"{self.config['GRES_NAME']}:{gres_type}:{count or len(place.indices)}"
        args = [
            "--no-shell",
            f"--immediate={self.config['IMMEDIATE_SECONDS']}",
            f"--nodelist={place.hostname}",
            f"--gres={gres}",
            f"--time={format_time_limit(minutes)}",
            f"--job-name={self.job_name(holding)}",
        ]
        if self.config["PARTITION"]:
            args.append(f"--partition={self.config['PARTITION']}")
        if self.config["ACCOUNT"]:
            args.append(f"--account={self.config['ACCOUNT']}")
        result = self.cli.run("salloc", args, as_user=user)
        job_id = parse_salloc(result.output)
        if result.rc == 0 and job_id is not None:
            logger.info("lease %s: slurm job %s for %s on %s", holding.lease_id, job_id, user, gres)
            return job_id
        permanent = classify_salloc_failure(result.output)
        if permanent:
            raise PermanentBackendError(permanent.format(user=user, node=place.hostname, gres=gres))
        raise TransientBackendError(
            f"Slurm could not give {gres} on {place.hostname} to {user} now "
            f"(held by a job outside Cardpool?): {result.output.strip()[-300:]}"
        )

    @staticmethod
    def _elapsed_minutes(job: SlurmJob) -> int:
        return job.run_time_minutes or 0

    def access(self, holding: Holding, user: str) -> dict:
        """How to use the cards: the job per node, the devices Slurm gave, how to attach."""
        env_name = holding.devices_env
        nodes = []
        job_ids = []
        for queued in self.live_jobs(holding):
            job = self.cli.job(queued.job_id)
            held = job.gres if job else {}
            job_ids.append(queued.job_id)
            for host in expand_hostlist(queued.nodes):
                devices = sorted(i for g in held.get(host, []) for i in g.indices)
                nodes.append(
                    {
                        "host": host,
                        "job_id": queued.job_id,
                        "devices": devices,
                        "env": {env_name: ",".join(str(i) for i in devices)},
                        "shell": f"srun --jobid={queued.job_id} --overlap --pty bash",
                    }
                )
        return {
            "backend": "slurm",
            "slurm_user": user,
            "job_ids": sorted(job_ids),
            "env_var": env_name,
            "nodes": sorted(nodes, key=lambda n: n["host"]),
        }


__all__ = [
    "SlurmBackend",
    "SlurmCli",
    "gres_type_for",
    "parse_gres_types",
    "parse_time_limit",
    "slurm_settings",
]
