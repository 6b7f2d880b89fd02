#!/usr/bin/env python3
"""What asking by task costs over a large pool: estimate + ranking of one profile.

A pool of --nodes × 8 cards (default 1,250 × 8 = 10,000) spread over every model of the
shipped catalogue, in four regions on three networks, every --held-th card held by a
running lease and --queued leases (8 cards) waiting per model, ``ANALYZE``d. For each
profile, times ``estimate(profile)`` plus ``recommend(profile=…, duration=…)`` — what the estimate page
and ``POST /api/v1/estimate/`` run — over --calls calls after a warm-up, in this process,
and prints median and p95 wall time, the median CPU time of this process (the Python side,
less sensitive to a busy machine; the database's own time is not in it) and the number of
SQL queries per call.

Not a test; run by hand (bench/README.md):

    .venv/bin/python bench/advisor_scale.py                  # SQLite, about 30 s
    .venv/bin/python bench/advisor_scale.py --postgres postgres://postgres@127.0.0.1:5432/cardpool_advisor_bench

Creates and drops a test database of its own.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1250)
    parser.add_argument("--held", type=int, default=3, help="hold every Nth card (3: a third)")
    parser.add_argument("--calls", type=int, default=30)
    parser.add_argument("--queued", type=int, default=2, help="leases queued per model")
    parser.add_argument("--postgres", default="", help="a PostgreSQL URL (default: SQLite)")
    parser.add_argument("--profile", action="store_true", help="cProfile the first profile")
    args = parser.parse_args()

    sys.path.insert(0, str(ROOT))
    os.environ["DJANGO_SETTINGS_MODULE"] = "tests.settings"
    if args.postgres:
        os.environ["DATABASE_URL"] = args.postgres
    import django

    django.setup()
    from datetime import timedelta

    from django.db import connection
    from django.test.utils import CaptureQueriesContext, setup_test_environment
    from django.utils import timezone

    setup_test_environment()
    old_name = connection.creation.create_test_db(verbosity=0, autoclobber=True)
    try:
        from inventory.models import Card, CardModel, Node, Region
        from leasing.advisor.estimator import TaskProfile, estimate
        from leasing.advisor.recommend import recommend
        from leasing.choices import LeaseStatus
        from leasing.models import Allocation, Lease
        from tests.factories import TeamFactory, UserFactory

        now = timezone.now()
        regions = [
            Region.objects.create(slug=f"r{i}", name=f"R{i}", energy_price_kwh=0.5 + i / 10)
            for i in range(4)
        ]
        models = list(CardModel.objects.order_by("pk"))
        networks = [("ib", 400), ("roce", 200), ("ethernet", 25)]
        Node.objects.bulk_create(
            Node(
                hostname=f"bench-{i:05d}",
                region=regions[i % 4],
                network_kind=networks[i % 3][0],
                network_gbps=networks[i % 3][1],
                software_versions={"cuda": "12.4"},
            )
            for i in range(args.nodes)
        )
        nodes = list(Node.objects.order_by("hostname"))
        Card.objects.bulk_create(
            Card(
                node=node,
                card_model=models[n % len(models)],
                index=i,
                uuid=f"{node.hostname}-{i}",
                interconnect_domain=i // 4,
            )
            for n, node in enumerate(nodes)
            for i in range(8)
        )
        user, team = UserFactory(), TeamFactory()
        cards = list(Card.objects.order_by("pk").values_list("pk", "card_model_id"))
        held = cards[:: args.held]
        Lease.objects.bulk_create(
            Lease(
                user=user,
                team=team,
                card_model_id=model_id,
                count=1,
                duration=timedelta(hours=4),
                start_at=now - timedelta(hours=1),
                end_at=now + timedelta(hours=3),
                status=LeaseStatus.ACTIVE,
                submitted_at=now - timedelta(hours=1),
            )
            for _pk, model_id in held
        )
        leases = list(Lease.objects.order_by("pk").values_list("pk", flat=True))
        Allocation.objects.bulk_create(
            Allocation(
                card_id=card,
                lease_id=lease,
                start_at=now - timedelta(hours=1),
                end_at=now + timedelta(hours=3),
            )
            for (card, _m), lease in zip(held, leases, strict=True)
        )
        Lease.objects.bulk_create(
            Lease(
                user=user,
                team=team,
                card_model=model,
                count=8,
                duration=timedelta(hours=2),
                start_at=now,
                end_at=now + timedelta(hours=2),
                status=LeaseStatus.QUEUED,
                submitted_at=now,
            )
            for model in models
            for _ in range(args.queued)
        )
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE")
        total = Card.objects.count()
        profiles = {
            "7B full fine-tune": TaskProfile(task="full_finetune", params_b=7),
            "70B inference": TaskProfile(task="inference", params_b=70),
            "7B LoRA": TaskProfile(task="lora", params_b=7),
            "70B full FT (across nodes)": TaskProfile(task="full_finetune", params_b=70),
            "rendering 10 GB": TaskProfile(task="rendering", scene_gb=10),
            "7B LoRA, stack cuda, region r1": TaskProfile(task="lora", params_b=7),
        }
        print(
            f"pool: {total} cards on {len(nodes)} nodes, {len(models)} models, "
            f"{len(held)} held, {args.queued * len(models)} queued; {connection.vendor}"
        )
        print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
        print(
            f"{'profile':32} {'options':>7} {'median ms':>10} {'p95 ms':>8} {'CPU ms':>8} "
            f"{'queries':>8}"
        )
        for name, profile in profiles.items():
            reqs = {"stack": "cuda", "region": "r1"} if "stack" in name else None

            def run(profile=profile, reqs=reqs):
                estimate(profile)
                return recommend(profile=profile, duration=timedelta(hours=6), requirements=reqs)

            run()  # warm-up
            if args.profile:
                import cProfile
                import pstats

                with cProfile.Profile() as prof:
                    run()
                pstats.Stats(prof).sort_stats("cumulative").print_stats(30)
                with CaptureQueriesContext(connection) as queries:
                    run()
                for q in queries.captured_queries:
                    print(q["time"], q["sql"][:150])
                return 0
            times, cpu = [], []
            with CaptureQueriesContext(connection) as queries:
                rec = run()
            for _ in range(args.calls):
                t0, c0 = time.perf_counter(), time.process_time()
                run()
                times.append((time.perf_counter() - t0) * 1000)
                cpu.append((time.process_time() - c0) * 1000)
            times.sort()
            p95 = times[max(0, int(len(times) * 0.95) - 1)]
            print(
                f"{name:32} {len(rec.options):>7} {statistics.median(times):>10.1f} "
                f"{p95:>8.1f} {statistics.median(cpu):>8.1f} {len(queries):>8}"
            )
    finally:
        connection.creation.destroy_test_db(old_name, verbosity=0)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
