"""An in-memory Slurm that answers salloc/squeue/scontrol/scancel the way 22.05 prints."""

from __future__ import annotations

from dataclasses import dataclass, field

from leasing.backends.slurm import Result, SlurmCli
from leasing.backends.slurm_parse import format_time_limit, parse_time_limit


@dataclass
class FakeJob:
    job_id: int
    name: str
    user: str
    node: str
    gres_type: str
    indices: list[int]
    limit: int
    state: str = "RUNNING"


@dataclass
class FakeSlurm(SlurmCli):
    """Nodes as {name: [(index, type), …]}; ``calls`` records (tool, args, as_user)."""

    nodes_spec: dict[str, list[tuple[int, str]]] = field(default_factory=dict)
    states: dict[str, str] = field(default_factory=dict)
    users: set[str] = field(default_factory=lambda: {"alice", "bob"})
    jobs: dict[int, FakeJob] = field(default_factory=dict)
    calls: list[tuple] = field(default_factory=list)
    next_id: int = 100
    fail_next: str = ""

    def __post_init__(self):
        super().__init__({"BIN_DIR": "", "CONF": "", "RUN_AS": "runuser", "COMMAND_TIMEOUT": 5})

    def used(self, node: str) -> set[int]:
        return {i for j in self.jobs.values() if j.node == node for i in j.indices}

    def run(self, tool, args, *, as_user=None):
        self.calls.append((tool, list(args), as_user))
        if self.fail_next:
            out, self.fail_next = self.fail_next, ""
            return Result(1, out)
        return getattr(self, f"_{tool}")(args, as_user)

    def _salloc(self, args, user):
        opts = dict(a.lstrip("-").split("=", 1) for a in args if "=" in a)
        if user not in self.users:
            return Result(1, f"runuser: user {user} does not exist or the user entry does not")
        node = opts["nodelist"]
        _, gtype, count = opts["gres"].split(":")
        free = [i for i, t in self.nodes_spec.get(node, []) if t == gtype]
        if not free:
            return Result(
                1,
                "salloc: error: Job submit/allocate failed: Requested node configuration is not available",
            )
        free = [i for i in free if i not in self.used(node)]
        if len(free) < int(count):
            return Result(
                1,
                "salloc: Pending job allocation 1\nsalloc: error: Unable to allocate resources: "
                "Connection timed out",
            )
        self.next_id += 1
        self.jobs[self.next_id] = FakeJob(
            self.next_id,
            opts["job-name"],
            user,
            node,
            gtype,
            free[: int(count)],
            parse_time_limit(opts["time"]),
        )
        return Result(0, f"salloc: Granted job allocation {self.next_id}\n")

    def _squeue(self, args, user):
        names = next((a.split("=", 1)[1].split(",") for a in args if a.startswith("--name=")), None)
        lines = [
            f"{j.job_id}|{j.name}|{j.user}|{j.state}|{j.node}|gres:gpu:{j.gres_type}:"
            f"{len(j.indices)}|{format_time_limit(j.limit)}|2026-12-01T09:00:00|N/A"
            for j in self.jobs.values()
            if names is None or j.name in names
        ]
        return Result(0, "\n".join(lines) + ("\n" if lines else ""))

    def _scontrol(self, args, user):
        if args[:2] == ["show", "job"]:
            job = self.jobs.get(int(args[-1]))
            if job is None:
                return Result(1, "slurm_load_jobs error: Invalid job id specified")
            idx = ",".join(str(i) for i in job.indices)
            return Result(
                0,
                f"JobId={job.job_id} JobName={job.name}\n   UserId={job.user}(1001) GroupId=x(1)\n"
                f"   JobState={job.state} Reason=None\n   RunTime=00:10:00 "
                f"TimeLimit={format_time_limit(job.limit)} TimeMin=N/A\n"
                f"   NodeList={job.node}\n   JOB_GRES=gpu:{job.gres_type}:{len(job.indices)}\n"
                f"     Nodes={job.node} CPU_IDs=0 Mem=0 GRES=gpu:{job.gres_type}:"
                f"{len(job.indices)}(IDX:{idx})\n",
            )
        if args[:2] == ["show", "node"]:
            blocks = []
            for name, cards in self.nodes_spec.items():
                types: dict[str, int] = {}
                for _, t in cards:
                    types[t] = types.get(t, 0) + 1
                gres = ",".join(f"gpu:{t}:{n}" for t, n in types.items())
                blocks.append(
                    f"NodeName={name} Arch=x86_64\n   CPUTot=8\n   Gres={gres}\n"
                    f"   RealMemory=64000\n   State={self.states.get(name, 'IDLE')} Weight=1\n"
                )
            return Result(0, "\n".join(blocks))
        if args[0] == "update":
            opts = dict(a.split("=", 1) for a in args[1:])
            self.jobs[int(opts["JobId"])].limit = parse_time_limit(opts["TimeLimit"])
            return Result(0, "")
        raise AssertionError(args)

    def _scancel(self, args, user):
        for a in args:
            self.jobs.pop(int(a), None)
        return Result(0, "")
