"""Replay the Philly job trace through the real planner on a simulated clock.

Run by hand, no database:

    .venv/bin/python bench/trace_replay.py --table       # the docs/performance.md table
    .venv/bin/python bench/trace_replay.py --vc 11cb48 --nodes 16 --cards-per-node 8
    .venv/bin/python bench/trace_replay.py --jobs 10000 --pool-scale 0.165   # PAI inventory
    .venv/bin/python bench/trace_replay.py --overload    # thousands waiting (``--jobs`` a slice)

``--overload``: every virtual cluster with >= ``--min-jobs`` jobs alone on ``OVERLOAD_ALONE``
nodes, then all of them together (teams sharing the pool) on ``OVERLOAD_TOGETHER`` nodes, by
FIFO, EASY and the portal's policy: the queue grows to thousands, where the planner's cost
shows (``replay CPU``; the portal's bar: at most 2 x EASY's + 10 s, ahead on mean and p95,
its longest wait within 1.5 x EASY's, the ETA target kept; ``overload_verdict``).

Each trace job becomes a lease request: submit time -> request time, duration -> requested
(and actual) duration, num_gpus -> count, cluster -> team; one node for up to 8 cards
(``same_node``), spread across nodes above that. ``--vc`` keeps the jobs of one virtual
cluster (or several, comma-separated: then they are teams sharing the pool and the table
shows fairness). The pool is ``--nodes`` x ``--cards-per-node`` (one interconnect domain
per node), or without ``--nodes`` the Alibaba PAI inventory at ``--pool-scale``.

Policies, on the same jobs and pool, all placing with the real ``planner.place`` (best fit):

* ``fifo``   strict FIFO: start the head of the queue while it fits now, nothing passes it;
* ``easy``   FIFO + EASY backfill, the textbook baseline: the head gets a reservation (the
             earliest start where it fits, on specific cards); any later job that fits now
             around that one reservation starts now;
* ``conservative`` the project's policy before issue 18: every waiting lease gets a
             reservation in submit order (conservative backfill, ``planner.plan_queue``);
* ``portal`` the project's policy now, the real code (``scheduler.queueplan``):
             conservative backfill in the order of ``service_key`` (the team's fair-share
             factor, ``scheduler.fairshare``, recomputed every ``--fair-every`` minutes
             with a ``--half-life``; then virtual submit time = submit + slack by size),
             kept up to date by ``QueuePlan`` as the portal keeps it (``reorder`` at each
             recomputation); where one team waits, backfill around the head alone
             (``scheduler.headfirst``);
* ``portal-before`` the same without fair share (the order before it), run beside
             ``portal`` when two or more teams share the pool, for the fairness figure.

Fairness (two or more teams, equal weights): *unfair starts* is, of all starts while two
or more teams wait, the share that went to a team above its share (cards held over the pool
divided among the teams holding or waiting) while a team below its share had waiting work
that fitted the cards free for that pass (``Fairness``), read two ways: *could run* (a job
the policy ordered behind the one that started, which could have run its whole length on
those cards without taking cards promised to work ordered before it) and *by size* (a job
no larger than the cards free: it counts a short job started into a gap before a
reservation while the team below its share waits only for a long job that would run into
its own team's reservation). Measuring (this, and recording what every waiting job is told
at every pass) costs CPU of its own, left out of ``replay CPU``.
"below share" is the old figure: the worst team's share of its waiting time spent below its
share while another team was above it.

Reclaim (on unless ``--no-reclaim``, as in the portal; ``Reclaim``): with fair share, a team
below its share whose first waiting job is not planned within ``RECLAIM_AFTER`` (5 min) takes cards back
from long work of teams above theirs (``fairshare.reclaim``); the preempted job resumes as a
new job for what it had left plus ``--reclaim-lost`` minutes after ``--grace``, and its wait
counts both waits. The trace has no checkpoints: every job is taken as one that agreed to be
requeued (in the portal only such leases are taken back).

``--depth N``: ``portal`` and ``portal-before`` plan with reservations only for the first N
waiting jobs (``scheduler.bounded.BoundedPlan``); the rest start by backfill or as they reach
the head, and are told the start ``BoundedPlan.tail_estimates`` gives (recomputed every
``TAIL_EVERY``; a newcomer's at once). Without it every waiting job is planned.

``portal`` and ``portal-before`` plan every waiting job, and where every job waiting belongs
to one team, a job that fits now around the holders and the head's reservation starts now
(``scheduler.headfirst.HeadFirstPlan``, EASY inside a team, as the portal's passes do);
``--no-head-first`` keeps every reservation there too (the policy before it).

``conservative`` and ``portal`` run through ``QueuePlan``; ``--check-full`` re-plans the whole
queue with ``planner.plan_queue`` at every pass as well and stops at the first difference.
Events at the same second are applied together (ends, then submits) before one pass.

ETA: each waiting job is told what the portal tells a waiting lease (``scheduler.eta``: the
plan's start plus room for smaller work that may still pass it); the table gives the share
started by the first start told + 15 min (the target: ``ETA_TARGET``) and by the one told an
hour before it started + 15 min.
"""

from __future__ import annotations

import argparse
import csv
import heapq
import math
import os
import statistics
import sys
import time
from collections import Counter, defaultdict
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from leasing.scheduler import fairshare  # noqa: E402
from leasing.scheduler.bounded import BoundedPlan  # noqa: E402
from leasing.scheduler.eta import told_start, virtual_of  # noqa: E402
from leasing.scheduler.headfirst import HeadFirstPlan  # noqa: E402
from leasing.scheduler.planner import (  # noqa: E402
    CardSlot,
    Request,
    Timeline,
    earliest,
    place,
    plan_queue,
)
from leasing.scheduler.queueplan import (  # noqa: E402
    SLACK_CAP,
    SLACK_PER_CARD_HOUR,
    QueuePlan,
    service_key,
)

# the shared data beside the checkout; CARDPOOL_BENCH_DATA for a checkout elsewhere
DATA = Path(
    os.environ.get("CARDPOOL_BENCH_DATA", Path(__file__).resolve().parents[2] / "shared/data")
)
TRACE = DATA / "traces/philly-jobs.csv"
MACHINES = DATA / "inventory/alibaba-pai-machines.csv"
SAME_NODE_MAX = 8
NEVER = datetime.max.replace(tzinfo=UTC)
POLICIES = ("fifo", "easy", "conservative", "portal")
# the portal's order before fair share (priority class, then virtual submit time): the
# "before" figure beside the portal's fairness, run with it when two or more teams share
BEFORE = "portal-before"
NORMAL_RANK = 100


@dataclass
class Job:
    id: int
    submit: datetime
    duration: timedelta
    count: int
    team: str
    same_node: bool
    start: datetime | None = None
    first_estimate: datetime | None = None
    cards: tuple[int, ...] = ()
    # (when, estimated start) each time the plan's estimate for it changed while it waited
    estimates: list[tuple[datetime, datetime | None]] | None = None
    cards_now: tuple[int, ...] = ()  # the cards it took, the pass it started (``Fairness``)
    # --reclaim: the period it holds its cards in the plan's timeline, when it started last,
    # the job it resumes (a preempted job's remaining work) and the waits of its resumptions
    held_for: tuple[datetime, datetime] | None = None
    resumes: Job | None = None
    resumed_wait: float = 0.0
    started_now: datetime | None = None

    def request(self, now: datetime) -> Request:
        return Request(self.id, self.count, self.duration, max(self.submit, now), self.same_node)


def load_rows(vcs: list[str] | None, n: int | None) -> list[tuple[datetime, int, int, str]]:
    with TRACE.open() as f:
        rows = [
            (
                datetime.fromisoformat(r["timestamp"]).replace(tzinfo=UTC),
                int(float(r["duration"])),
                int(r["num_gpus"]),
                r["cluster"],
            )
            for r in csv.DictReader(f)
            if not vcs or r["cluster"] in vcs
        ]
    rows.sort(key=lambda r: r[0])  # the file is not in submit order; sort is stable
    return rows[:n] if n else rows


def vc_sizes() -> Counter:
    with TRACE.open() as f:
        return Counter(r["cluster"] for r in csv.DictReader(f))


def grid_pool(nodes: int, per_node: int) -> list[CardSlot]:
    return [
        CardSlot(n * per_node + i + 1, n + 1, n + 1) for n in range(nodes) for i in range(per_node)
    ]


def pai_pool(scale: float) -> list[CardSlot]:
    by_type: dict[str, list[int]] = defaultdict(list)
    with MACHINES.open() as f:
        for r in csv.DictReader(f):
            if int(r["cap_gpu"]) > 0:
                by_type[r["gpu_type"]].append(int(r["cap_gpu"]))
    cards: list[CardSlot] = []
    node_id = 0
    for gpu_type in sorted(by_type):
        machines = by_type[gpu_type]
        keep = max(1, round(len(machines) * scale)) if scale < 1 else len(machines)
        for cap in machines[:keep]:
            node_id += 1
            cards.extend(CardSlot(len(cards) + 1, node_id, node_id) for _ in range(cap))
    return cards


def make_jobs(rows, cards: list[CardSlot]) -> tuple[list[Job], int]:
    pool = len(cards)
    max_node = max(Counter(c.node_id for c in cards).values())
    jobs, dropped = [], 0
    for submit, dur, count, team in rows:
        same_node = count <= SAME_NODE_MAX
        if count > pool or (same_node and count > max_node) or dur <= 0:
            dropped += 1  # can never fit in this pool (or runs for no time at all)
            continue
        jobs.append(Job(len(jobs) + 1, submit, timedelta(seconds=dur), count, team, same_node))
    return jobs, dropped


class Fifo:
    """Strict FIFO, and with ``easy``, EASY backfill around the head's one reservation."""

    def __init__(self, cards, easy: bool):
        self.cards, self.easy, self.queue = cards, easy, []
        # what the last pass promised (for ``Fairness``): card -> [(start, order)]
        self.promises: dict[int, list] = defaultdict(list)

    def order_of(self, job):
        return job.id  # submit order (jobs are numbered in it)

    def promised(self, card_id):
        return self.promises.get(card_id, ())

    def step(self, now, new, running):
        self.queue.extend(new)
        self.promises = defaultdict(list)
        out = self._step(now, running)
        for job, chosen in out:
            for c in chosen:
                self.promises[c].append((now, job.id))
        return out

    def _step(self, now, running):
        timeline = Timeline(busy=defaultdict(list, {c: [p] for c, p in running.items()}))
        idle = len(self.cards) - len(running)
        out = []
        while self.queue and self.queue[0].count <= idle:
            job = self.queue[0]
            chosen = place(
                self.cards, timeline, job.count, now, now + job.duration, same_node=job.same_node
            )
            if chosen is None:
                break
            self.queue.pop(0)
            out.append((job, chosen))
            idle -= job.count
            for c in chosen:
                timeline.add(c, now, now + job.duration)
        if not self.easy or len(self.queue) < 2 or idle == 0:
            return out
        head = self.queue[0]
        shadow = earliest(self.cards, timeline, head.request(now))
        if shadow.start is not None:
            for c in shadow.card_ids:
                timeline.add(c, shadow.start, shadow.start + head.duration)
                self.promises[c].append((shadow.start, head.id))
        started = set()
        for job in self.queue[1:]:
            if job.count > idle:
                continue
            chosen = place(
                self.cards, timeline, job.count, now, now + job.duration, same_node=job.same_node
            )
            if chosen is not None:
                out.append((job, chosen))
                started.add(job.id)
                idle -= job.count
                for c in chosen:
                    timeline.add(c, now, now + job.duration)
                if idle == 0:
                    break
        if started:
            self.queue = [j for j in self.queue if j.id not in started]
        return out


class Planned:
    """Conservative backfill through ``QueuePlan`` in FIFO or the portal's order."""

    def __init__(
        self, cards, portal: bool, check_full: bool, per_card_hour, cap, start, fair=None,
        depth=None, head_first=False,
    ):  # fmt: skip
        if depth and portal:
            self.plan = BoundedPlan(cards, Timeline(), now=start, depth=depth)
        elif portal and head_first:
            self.plan = HeadFirstPlan(
                cards, Timeline(), now=start, team_of=lambda i: self.jobs[i].team
            )
        else:
            self.plan = QueuePlan(cards, Timeline(), now=start)
        self.tail_told: dict[int, datetime] = {}  # a tail job's start told (BoundedPlan)
        self.tail_at = None  # when the tail's starts were last worked out
        # the replay's own bookkeeping of what every waiting job is told at every pass (the
        # portal works a told start out when it is read or moves): left out of replay CPU
        self.tell_cpu = 0.0
        self.portal, self.check_full = portal, check_full
        self.per_card_hour, self.cap = per_card_hour, cap
        self.jobs: dict[int, Job] = {}
        self.fair = fair  # FairShare, or None: no fair share
        self.due_keys: dict[int, tuple] = {}  # the keys of those the last pass started
        self._promises = None  # card -> [(start, key)], built when ``Fairness`` asks
        self._by_id = None
        self._due: dict[int, tuple] = {}

    def order_of(self, job):
        """The key *job* waits (or started) under in the plan."""
        if job.id in self.due_keys:
            return self.due_keys[job.id]
        entry = self._entries().get(job.id)
        return None if entry is None else entry.key

    def promised(self, card_id):
        return self._promised().get(card_id, ())

    def _entries(self):
        if self._by_id is None:
            everyone = self.plan.entries + getattr(self.plan, "tail", [])
            self._by_id = {e.request.lease_id: e for e in everyone}
        return self._by_id

    def _promised(self):
        if self._promises is None:
            out = defaultdict(list)
            for e in self.plan.entries:
                if e.decision.start is not None:
                    for c in e.decision.card_ids:
                        out[c].append((e.decision.start, e.key))
            for lease_id, key in self.due_keys.items():
                job = self.jobs[lease_id]
                for c in job.cards_now:
                    out[c].append((job.started_now, key))
            self._promises = out
        return self._promises

    def key(self, job: Job):
        if not self.portal:
            return (-NORMAL_RANK, -fairshare.NO_USE, job.submit, job.id)  # KEY_FIELDS
        return service_key(
            rank=NORMAL_RANK,
            submitted_at=job.submit,
            duration=job.duration,
            count=job.count,
            lease_id=job.id,
            fair=self.fair.factor(job.team) if self.fair else fairshare.NO_USE,
            per_card_hour=self.per_card_hour,
            cap=self.cap,
        )

    def step(self, now, new, running):
        out = self._step(now, new, running)
        self.due_keys, self._promises, self._by_id = {}, None, None
        for job, chosen in out:
            self.due_keys[job.id] = self._due[job.id]
            job.cards_now, job.started_now = chosen, now
        return out

    def _step(self, now, new, running):
        plan = self.plan
        if self.fair is not None and self.fair.recompute(now):
            # the recomputation falls between the last pass and this one, when nothing
            # started or ended: the plan takes the new keys now (``advance`` then starts
            # those whose start has come)
            plan.reorder(lambda r: self.key(self.jobs[r.lease_id]), now=now)
        due = plan.advance(now)
        joined = []
        for job in new:
            self.jobs[job.id] = job
            first = plan.add(self.key(job), job.request(now))[0]
            job.first_estimate = self.told(first, now)
            joined.append(first)
        due += plan.advance(now)
        self.tell(now, joined)
        if self.check_full:
            self.compare(now, due, running)
        self._due = {e.request.lease_id: e.key for e in due}
        for e in due:  # the period each holds its cards, as the plan's timeline has it
            start = e.decision.start
            self.jobs[e.request.lease_id].held_for = (start, start + e.request.duration)
        return [(self.jobs[e.request.lease_id], e.decision.card_ids) for e in due]

    def tell(self, now, joined, again=False):
        """Record what each waiting job is told now (the portal's rule); *again*: the plan
        changed later in the same pass (a reclaim), what the holders see is this."""
        plan = self.plan
        began = time.process_time()
        told = [(entry, self.told(entry, now)) for entry in plan.entries]
        self.tell_cpu += time.process_time() - began
        if isinstance(plan, BoundedPlan):
            if again:
                self.tail_at = None
            told += self.tail_starts(now, joined)  # the portal's own work: counted
        began = time.process_time()
        for entry, told_now in told:
            job = self.jobs[entry.request.lease_id]
            if job.submit == now and (job.first_estimate is None or again):
                job.first_estimate = told_now
            if job.estimates is None:
                job.estimates = [(now, told_now)]
            elif job.estimates[-1][1] != told_now:
                if again and job.estimates[-1][0] == now:
                    job.estimates[-1] = (now, told_now)
                else:
                    job.estimates.append((now, told_now))
        self.tell_cpu += time.process_time() - began

    def told(self, entry, now, start=None):
        """What the portal tells a waiting job (``eta.told_start``) planned to start at
        *start* (default: its decision's): with fair share, room for the work of teams ahead
        of its team (``fairshare.ahead``)."""
        ahead = 0.0
        if self.fair is not None:
            ahead = self.fair.ahead.get(self.jobs[entry.request.lease_id].team, 0.0)
        start = entry.decision.start if start is None else start
        return told_start(start, virtual_at=virtual_of(entry.key), now=now, ahead=ahead)

    def tail_starts(self, now, joined):
        """(entry, start told) for the jobs of ``BoundedPlan``'s tail: all of them every
        ``TAIL_EVERY``, else those that joined now (the others keep theirs)."""
        plan = self.plan
        if self.tail_at is None or now - self.tail_at >= TAIL_EVERY:
            self.tail_at = now
            self.tail_told = {
                e.request.lease_id: self.told(e, now, start)
                for e, start in plan.tail_estimates(now)
            }
        else:
            ids = {e.request.lease_id for e in joined if e.decision.start is None}
            for e in plan.tail:
                if e.request.lease_id in ids:
                    start = plan.tail_estimate(e.request.lease_id, now)
                    self.tail_told[e.request.lease_id] = self.told(e, now, start)
        return [(e, self.tail_told.get(e.request.lease_id)) for e in plan.tail]

    def compare(self, now, due, running):
        """The full planner on the same picture must decide exactly what the plan holds: the
        leases started now (*due*) start at this moment and hold their cards from it."""
        assert all(e.decision.start == now for e in due), now
        waiting = sorted(((e.key, e.request) for e in self.plan.entries), key=lambda kr: kr[0])
        timeline = Timeline(busy=defaultdict(list, {c: [p] for c, p in running.items()}))
        for e in due:
            for c in e.decision.card_ids:
                timeline.add(c, now, now + e.request.duration)
        requests = [
            Request(r.lease_id, r.count, r.duration, max(r.not_before, now), r.same_node)
            for _k, r in waiting
        ]
        full = plan_queue(self.plan.cards, timeline, requests)
        mine = {e.request.lease_id: e.decision for e in self.plan.entries}
        for d in full:
            m = mine[d.lease_id]
            assert (d.start, d.card_ids) == (m.start, m.card_ids), (now, d, m)


class FairShare:
    """The portal's fair share in the replay: the teams' use kept by ``fairshare.Ledger``
    (one card model: every card-hour weighs the same), the factors recomputed by
    ``fairshare.factors`` at the fixed times ``fairshare.due`` gives (equal weights), and
    with them each team's work ahead (``fairshare.ahead``: what the start told counts)."""

    def __init__(self, teams, half_life: timedelta, every: timedelta, start: datetime, pool):
        self.ledger = fairshare.Ledger(half_life, start)
        self.weights = {t: 1.0 for t in teams}
        self.every, self.last, self.pool = every, None, pool
        self.factors: dict[str, float] = {}
        self.ahead: dict[str, float] = {}

    def factor(self, team) -> float:
        return self.factors.get(team, fairshare.NO_USE)

    def recompute(self, now: datetime) -> bool:
        """At a fixed time: the factors now; True when one changed."""
        if not fairshare.due(self.last, now, self.every):
            return False
        self.last = now
        self.ledger.move(now)
        found = fairshare.factors(self.ledger.use, self.weights)
        self.ahead = fairshare.ahead(self.ledger.demand(now, self.pool), self.weights)
        changed, self.factors = found != self.factors, found
        return changed


class Fairness:
    """``unfair_starts``: of all starts while two or more teams wait, those that went to a
    team above its share while a team below its share had a waiting job that fitted the cards
    free for that pass (see the module). Two readings of "fitted":

    * ``unfair`` (by size): a waiting job no larger than the cards free before the pass;
    * ``unfair_fit`` (work that could run): a waiting job the policy had ordered behind the
      one that started, which could have started instead on the cards free before the pass
      and run its whole length there without taking cards the policy had promised to work it
      ordered before it (``could_start``). A short job started into a gap before a
      reservation, while the team below its share waits only for a long job that would run
      into its own team's reservation, is not counted: the policy served that team first.
    """

    def __init__(self, pool: int, cards: list[CardSlot]):
        self.pool = pool
        self.node_of = {c.card_id: c.node_id for c in cards}
        self.sizes: dict[str, Counter] = defaultdict(Counter)  # team -> waiting job sizes
        self.jobs: dict[str, dict[int, Job]] = defaultdict(dict)  # team -> waiting jobs
        self.starts = self.unfair = self.unfair_fit = 0
        self.cpu = 0.0  # the measuring's own CPU time (left out of the replay's)

    def join(self, job: Job) -> None:
        self.sizes[job.team][job.count] += 1
        self.jobs[job.team][job.id] = job

    def passed(self, started: list, held: Counter, idle: int, runner, running, now) -> None:
        """A pass started *started* (in order) with *idle* cards free before it (those not in
        *running*); *held*: the cards each team held before the pass; *runner*: the policy
        (its order and promises, ``order_of`` and ``promised``)."""
        waiting = {t for t, sizes in self.sizes.items() if any(sizes.values())}
        if len(waiting) < 2 or not started:
            for job, _cards in started:
                self._leave(job)
            return
        began = time.process_time()
        free = None
        held = Counter(held)
        for job, _cards in started:
            active = waiting | {t for t, n in held.items() if n > 0}
            share = self.pool / len(active)
            self.starts += 1
            below = [
                t
                for t in waiting
                if t != job.team
                and held[t] < share
                and min((c for c, n in self.sizes[t].items() if n), default=idle + 1) <= idle
            ]
            if held[job.team] > share and below:
                self.unfair += 1
                if free is None:
                    free = {c for c in self.node_of if c not in running}
                if any(
                    self.could_start(other, job, runner, free, now)
                    for t in below
                    for other in sorted(self.jobs[t].values(), key=_by_length)
                    if other.count <= idle
                ):
                    self.unfair_fit += 1
            self._leave(job)
            held[job.team] += job.count
            waiting = {t for t, sizes in self.sizes.items() if any(sizes.values())}
        self.cpu += time.process_time() - began

    def could_start(self, job: Job, instead: Job, runner, free: set, now) -> bool:
        """Whether waiting *job* could have started now in place of *instead* (see the class):
        ordered behind it, and on cards of *free* that no work ordered before it (but
        *instead*) was promised before its end."""
        order, theirs = runner.order_of(job), runner.order_of(instead)
        if order is None or theirs is None or order <= theirs:
            return False
        end = now + job.duration
        usable = [
            c
            for c in free
            if not any(start < end and o < order and o != theirs for start, o in runner.promised(c))
        ]
        if not job.same_node:
            return len(usable) >= job.count
        return any(n >= job.count for n in Counter(self.node_of[c] for c in usable).values())

    def _leave(self, job: Job) -> None:
        self.sizes[job.team][job.count] -= 1
        self.jobs[job.team].pop(job.id, None)

    def figure(self) -> float | None:
        return self.unfair / self.starts if self.starts else None

    def figure_fit(self) -> float | None:
        return self.unfair_fit / self.starts if self.starts else None


class Reclaim:
    """``--reclaim``: fair share's reclaim in the replay, the rule the portal's queue pass
    runs (``fairshare.reclaim``, called by ``preemption.preemption_plan``). After each pass,
    each team below its share whose first waiting job (service order) is not planned to start
    within ``RECLAIM_AFTER`` takes cards back from teams above theirs: the chosen jobs give
    their cards back after ``--grace`` minutes (the plan's timeline has them free from then at
    once, and the queue is planned again, as a changed picture does in the portal), and
    their remaining work, with ``--reclaim-lost`` minutes of work lost since their last
    checkpoint, joins the queue again then (a lease's ``requeue``). A team is made room for
    once at a time (the portal's "already being made room for")."""

    def __init__(self, runner, pool: int, grace: timedelta, lost: timedelta, next_id: int):
        self.runner, self.pool, self.grace, self.lost = runner, pool, grace, lost
        self.next_id = next_id
        self.cut: dict[int, tuple[datetime, datetime, str]] = {}  # job -> (at, planned end, for)
        self.preempted = 0

    def stale(self, job_id: int, at: datetime) -> bool:
        """Whether an end popped at *at* is a preempted job's old planned end."""
        cut = self.cut.get(job_id)
        return cut is not None and cut[0] != at

    def resumed(self, job: Job, at: datetime) -> Job | None:
        """The job that resumes *job* when it gives its cards back at *at* (None: it ended)."""
        cut = self.cut.get(job.id)
        if cut is None or cut[0] != at:
            return None
        self.next_id += 1
        return Job(
            id=self.next_id,
            submit=at,
            duration=cut[1] - at + self.lost,
            count=job.count,
            team=job.team,
            same_node=job.same_node,
            resumes=job.resumes or job,
        )

    def step(self, now: datetime, held: Counter, running_jobs: dict[int, Job], running) -> list:
        """Mark the jobs that give cards back now (see the class); returns them."""
        plan = self.runner.plan
        giving = Counter()
        pending = set()
        for jid, (at, _end, team) in self.cut.items():
            if at > now:
                giving[self.runner.jobs[jid].team] += self.runner.jobs[jid].count
                pending.add(team)
        have = Counter({t: held[t] - giving[t] for t in held})
        first: dict[str, object] = {}
        for entry in [*plan.entries, *getattr(plan, "tail", [])]:
            team = self.runner.jobs[entry.request.lease_id].team
            first.setdefault(team, entry)
        idle = self.pool - len(running)
        weights = self.runner.fair.weights
        marked = []
        for team, entry in first.items():
            start = entry.decision.start
            if team in pending or (start is not None and start <= now + fairshare.RECLAIM_AFTER):
                continue
            victims = fairshare.reclaim(
                team=team,
                need=entry.request.count - idle,
                pool=self.pool,
                held=have,
                weights=weights,
                waiting=first,
                holdings=[
                    fairshare.Holding(j.id, j.team, j.count, *j.held_for)
                    for j in running_jobs.values()
                    if j.id not in self.cut
                ],
                now=now,
            )
            for holding in victims:
                job = running_jobs[holding.lease_id]
                start, end = job.held_for
                at = now + self.grace
                for c in job.cards:
                    plan.timeline.remove(c, start, end)
                    plan.timeline.add(c, start, at)
                    running[c] = (start, at)
                job.held_for = (start, at)
                self.cut[job.id] = (at, end, team)
                have[job.team] -= job.count
                marked.append(job)
            if victims:
                pending.add(team)
        if marked:
            self.preempted += len(marked)
            plan.now = now
            plan.timeline.prune(now)
            everyone = [*plan.entries, *getattr(plan, "tail", [])]
            plan.rebuild([(e.key, e.request) for e in everyone])
            self.runner._by_id = self.runner._promises = None
            self.runner.tell(now, [], again=True)
        return marked


def _by_length(job: Job):
    return (job.duration, job.id)


def replay(jobs: list[Job], cards: list[CardSlot], policy: str, args) -> dict:
    for job in jobs:
        job.start, job.first_estimate, job.cards, job.estimates = None, None, (), None
        job.cards_now, job.started_now, job.held_for, job.resumed_wait = (), None, None, 0.0
    pool = len(cards)
    node_of = {c.card_id: c.node_id for c in cards}
    if policy in ("fifo", "easy"):
        runner = Fifo(cards, easy=policy == "easy")
    else:
        teams = sorted({j.team for j in jobs})
        fair = None
        if policy == "portal" and len(teams) > 1:
            fair = FairShare(
                teams, timedelta(hours=args.half_life), timedelta(minutes=args.fair_every),
                jobs[0].submit, len(cards),
            )  # fmt: skip
        runner = Planned(
            cards,
            portal=policy in ("portal", BEFORE),
            check_full=args.check_full,
            per_card_hour=timedelta(minutes=args.slack_per_card_hour),
            cap=timedelta(hours=args.slack_cap),
            start=jobs[0].submit,
            fair=fair,
            depth=args.depth,
            head_first=not getattr(args, "no_head_first", False),
        )
    ledger = runner.fair.ledger if getattr(runner, "fair", None) else None
    reclaim = None
    if not getattr(args, "no_reclaim", False) and getattr(runner, "fair", None) is not None:
        reclaim = Reclaim(
            runner, pool, timedelta(minutes=args.grace), timedelta(minutes=args.reclaim_lost),
            max(j.id for j in jobs),
        )  # fmt: skip
    by_id = {j.id: j for j in jobs}
    resumed: list[Job] = []  # the jobs that resume preempted ones (--reclaim)
    running_jobs: dict[int, Job] = {}
    fairness = Fairness(pool, cards)
    teams = sorted({j.team for j in jobs})
    running: dict[int, tuple[datetime, datetime]] = {}  # card -> the period it is busy
    held: Counter = Counter()  # team -> cards held now
    waiting: Counter = Counter()  # team -> jobs waiting now
    deprived: Counter = Counter()  # team -> seconds below its fair share while others above
    waited_time: Counter = Counter()  # team -> seconds with work waiting
    ends: list[tuple[datetime, int]] = []
    passes = i = 0
    last = jobs[0].submit
    t_wall, t_cpu = time.perf_counter(), time.process_time()

    while i < len(jobs) or ends:
        now = min(jobs[i].submit if i < len(jobs) else NEVER, ends[0][0] if ends else NEVER)
        if len(teams) > 1:
            span = (now - last).total_seconds()
            active = [t for t in teams if held[t] or waiting[t]]
            share = pool / len(active) if active else pool
            over = any(held[t] > share for t in active)
            for t in active:
                if waiting[t]:
                    waited_time[t] += span
                    if held[t] < share and over:
                        deprived[t] += span
        last = now
        new = []
        while ends and ends[0][0] == now:
            _, jid = heapq.heappop(ends)
            if reclaim is not None and reclaim.stale(jid, now):
                continue  # the planned end of a job preempted before it
            job = by_id[jid]
            del running_jobs[jid]
            held[job.team] -= job.count
            if ledger is not None:
                ledger.hold(job.team, -job.count, now)
            for c in job.cards:
                del running[c]
            again = reclaim.resumed(job, now) if reclaim is not None else None
            if again is not None:
                by_id[again.id] = again
                resumed.append(again)
                new.append(again)
                waiting[again.team] += 1
                fairness.join(again)
                if ledger is not None:
                    ledger.ask(again.team, again.count * again.duration / HOUR, now)
        while i < len(jobs) and jobs[i].submit == now:
            new.append(jobs[i])
            waiting[jobs[i].team] += 1
            fairness.join(jobs[i])
            if ledger is not None:
                ledger.ask(jobs[i].team, jobs[i].count * jobs[i].duration / HOUR, now)
            i += 1
        passes += 1
        arrivals = new
        while True:
            idle_before, held_before = pool - len(running), Counter(held)
            started = runner.step(now, arrivals, running)
            fairness.passed(started, held_before, idle_before, runner, running, now)
            for job, chosen in started:
                if ledger is not None:
                    ledger.hold(job.team, job.count, now)
                job.start, job.cards = now, tuple(chosen)
                if job.resumes is not None:
                    job.resumes.resumed_wait += (now - job.submit).total_seconds()
                end = now + job.duration
                waiting[job.team] -= 1
                held[job.team] += job.count
                running_jobs[job.id] = job
                for c in job.cards:
                    assert c not in running, (c, job)
                    running[c] = (now, end)
                heapq.heappush(ends, (end, job.id))
            marked = reclaim.step(now, held, running_jobs, running) if reclaim else []
            for job in marked:
                heapq.heappush(ends, (job.held_for[1], job.id))
            if not marked:
                break
            # the queue was planned again around the victims' new ends: a lease that can
            # start now does, in this pass (as the portal's pass plans after marking them)
            arrivals = []
    measuring = fairness.cpu + getattr(runner, "tell_cpu", 0.0)
    wall, cpu = time.perf_counter() - t_wall, time.process_time() - t_cpu - measuring

    # Double allocation: no card may have overlapping busy periods (a preempted job's end
    # where it gave its cards back).
    per_card = defaultdict(list)
    for job in [*jobs, *resumed]:
        cut = reclaim.cut.get(job.id) if reclaim is not None else None
        for c in job.cards:
            per_card[c].append((job.start, cut[0] if cut else job.start + job.duration))
    double = 0
    for periods in per_card.values():
        periods.sort()
        double += sum(1 for a, b in zip(periods, periods[1:], strict=False) if b[0] < a[1])
    for job in [*jobs, *resumed]:
        assert job.start is not None and len(set(job.cards)) == job.count, job
        if job.same_node:
            assert len({node_of[c] for c in job.cards}) == 1, job

    # a preempted job waits until it started first plus each time it waited to resume
    waits = sorted((j.start - j.submit).total_seconds() + j.resumed_wait for j in jobs)
    first = jobs[0].submit
    end_all = max(j.start + j.duration for j in [*jobs, *resumed])
    makespan = (end_all - first).total_seconds()
    busy = sum(j.duration.total_seconds() * j.count for j in jobs)
    # ETA accuracy: the first estimate a waiting job was given vs when it started
    estimated = [j for j in jobs if j.first_estimate is not None and j.start > j.submit]
    late = sorted((j.start - j.first_estimate).total_seconds() for j in estimated)
    # ETA kept within the grace: by the first estimate + 15 min, and by the estimate it was
    # given one hour before it started + 15 min (the first one for a job that waited less)
    kept_first = sum(1 for x in late if x <= ETA_GRACE.total_seconds())
    kept_1h = sum(
        1 for j in estimated if j.start <= _estimate_before(j, j.start - HOUR) + ETA_GRACE
    )
    return {
        "policy": policy,
        "jobs": len(jobs),
        "mean": statistics.fmean(waits),
        "median": waits[len(waits) // 2],
        "p95": pct(waits, 0.95),
        "max": waits[-1],
        "waited": sum(1 for w in waits if w > 0),
        "util": busy / (pool * makespan),
        "eta_n": len(estimated),
        "eta_exact": sum(1 for x in late if x == 0) / len(late) if late else None,
        "eta_not_late": sum(1 for x in late if x <= 0) / len(late) if late else None,
        "eta_p95_late": pct(late, 0.95) if late else None,
        "eta_first15": kept_first / len(late) if late else None,
        "eta_1h15": kept_1h / len(late) if late else None,
        # how far the first start told was from the wait that came: told wait / real wait
        "eta_ratio": statistics.median(
            (j.first_estimate - j.submit) / (j.start - j.submit) for j in estimated
        )
        if estimated
        else None,
        "deprived": {t: deprived[t] / waited_time[t] for t in teams if waited_time[t]},
        "unfair": fairness.figure() if len(teams) > 1 else None,
        "unfair_fit": fairness.figure_fit() if len(teams) > 1 else None,
        "fairness_cpu": fairness.cpu,
        "team_mean": {
            t: statistics.fmean(
                (j.start - j.submit).total_seconds() + j.resumed_wait for j in jobs if j.team == t
            )
            for t in teams
        },
        "double": double,
        "floor": not resumed and at_floor(jobs),
        "preempted": reclaim.preempted if reclaim is not None else None,
        "passes": passes,
        "wall": wall,
        "cpu": cpu,
    }


HOUR = timedelta(hours=1)
TAIL_EVERY = fairshare.EVERY  # how often the tail's starts are worked out again (--depth)
ETA_GRACE = timedelta(minutes=15)
ETA_TARGET = 0.80  # of the jobs that waited, started by their first estimate + 15 min


def _estimate_before(job: Job, moment: datetime) -> datetime:
    """The estimate *job* was given last at or before *moment* (its first if none was)."""
    told = job.first_estimate
    for when, start in job.estimates or ():
        if when > moment:
            break
        if start is not None:
            told = start
    return told


def pct(sorted_values, q):
    return sorted_values[min(len(sorted_values) - 1, math.ceil(q * len(sorted_values)) - 1)]


def fmt_eta(r):
    if r["eta_exact"] is None:
        return "– | – | –"
    return (
        f"{r['eta_first15']:.0%} | {r['eta_1h15']:.0%} | "
        f"{r['eta_not_late']:.0%} / {r['eta_p95_late']:,.0f}"
    )


def print_table(rows_out: list[tuple[str, dict]]) -> None:
    print(
        "| jobs of | policy | jobs | mean wait s | median s | p95 wait s | max wait s | "
        "jobs that waited | utilisation | ETA first +15 min | ETA 1 h before +15 min | "
        "ETA kept / p95 late s | double allocations | replay CPU s |"
    )
    print(
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: "
        "| ---: |"
    )
    for label, r in rows_out:
        name = f"**{r['policy']}**" if r["policy"] == "portal" else r["policy"]
        print(
            f"| {label} | {name} | {r['jobs']:,} | {r['mean']:,.0f} | {r['median']:,.0f} | "
            f"{r['p95']:,.0f} | {r['max']:,.0f} | {r['waited']:,} | {r['util']:.1%} | "
            f"{fmt_eta(r)} | {r['double']} | {r['cpu']:.1f} |"
        )


def verdict(label: str, by: dict[str, dict]) -> list[str]:
    """The issue's bar on a row of ``--table`` (``bar_checks``)."""
    if "portal" not in by or "easy" not in by:
        return []
    p, e = by["portal"], by["easy"]
    kept = p["eta_first15"]
    if kept is not None:
        print(
            f"{label}: portal ETA kept (first estimate + 15 min) {kept:.0%}, target "
            f"{ETA_TARGET:.0%}; one hour before + 15 min {p['eta_1h15']:.0%}; the first wait "
            f"told over the wait that came, median {p['eta_ratio']:.2f}"
        )
    times, plus = CPU_BAR
    print(
        f"{label}: portal vs easy: mean {rel(p['mean'], e['mean'])}, p95 {rel(p['p95'], e['p95'])},"
        f" max {p['max'] / e['max'] if e['max'] else 0:.2f} x, CPU {p['cpu']:.1f} s vs "
        f"{e['cpu']:.1f} s (bar {times:g} x + {plus:g} s)"
        + (", at the floor" if p["floor"] else "")
    )
    return [f"{label}: {what}" for what, ok in bar_checks(p, e) if not ok]


def bar_checks(p: dict, e: dict) -> tuple[tuple[str, bool], ...]:
    """The issue's bar for the portal's replay *p* against EASY's *e*: ahead on mean and p95
    (level only where both are 0, or where the portal's waits are at the floor: ``at_floor``),
    longest wait within 1.5 x EASY's, replay CPU within 2 x EASY's + 10 s, and the ETA target
    kept (the queue's-plan issue: >= 80 % of waiting jobs started by their first told start +
    15 min)."""
    times, plus = CPU_BAR

    def ahead(what: str) -> bool:
        return p[what] < e[what] or p[what] == e[what] == 0 or (p[what] == e[what] and p["floor"])

    return (
        ("mean", ahead("mean")),
        ("p95", ahead("p95")),
        ("max", p["max"] <= 1.5 * e["max"]),
        ("CPU", p["cpu"] <= times * e["cpu"] + plus),
        ("ETA", p["eta_first15"] is None or p["eta_first15"] >= ETA_TARGET),
    )


def at_floor(jobs: list[Job]) -> bool:
    """Whether the replay's waits are the least any order that idles no card can give: every
    job that waited is one card and took its card the moment a job that had not waited gave it
    back. Then each moment a card came free is the earliest it could (its job started when it
    was submitted), no waiting job gave a card to another, and the waiting jobs take those
    moments in one order or another: the same sum of waits (6214e9 alone at 12 x 8,
    docs/performance.md)."""
    before: dict[tuple[int, int], Job] = {}  # (job, card) -> the job on that card before it
    on_card: dict[int, list[Job]] = defaultdict(list)
    for job in jobs:
        for card in job.cards:
            on_card[card].append(job)
    for card, held in on_card.items():
        held.sort(key=lambda j: j.start)
        for a, b in zip(held, held[1:], strict=False):
            before[b.id, card] = a
    waited = [j for j in jobs if j.start > j.submit]
    for job in waited:
        if job.count != 1:
            return False
        prior = before.get((job.id, job.cards[0]))
        if (
            prior is None
            or prior.start != prior.submit
            or prior.start + prior.duration != job.start
        ):
            return False
    return bool(waited)


def add_fair_share_arguments(parser) -> None:
    parser.add_argument(
        "--half-life", type=float, default=fairshare.HALF_LIFE / timedelta(hours=1),
        help="hours: the half-life of the teams' use (fair share)",
    )  # fmt: skip
    parser.add_argument(
        "--fair-every", type=float, default=fairshare.EVERY / timedelta(minutes=1),
        help="minutes between two recomputations of the fair-share factors",
    )  # fmt: skip
    parser.add_argument(
        "--no-before", action="store_true", help="do not run portal-before beside portal"
    )
    parser.add_argument(
        "--no-reclaim", action="store_true",
        help="fair share without taking cards back for a team below its share (``Reclaim``)",
    )  # fmt: skip
    parser.add_argument(
        "--grace", type=float, default=10, help="minutes a preempted job keeps its cards"
    )
    parser.add_argument(
        "--reclaim-lost", type=float, default=10,
        help="minutes of work a preempted job loses (since its last checkpoint)",
    )  # fmt: skip


def with_before(policies: list[str], args) -> list[str]:
    """``portal-before`` beside ``portal`` when two or more teams share the pool."""
    teams = args.vc and len(args.vc.split(",")) > 1
    if teams and "portal" in policies and BEFORE not in policies and not args.no_before:
        return [*policies, BEFORE]
    return policies


def print_fairness_table(rows_out: list[tuple[str, dict]]) -> None:
    """Per row with two or more teams: unfair starts (target <= 5 %; both readings of "work
    that fitted", ``Fairness``) beside the portal's order before fair share, and the old
    "time below share" of the worst team."""
    rows_out = [(label, r) for label, r in rows_out if r.get("unfair") is not None]
    if not rows_out:
        return
    before = {label: r for label, r in rows_out if r["policy"] == BEFORE}
    print(
        "\n| jobs of | policy | unfair starts, work that could run (target <= 5 %) | "
        "before fair share | unfair starts, by size | before fair share | "
        "worst team's waiting time below share |"
    )
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: |")
    for label, r in rows_out:
        name = f"**{r['policy']}**" if r["policy"] == "portal" else r["policy"]
        was = before.get(label) if r["policy"] == "portal" else None
        worst = max(r["deprived"].values(), default=0.0)
        print(
            f"| {label} | {name} | {r['unfair_fit']:.1%} | "
            f"{'–' if was is None else format(was['unfair_fit'], '.1%')} | {r['unfair']:.1%} | "
            f"{'–' if was is None else format(was['unfair'], '.1%')} | {worst:.0%} |"
        )


def rel(a, b):
    return f"{a / b - 1:+.0%}" if b else "0 vs 0"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vc", help="virtual cluster(s), comma-separated; default: all jobs")
    parser.add_argument("--table", action="store_true", help="every VC with >= --min-jobs jobs")
    parser.add_argument("--min-jobs", type=int, default=2000)
    parser.add_argument("--jobs", type=int, help="first N jobs by submit time")
    parser.add_argument("--nodes", type=int, help="a pool of N nodes (default: PAI inventory)")
    parser.add_argument("--cards-per-node", type=int, default=8)
    parser.add_argument("--pool-scale", type=float, default=0.165, help="of the PAI machines")
    parser.add_argument("--policies", default=",".join(POLICIES))
    parser.add_argument(
        "--slack-per-card-hour", type=float, default=SLACK_PER_CARD_HOUR / timedelta(minutes=1)
    )
    parser.add_argument("--slack-cap", type=float, default=SLACK_CAP / timedelta(hours=1))
    parser.add_argument("--check-full", action="store_true", help="hold QueuePlan to plan_queue")
    add_fair_share_arguments(parser)
    parser.add_argument(
        "--depth", type=int, help="plan reservations for the first N waiting jobs only (portal)"
    )
    parser.add_argument(
        "--no-head-first",
        action="store_true",
        help="portal: keep every reservation where one team waits too (no scheduler.headfirst)",
    )
    parser.add_argument("--profile", action="store_true", help="cProfile the last policy")
    parser.add_argument(
        "--overload", action="store_true", help="each big VC alone on 12 x 8, all on 24 x 8"
    )
    args = parser.parse_args()
    if args.overload:
        return run_overload(args)
    if args.table and args.nodes is None:
        args.nodes = 16

    cards = grid_pool(args.nodes, args.cards_per_node) if args.nodes else pai_pool(args.pool_scale)
    nodes = len({c.node_id for c in cards})
    print(
        f"pool: {len(cards)} cards on {nodes} nodes, one model, one interconnect domain per node; "
        f"portal slack {args.slack_per_card_hour:g} min per card-hour, cap {args.slack_cap:g} h"
    )
    policies = [p.strip() for p in args.policies.split(",") if p.strip()]
    policies = with_before(policies, args)
    if args.table:
        groups = [[vc] for vc, n in vc_sizes().most_common() if n >= args.min_jobs]
    else:
        groups = [args.vc.split(",") if args.vc else []]
    table, bad = [], []
    for vcs in groups:
        rows = load_rows(vcs, args.jobs)
        jobs, dropped = make_jobs(rows, cards)
        label = ",".join(vcs) or "all"
        sizes = Counter(j.count for j in jobs)
        print(
            f"\n{label}: {len(jobs)} jobs, {jobs[0].submit:%Y-%m-%d} .. {jobs[-1].submit:%Y-%m-%d},"
            f" sizes {dict(sorted(sizes.items()))}, "
            f"{sum(j.duration.total_seconds() * j.count for j in jobs) / 3600:,.0f} card-hours"
            + (f"; {dropped} dropped (larger than the pool or a node, or 0 s)" if dropped else "")
        )
        by = {}
        for n, policy in enumerate(policies):
            if args.profile and n == len(policies) - 1:
                import cProfile
                import pstats

                prof = cProfile.Profile()
                res = prof.runcall(replay, jobs, cards, policy, args)
                pstats.Stats(prof).sort_stats("tottime").print_stats(15)
            else:
                res = replay(jobs, cards, policy, args)
            print(
                f"  {policy}: mean {res['mean']:,.0f} s, p95 {res['p95']:,.0f} s, "
                f"max {res['max']:,.0f} s, {res['cpu']:.1f} s CPU ({res['wall']:.1f} s wall)"
                + (f", {res['preempted']:,} preempted" if res["preempted"] is not None else ""),
                flush=True,
            )
            if len(res["deprived"]) > 1:
                worst = max(res["deprived"].items(), key=lambda kv: kv[1])
                print(
                    f"    below fair share while others above (worst team): {worst[0]} "
                    f"{worst[1]:.1%} of its waiting time; mean wait by team: "
                    + ", ".join(f"{t} {w:,.0f} s" for t, w in res["team_mean"].items())
                )
            by[policy] = res
            table.append((label, res))
        bad += verdict(label, by)
    print()
    print_table(table)
    print_fairness_table(table)
    if any(r["double"] for _l, r in table):
        print("\nDOUBLE ALLOCATIONS")
        return 1
    if bad:
        print(f"\nportal short of the bar: {', '.join(bad)}")
        return 1
    return 0


# --- the overload table (--overload) ------------------------------------------------------

OVERLOAD_ALONE = 12  # nodes x --cards-per-node for one virtual cluster alone
OVERLOAD_TOGETHER = 24  # ... and for all of them together
OVERLOAD_POLICIES = ("fifo", "easy", "portal")
CPU_BAR = (2.0, 10.0)  # the portal's replay CPU at most 2 x EASY's + 10 s


def overload_groups(min_jobs: int) -> list[tuple[list[str], int]]:
    """(virtual clusters, nodes) per row: each big one alone, then all of them together."""
    big = [vc for vc, n in vc_sizes().most_common() if n >= min_jobs]
    return [([vc], OVERLOAD_ALONE) for vc in big] + [(big, OVERLOAD_TOGETHER)]


def fmt_fairness(r: dict) -> str:
    """The decisions' fairness figures, when the replay measures them (two or more teams):
    of the starts while two or more teams waited, the share that went to a team above its
    share while one below it had work waiting that could run instead / no larger than the
    cards free (``Fairness``); '—' otherwise."""
    if r.get("unfair") is None:
        return "—"
    return f"{r['unfair_fit']:.1%} / {r['unfair']:.1%}"


def fmt_below_share(r: dict) -> str:
    """The worst team's time below an equal share while another was above (for information)."""
    if len(r["deprived"]) < 2:
        return "—"
    return f"{max(r['deprived'].values()):.0%}"


def run_overload(args) -> int:
    policies = [p.strip() for p in args.policies.split(",") if p.strip()]
    if set(policies) == set(POLICIES):  # the default: the three the table compares
        policies = list(OVERLOAD_POLICIES)
    rows, bad = [], []
    for vcs, nodes in overload_groups(args.min_jobs):
        cards = grid_pool(nodes, args.cards_per_node)
        jobs, dropped = make_jobs(load_rows(vcs, args.jobs), cards)
        label = ",".join(vcs) if len(vcs) == 1 else f"all {len(vcs)} together"
        pool = f"{nodes} x {args.cards_per_node}"
        print(
            f"\n{label} on {pool}: {len(jobs):,} jobs, {jobs[0].submit:%Y-%m-%d} .. "
            f"{jobs[-1].submit:%Y-%m-%d}" + (f", {dropped} dropped" if dropped else ""),
            flush=True,
        )
        by = {}
        for policy in policies:
            res = replay(jobs, cards, policy, args)
            print(
                f"  {policy}: mean {res['mean']:,.0f} s, p95 {res['p95']:,.0f} s, max "
                f"{res['max']:,.0f} s, {res['cpu']:.1f} s CPU, fairness {fmt_fairness(res)}"
                + (f", {res['preempted']:,} preempted" if res["preempted"] is not None else ""),
                flush=True,
            )
            by[policy] = res
            rows.append((label, pool, res))
        bad += overload_verdict(label, by)
    print()
    print_overload_table(rows)
    if any(r["double"] for _l, _p, r in rows):
        print("\nDOUBLE ALLOCATIONS")
        return 1
    if bad:
        print(f"\nportal short of the bar: {', '.join(bad)}")
        return 1
    return 0


def print_overload_table(rows: list[tuple[str, str, dict]]) -> None:
    print(
        "| jobs of | pool | policy | jobs | mean wait s | p95 wait s | max wait s | "
        "replay CPU s | ETA first +15 min | fairness: starts to a team above its share "
        "(could run / by size) | time below share (worst team) |"
    )
    print("| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for label, pool, r in rows:
        name = f"**{r['policy']}**" if r["policy"] == "portal" else r["policy"]
        print(
            f"| {label} | {pool} | {name} | {r['jobs']:,} | {r['mean']:,.0f} | {r['p95']:,.0f} | "
            f"{r['max']:,.0f} | {r['cpu']:.1f} | {fmt_eta_first(r)} | {fmt_fairness(r)} | "
            f"{fmt_below_share(r)} |"
        )


def fmt_eta_first(r: dict) -> str:
    """The share of waiting jobs started by their first told start + 15 min (– for none)."""
    return "–" if r["eta_first15"] is None else f"{r['eta_first15']:.0%}"


def overload_verdict(label: str, by: dict[str, dict]) -> list[str]:
    """The issue's bar on one row of ``--overload`` (``bar_checks``)."""
    if "portal" not in by or "easy" not in by:
        return []
    p, e = by["portal"], by["easy"]
    times, plus = CPU_BAR
    print(
        f"{label}: portal vs easy: mean {rel(p['mean'], e['mean'])}, p95 "
        f"{rel(p['p95'], e['p95'])}, max {p['max'] / e['max'] if e['max'] else 0:.2f} x, CPU "
        f"{p['cpu']:.1f} s vs {e['cpu']:.1f} s (bar {times:g} x + {plus:g} s), ETA first + 15 min "
        f"{fmt_eta_first(p)} (target {ETA_TARGET:.0%})" + (", at the floor" if p["floor"] else "")
    )
    return [f"{label}: {what}" for what, ok in bar_checks(p, e) if not ok]


if __name__ == "__main__":
    sys.exit(main())
