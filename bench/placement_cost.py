#!/usr/bin/env python3
"""What one placement decision costs: the SQL fast path against the planner over a snapshot.

A pool of --nodes × 8 cards of one model (two interconnect domains per node), every
--held-th card held by a running lease, ``ANALYZE``d. Times, over --calls calls each after a
warm-up, in this process:

* ``fastpath.place_now``: the one statement used when a request meets no queue (its free
  cards built by the ORM from ``Card.objects.usable``);
* the planner's way: ``snapshot.card_slots`` + ``snapshot.timeline_for`` + ``planner.place``,
  what the queue pass does per model.

Both must choose the same cards (checked). Not a test; run by hand (bench/README.md):

    .venv/bin/python bench/placement_cost.py            # about 20 s

Needs PostgreSQL on 127.0.0.1:5432 (user postgres, trust auth); creates and drops a test
database of its own (``test_cardpool_placement_bench``).
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
    parser.add_argument("--nodes", type=int, default=200)
    parser.add_argument("--held", type=int, default=2, help="hold every Nth card (2: half)")
    parser.add_argument("--count", type=int, default=2, help="cards per request")
    parser.add_argument("--calls", type=int, default=400)
    parser.add_argument(
        "--postgres", default="postgres://postgres@127.0.0.1:5432/cardpool_placement_bench"
    )
    args = parser.parse_args()

    sys.path.insert(0, str(ROOT))
    os.environ["DJANGO_SETTINGS_MODULE"] = "tests.settings"
    os.environ["DATABASE_URL"] = args.postgres
    import django

    django.setup()
    from datetime import timedelta

    from django.db import connection
    from django.test.utils import setup_test_environment
    from django.utils import timezone

    setup_test_environment()
    old_name = connection.creation.create_test_db(verbosity=0, autoclobber=True)
    try:
        from inventory.models import Card, Node, Region
        from leasing.choices import LeaseStatus
        from leasing.models import Allocation, Lease
        from leasing.scheduler import fastpath, planner, snapshot
        from tests.factories import CardModelFactory, TeamFactory, UserFactory

        now = timezone.now()
        region = Region.objects.create(slug="bench", name="Bench")
        model = CardModelFactory(slug="bench-model")
        Node.objects.bulk_create(
            Node(hostname=f"bench-{i:04d}", region=region) for i in range(args.nodes)
        )
        Card.objects.bulk_create(
            Card(
                node=node,
                card_model=model,
                index=i,
                uuid=f"{node.hostname}-{i}",
                interconnect_domain=i // 4,
            )
            for node in Node.objects.order_by("hostname")
            for i in range(8)
        )
        user, team = UserFactory(username="bench"), TeamFactory(slug="bench")
        held = list(Card.objects.order_by("node__hostname", "index"))[:: args.held]
        leases = Lease.objects.bulk_create(
            Lease(
                user=user,
                team=team,
                card_model=model,
                count=1,
                duration=timedelta(hours=2),
                start_at=now - timedelta(hours=1),
                end_at=now + timedelta(hours=1),
                status=LeaseStatus.ACTIVE,
                submitted_at=now,
            )
            for _ in held
        )
        Allocation.objects.bulk_create(
            Allocation(card=card, lease=lease, start_at=lease.start_at, end_at=lease.end_at)
            for card, lease in zip(held, leases, strict=True)
        )
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE")
        end = now + timedelta(hours=1)

        def by_sql():
            return fastpath.place_now(model.pk, count=args.count, start=now, end=end)

        def by_planner():
            cards = snapshot.card_slots(model.pk, now=now)
            timeline = snapshot.timeline_for(model.pk, now=now)
            return planner.place(cards, timeline, args.count, now, end, same_node=True)

        assert sorted(by_sql()) == sorted(by_planner()), "the two ways chose different cards"
        print(
            f"## One placement decision — {args.nodes * 8:,} cards ({args.nodes} nodes × 8), "
            f"{len(held):,} held, {args.count} cards asked, {args.calls} calls each\n"
        )
        print("| way | median ms | p95 ms |\n|---|---:|---:|")
        for name, fn in (("SQL fast path (place_now)", by_sql), ("snapshot + planner", by_planner)):
            for _ in range(20):
                fn()
            times = []
            for _ in range(args.calls):
                start = time.perf_counter()
                fn()
                times.append((time.perf_counter() - start) * 1000)
            times.sort()
            p95 = times[int(len(times) * 0.95)]
            print(f"| {name} | {statistics.median(times):.2f} | {p95:.2f} |")
    finally:
        connection.creation.destroy_test_db(old_name, verbosity=0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
