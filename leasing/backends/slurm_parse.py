"""Reading what Slurm's command-line tools print (22.05 shapes), as pure functions.

Nothing here runs a command or touches the database, so every shape is tested on copies
of real output (tests/fixtures/slurm/).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

# Job states in which an allocation still holds (or is about to hold) its cards.
LIVE_JOB_STATES = frozenset(
    {"PENDING", "CONFIGURING", "RUNNING", "SUSPENDED", "RESIZING", "REQUEUED", "SIGNALING"}
)
# Node state words that mean "no new work here".
DRAINED_FLAGS = frozenset({"DRAIN", "DRAINED", "DRAINING", "MAINT", "RESERVED_MAINT"})
DOWN_WORDS = frozenset({"DOWN", "FAIL", "FAILING", "INVAL", "NOT_RESPONDING", "POWERED_DOWN"})

# One squeue line, in the order of SQUEUE_FORMAT.
SQUEUE_FORMAT = "%i|%j|%u|%T|%N|%b|%l|%S|%e"

_GRES_ITEM = re.compile(
    r"^(?P<name>[^:()]+)(?::(?P<type>[^:()]+))?:(?P<count>\d+)(?:\((?P<extra>[^)]*)\))?$"
)
_GRANTED = re.compile(r"Granted job allocation (\d+)")
_SUBMITTED = re.compile(r"(?:Pending|Submitted) job allocation (\d+)")


@dataclass(frozen=True)
class Gres:
    """One generic resource: ``gpu:a100:2(IDX:0-1)`` → name gpu, type a100, count 2, [0, 1]."""

    name: str
    type: str
    count: int
    indices: tuple[int, ...] = ()


@dataclass
class SlurmNode:
    """A node as ``scontrol show node -d`` describes it."""

    name: str
    state: str
    gres: list[Gres] = field(default_factory=list)
    gres_used: list[Gres] = field(default_factory=list)
    cpus: int | None = None
    memory_mb: int | None = None
    reason: str = ""

    @property
    def state_words(self) -> set[str]:
        """``MIXED+DRAIN`` → {MIXED, DRAIN}; a trailing ``*`` (not responding) is a word too."""
        words = set(self.state.rstrip("*$~#!%@^-").upper().split("+"))
        if self.state.endswith("*"):
            words.add("NOT_RESPONDING")
        return words

    @property
    def availability(self) -> str:
        """'down', 'drained' or 'up', as Cardpool cares: may a new lease go here?"""
        words = self.state_words
        if words & DOWN_WORDS:
            return "down"
        if words & DRAINED_FLAGS:
            return "drained"
        return "up"

    def cards(self, name: str = "gpu") -> list[tuple[int, str]]:
        """(index, GRES type) per card, indices counted in the order ``Gres=`` lists them.

        That is the order slurmd numbers them in (the ``IDX`` it reports) when gres.conf
        lists the types in the same order, which is how the lab and most sites write it.
        """
        cards: list[tuple[int, str]] = []
        for g in self.gres:
            if g.name != name:
                continue
            cards.extend((len(cards), g.type) for _ in range(g.count))
        return cards


@dataclass
class SlurmJob:
    """A job as ``scontrol show job -d`` describes it; ``gres`` holds per-node allocations."""

    job_id: int
    name: str
    user: str
    state: str
    nodes: str
    time_limit_minutes: int | None
    run_time_minutes: int | None = None
    start_time: str = ""
    gres: dict[str, list[Gres]] = field(default_factory=dict)

    @property
    def live(self) -> bool:
        return self.state in LIVE_JOB_STATES


@dataclass(frozen=True)
class QueuedJob:
    """One line of ``squeue -o SQUEUE_FORMAT``."""

    job_id: int
    name: str
    user: str
    state: str
    nodes: str
    tres_per_node: str
    time_limit_minutes: int | None

    @property
    def live(self) -> bool:
        return self.state in LIVE_JOB_STATES


# --- generic shapes ----------------------------------------------------------------------


def parse_records(text: str) -> list[dict[str, str]]:
    """``Key=Value`` records of ``scontrol show``, multi-line or one per line (``-o``).

    Values may hold spaces (``OS=Linux 6.1 #1 SMP``, ``Reason=bad fan [root@…]``): a word
    without ``=`` belongs to the value before it. A key seen twice in a record (``Nodes=``
    under ``JOB_GRES``) keeps both, the later one under ``key#2``.
    """
    records: list[dict[str, str]] = []
    for block in _blocks(text):
        record: dict[str, str] = {}
        last = None
        for word in block.split():
            key, sep, value = word.partition("=")
            if sep and key and last is not None and _continues(record[last], key):
                sep = ""
            if not sep or not key:
                if last is not None:
                    record[last] = f"{record[last]} {word}".strip()
                continue
            n = 1
            name = key
            while name in record:
                n += 1
                name = f"{key}#{n}"
            record[name] = value
            last = name
        if record:
            records.append(record)
    return records


def _blocks(text: str) -> list[str]:
    # A record starts at an unindented line; its further lines are indented (``-o`` prints
    # each record on one unindented line).
    blocks: list[list[str]] = []
    for line in text.splitlines():
        if not line.strip():
            continue
        if not line[0].isspace() or not blocks:
            blocks.append([])
        blocks[-1].append(line)
    return ["\n".join(b) for b in blocks]


def _continues(previous: str, key: str) -> bool:
    # "Reason=bad fan [root@2026-…]" has no '=' inside; a "[" opened and not yet closed
    # means the word is still the reason's text, whatever it looks like.
    return previous.count("[") > previous.count("]")


def parse_index_list(text: str) -> tuple[int, ...]:
    """``0-1,4`` → (0, 1, 4); ``N/A`` or empty → ()."""
    out: list[int] = []
    for part in text.split(","):
        part = part.strip()
        if not part or not part[0].isdigit():
            continue
        lo, _, hi = part.partition("-")
        out.extend(range(int(lo), int(hi or lo) + 1))
    return tuple(out)


def parse_gres(text: str) -> list[Gres]:
    """``gpu:a100:4,gpu:h800:2`` or ``gpu:a100:2(IDX:0-1),gpu:h800:0(IDX:N/A)``.

    Commas inside parentheses (``IDX:0,2``) do not split items. ``(null)`` and ``N/A`` → [].
    """
    text = text.strip()
    if text in ("", "(null)", "N/A", "none"):
        return []
    items: list[str] = []
    depth = 0
    current = ""
    for ch in text:
        if ch == "," and depth == 0:
            items.append(current)
            current = ""
            continue
        depth += ch == "("
        depth -= ch == ")"
        current += ch
    items.append(current)
    out: list[Gres] = []
    for item in items:
        item = item.strip()
        if item.startswith("gres:"):  # squeue's %b spells it gres:gpu:a100:2
            item = item[len("gres:") :]
        m = _GRES_ITEM.match(item)
        if m is None:
            continue
        extra = m["extra"] or ""
        indices = parse_index_list(extra.split("IDX:", 1)[1]) if "IDX:" in extra else ()
        out.append(Gres(m["name"], m["type"] or "", int(m["count"]), indices))
    return out


def parse_time_limit(text: str) -> int | None:
    """Minutes from Slurm's ``[days-]hours:minutes:seconds`` (or ``m:s``); None when unlimited."""
    text = text.strip()
    if not text or text.upper() in ("UNLIMITED", "INFINITE", "NOT_SET", "N/A"):
        return None
    days = 0
    if "-" in text:
        d, text = text.split("-", 1)
        days = int(d)
    parts = [int(p) for p in text.split(":")]
    while len(parts) < 3:
        parts.insert(0, 0)
    hours, minutes, seconds = parts[-3:]
    return days * 1440 + hours * 60 + minutes + (1 if seconds else 0)


def format_time_limit(minutes: int) -> str:
    """Minutes → ``D-HH:MM:00``, which every Slurm tool accepts."""
    days, rest = divmod(max(int(minutes), 1), 1440)
    return f"{days}-{rest // 60:02d}:{rest % 60:02d}:00"


def _user(text: str) -> str:
    return text.split("(", 1)[0]  # "alice(1001)" → "alice"


# --- nodes -------------------------------------------------------------------------------


def parse_nodes(text: str) -> list[SlurmNode]:
    """Nodes of ``scontrol show node -d`` (or ``-o``)."""
    nodes = []
    for r in parse_records(text):
        if "NodeName" not in r:
            continue
        nodes.append(
            SlurmNode(
                name=r["NodeName"],
                state=r.get("State", "UNKNOWN"),
                gres=parse_gres(r.get("Gres", "")),
                gres_used=parse_gres(r.get("GresUsed", "")),
                cpus=_int(r.get("CPUTot")),
                memory_mb=_int(r.get("RealMemory")),
                reason=r.get("Reason", ""),
            )
        )
    return nodes


def _int(text: str | None) -> int | None:
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


# --- jobs --------------------------------------------------------------------------------


def parse_jobs(text: str) -> list[SlurmJob]:
    """Jobs of ``scontrol show job -d``, with the GRES indices each holds per node."""
    jobs = []
    for r in parse_records(text):
        if "JobId" not in r:
            continue
        gres: dict[str, list[Gres]] = {}
        n = 1
        while True:
            # The per-node detail lines: "Nodes=gpu01 CPU_IDs=0 Mem=0 GRES=gpu:a100:2(IDX:0-1)".
            suffix = "" if n == 1 else f"#{n}"
            nodes_key = f"Nodes{suffix}"
            if nodes_key not in r:
                break
            if f"GRES{suffix}" in r:
                for host in expand_hostlist(r[nodes_key]):
                    gres[host] = parse_gres(r[f"GRES{suffix}"])
            n += 1
        jobs.append(
            SlurmJob(
                job_id=int(r["JobId"]),
                name=r.get("JobName", ""),
                user=_user(r.get("UserId", "")),
                state=r.get("JobState", "UNKNOWN"),
                nodes=r.get("NodeList", ""),
                time_limit_minutes=parse_time_limit(r.get("TimeLimit", "")),
                run_time_minutes=parse_time_limit(r.get("RunTime", "")),
                start_time=r.get("StartTime", ""),
                gres=gres,
            )
        )
    return jobs


def parse_squeue(text: str) -> list[QueuedJob]:
    """Lines of ``squeue -h -o SQUEUE_FORMAT``; lines of another shape are skipped."""
    jobs = []
    for line in text.splitlines():
        parts = line.strip().split("|")
        if len(parts) < 7 or not parts[0].isdigit():
            continue
        jobs.append(
            QueuedJob(
                job_id=int(parts[0]),
                name=parts[1],
                user=parts[2],
                state=parts[3],
                nodes=parts[4],
                tres_per_node=parts[5],
                time_limit_minutes=parse_time_limit(parts[6]),
            )
        )
    return jobs


def expand_hostlist(text: str) -> list[str]:
    """``gpu[01-03,07],login1`` → gpu01, gpu02, gpu03, gpu07, login1 (zero padding kept)."""
    hosts: list[str] = []
    for m in re.finditer(r"([^,\[]+)(?:\[([^\]]*)\])?", text.strip()):
        prefix, ranges = m.group(1), m.group(2)
        if ranges is None:
            hosts.append(prefix)
            continue
        for part in ranges.split(","):
            lo, _, hi = part.partition("-")
            width = len(lo)
            for i in range(int(lo), int(hi or lo) + 1):
                hosts.append(f"{prefix}{i:0{width}d}")
    return [h for h in hosts if h]


def lease_id_from_job_name(name: str, prefix: str = "cardpool-") -> int | None:
    """``cardpool-41`` → 41; any other name → None."""
    if not name.startswith(prefix):
        return None
    rest = name[len(prefix) :]
    return int(rest) if rest.isdigit() else None


# --- salloc ------------------------------------------------------------------------------


def parse_salloc(output: str) -> int | None:
    """The job id salloc was granted, or None."""
    m = _GRANTED.search(output)
    return int(m.group(1)) if m else None


PERMANENT_SALLOC_ERRORS = (
    (
        "Invalid user id",
        "Slurm does not know the user {user}; ask an operator to map your account.",
    ),
    ("Invalid account", "The Slurm account is not valid for {user}; ask an operator."),
    (
        "Invalid generic resource",
        "Slurm does not offer {gres} on {node}; the GRES mapping is wrong.",
    ),
    ("Invalid node name", "Slurm does not know node {node}."),
    (
        "Requested node configuration is not available",
        "Node {node} cannot ever hold {gres} in Slurm; the inventory is out of step with Slurm.",
    ),
    ("does not exist or the user entry", "There is no Unix user {user} on the portal host."),
    ("unknown user", "There is no Unix user {user} on the portal host."),
    ("Access/permission denied", "Slurm refused {user} access to that partition or account."),
    ("sudo: a password is required", "The portal may not run salloc as {user} (sudoers rule)."),
)


def classify_salloc_failure(output: str) -> str | None:
    """The message template of a failure that retrying cannot fix, or None (retry it)."""
    for needle, message in PERMANENT_SALLOC_ERRORS:
        if needle.lower() in output.lower():
            return message
    return None
