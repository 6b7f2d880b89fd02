"""Replay the Philly job trace through the real planner on a simulated clock.

Run by hand, no database:

    .venv/bin/python bench/trace_replay.py                 # first 10,000 jobs, default scale
    .venv/bin/python bench/trace_replay.py --jobs 2000 --pool-scale 0.1 --policies fifo

Each trace job becomes a lease request: submit time -> request time, duration -> requested
(and actual) duration, num_gpus -> count, cluster -> team; ``same_node`` for up to 8 cards,
spread across nodes above that. The pool is the Alibaba PAI inventory: every machine with
cards is one node and one interconnect domain (the CSV has no topology); all GPU types are
treated as ONE card model (the Philly jobs name no GPU type), so both policies see one pool.
``--pool-scale`` keeps that fraction of the machines of every GPU type (file order).

Policies, on the same jobs and pool, both placing with the real ``planner.place`` (best fit):

* ``fifo``     strict FIFO: at each event, start the head of the queue while it fits now;
               the first one that does not fit blocks everyone behind it (no backfill);
* ``backfill`` the project's policy, driven as ``schedule_card_model`` drives it: on every
               submit and every end, a Timeline of the running leases, ``plan_queue`` over the
               waiting queue in service order (all priority normal: submit order), and every
               decision with ``start == now`` starts now.

Events at the same second are applied together (ends, then submits) before one pass.
"""

from __future__ import annotations

import argparse
import csv
import heapq
import math
import statistics
import sys
import time
from collections import Counter, defaultdict
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from leasing.scheduler.planner import CardSlot, Request, Timeline, place, plan_queue  # noqa: E402

DATA = Path(__file__).resolve().parents[2] / "shared/data"
TRACE = DATA / "traces/philly-jobs.csv"
MACHINES = DATA / "inventory/alibaba-pai-machines.csv"
SAME_NODE_MAX = 8
NEVER = datetime.max.replace(tzinfo=UTC)


@dataclass
class Job:
    id: int
    submit: datetime
    duration: timedelta
    count: int
    team: str
    same_node: bool
    start: datetime | None = None
    cards: tuple[int, ...] = ()


def load_jobs(n: int) -> list[tuple[datetime, int, int, str]]:
    with TRACE.open() as f:
        rows = [
            (
                datetime.fromisoformat(r["timestamp"]).replace(tzinfo=UTC),
                int(float(r["duration"])),
                int(r["num_gpus"]),
                r["cluster"],
            )
            for r in csv.DictReader(f)
        ]
    rows.sort(key=lambda r: r[0])  # the file is not in submit order; sort is stable
    return rows[:n]


def load_pool(scale: float) -> tuple[list[CardSlot], Counter]:
    by_type: dict[str, list[tuple[str, int]]] = defaultdict(list)
    with MACHINES.open() as f:
        for r in csv.DictReader(f):
            if int(r["cap_gpu"]) > 0:
                by_type[r["gpu_type"]].append((r["machine"], int(r["cap_gpu"])))
    cards: list[CardSlot] = []
    per_type: Counter = Counter()
    node_id = 0
    for gpu_type in sorted(by_type):
        machines = by_type[gpu_type]
        keep = max(1, round(len(machines) * scale)) if scale < 1 else len(machines)
        for _machine, cap in machines[:keep]:
            node_id += 1
            for _ in range(cap):
                # one interconnect domain per machine: domain = node id
                cards.append(CardSlot(len(cards) + 1, node_id, node_id))
            per_type[gpu_type] += cap
    return cards, per_type


def replay(rows, cards: list[CardSlot], policy: str) -> dict:
    pool = len(cards)
    node_of = {c.card_id: c.node_id for c in cards}
    node_size = Counter(node_of.values())
    max_node = max(node_size.values())
    jobs, dropped = [], 0
    for submit, dur, count, team in rows:
        same_node = count <= SAME_NODE_MAX
        if count > pool or (same_node and count > max_node):
            dropped += 1  # can never fit in this pool
            continue
        jobs.append(Job(len(jobs) + 1, submit, timedelta(seconds=dur), count, team, same_node))

    running: dict[int, tuple[datetime, datetime]] = {}  # card -> the period it is busy
    idle_on_node = dict(node_size)
    ends: list[tuple[datetime, int]] = []
    queue: list[Job] = []
    allocations: list[tuple[int, datetime, datetime]] = []
    frag_events = 0
    frag_jobs: set[int] = set()
    passes = 0
    i = 0
    t_wall = time.perf_counter()

    def start(job: Job, now: datetime, card_ids) -> None:
        job.start, job.cards = now, tuple(card_ids)
        end = now + job.duration
        for c in job.cards:
            running[c] = (now, end)
            idle_on_node[node_of[c]] -= 1
            allocations.append((c, now, end))
        heapq.heappush(ends, (end, job.id))

    while i < len(jobs) or ends:
        now = min(
            jobs[i].submit if i < len(jobs) else NEVER,
            ends[0][0] if ends else NEVER,
        )
        while ends and ends[0][0] == now:
            _, jid = heapq.heappop(ends)
            for c in jobs[jid - 1].cards:
                del running[c]
                idle_on_node[node_of[c]] += 1
        while i < len(jobs) and jobs[i].submit == now:
            queue.append(jobs[i])
            i += 1
        if not queue:
            continue
        passes += 1
        if policy == "fifo":
            timeline = Timeline(busy=defaultdict(list, {c: [p] for c, p in running.items()}))
            while queue:
                job = queue[0]
                chosen = place(
                    cards, timeline, job.count, now, now + job.duration, same_node=job.same_node
                )
                if chosen is None:
                    break
                queue.pop(0)
                start(job, now, chosen)
                for c in chosen:
                    timeline.add(c, now, now + job.duration)
        else:
            timeline = Timeline(busy=defaultdict(list, {c: [p] for c, p in running.items()}))
            requests = [Request(j.id, j.count, j.duration, now, j.same_node) for j in queue]
            decisions = plan_queue(cards, timeline, requests)
            started = set()
            for job, d in zip(queue, decisions, strict=True):
                if d.start is not None and d.start == now:
                    start(job, now, d.card_ids)
                    started.add(job.id)
            if started:
                queue = [j for j in queue if j.id not in started]
        # Fragmentation: still waiting although enough cards are idle in total, but no
        # node (= domain) has enough of them for a same-node request.
        if queue:
            idle = pool - len(running)
            biggest = max(idle_on_node.values())
            for job in queue:
                if job.same_node and job.count <= idle and job.count > biggest:
                    frag_events += 1
                    frag_jobs.add(job.id)
    wall = time.perf_counter() - t_wall

    # Double allocation: no card may have overlapping busy periods.
    per_card = defaultdict(list)
    for c, s, e in allocations:
        per_card[c].append((s, e))
    double = 0
    for periods in per_card.values():
        periods.sort()
        double += sum(1 for a, b in zip(periods, periods[1:], strict=False) if b[0] < a[1])
    for job in jobs:
        assert job.start is not None and len(set(job.cards)) == job.count, job
        if job.same_node:
            assert len({node_of[c] for c in job.cards}) == 1, job

    waits = sorted((j.start - j.submit).total_seconds() for j in jobs)
    first = jobs[0].submit
    last = max(j.start + j.duration for j in jobs)
    makespan = (last - first).total_seconds()
    busy = sum(j.duration.total_seconds() * j.count for j in jobs)
    return {
        "policy": policy,
        "jobs": len(jobs),
        "dropped": dropped,
        "mean": statistics.fmean(waits),
        "median": waits[len(waits) // 2],
        "p95": waits[min(len(waits) - 1, math.ceil(0.95 * len(waits)) - 1)],
        "waited": sum(1 for w in waits if w > 0),
        "util": busy / (pool * makespan),
        "makespan": makespan,
        "frag_events": frag_events,
        "frag_jobs": len(frag_jobs),
        "double": double,
        "passes": passes,
        "wall": wall,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=10_000, help="first N jobs by submit time")
    parser.add_argument(
        "--pool-scale", type=float, default=0.165, help="fraction of machines of each GPU type"
    )
    parser.add_argument("--policies", default="fifo,backfill")
    parser.add_argument("--profile", action="store_true", help="cProfile the last policy")
    args = parser.parse_args()

    rows = load_jobs(args.jobs)
    cards, per_type = load_pool(args.pool_scale)
    nodes = len({c.node_id for c in cards})
    sizes = Counter(rows_count for _s, _d, rows_count, _t in rows)
    print(
        f"trace: {len(rows)} jobs, {rows[0][0]} .. {rows[-1][0]}, "
        f"sizes {dict(sorted(sizes.items()))}, {sum(d * n for _s, d, n, _t in rows) / 3600:,.0f}"
        f" card-hours"
    )
    print(
        f"pool: scale {args.pool_scale} -> {len(cards)} cards on {nodes} nodes "
        f"({', '.join(f'{k} {v}' for k, v in sorted(per_type.items()))}), one model, "
        f"one domain per node"
    )
    results = []
    policies = [p.strip() for p in args.policies.split(",") if p.strip()]
    for n, policy in enumerate(policies):
        if args.profile and n == len(policies) - 1:
            import cProfile
            import pstats

            prof = cProfile.Profile()
            res = prof.runcall(replay, rows, cards, policy)
            pstats.Stats(prof).sort_stats("cumulative").print_stats(15)
        else:
            res = replay(rows, cards, policy)
        results.append(res)

    print()
    print(
        "| policy | jobs | mean wait s | median s | p95 wait s | jobs that waited | "
        "utilisation | makespan d | fragmented waits (jobs) | double allocations | "
        "passes | replay s |"
    )
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in results:
        print(
            f"| {r['policy']} | {r['jobs']:,} | {r['mean']:,.0f} | {r['median']:,.0f} | "
            f"{r['p95']:,.0f} | {r['waited']:,} | {r['util']:.1%} | {r['makespan'] / 86400:.1f} | "
            f"{r['frag_events']:,} ({r['frag_jobs']:,}) | {r['double']} | {r['passes']:,} | "
            f"{r['wall']:.1f} |"
        )
    if results[0]["dropped"]:
        print(f"\n{results[0]['dropped']} jobs dropped: larger than the pool or than any node")
    by = {r["policy"]: r for r in results}
    if "fifo" in by and "backfill" in by and by["fifo"]["mean"] > 0:
        cut = 1 - by["backfill"]["mean"] / by["fifo"]["mean"]
        print(f"\nmean wait: backfill is {cut:.0%} lower than FIFO (goal: >= 50%)")
    return 1 if any(r["double"] for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
