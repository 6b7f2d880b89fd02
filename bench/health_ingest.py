#!/usr/bin/env python3
"""Telemetry ingest with the pool-health rules evaluated: what it costs per 30-second round.

A pool of --nodes × 8 cards (default 1,250 × 8 = 10,000), half of them held by active
leases, with an hour of readings already stored (every card every 30 s, so the idle rule's
60-minute window and the others' 5-minute windows are full), ``ANALYZE``d. Then --rounds
rounds of 30 simulated seconds (the clock is moved, not waited for): each node's agent posts
its 8 cards once, then ``health_evaluate`` runs once — what production does every 30 s
(``CARDPOOL_TELEMETRY_PULL_SECONDS``, ``CARDPOOL_HEALTH_SECONDS``). A few cards run hot and
one node is silent, so alerts open, are updated and keep cards out.

Measured per round, as CPU seconds (not wall time): this process (Django, the ORM, the
posts) and the PostgreSQL backend serving it (read from /proc, same machine), for the
ingest and for the rules separately; and the share of one core that is over 30 s.

``--via api`` (default) posts through the real endpoint in-process (Django's test client:
middleware, DRF, the node-token check, the service; no network); ``--via service`` calls
``inventory.telemetry.telemetry_record`` directly. Not a test; run by hand:

    .venv/bin/python bench/health_ingest.py                    # about 3 minutes when idle
    .venv/bin/python bench/health_ingest.py --nodes 125 --rounds 4     # a quick look

Needs PostgreSQL on 127.0.0.1:5432 (user postgres, trust auth); creates and drops a test
database of its own.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TICKS = os.sysconf("SC_CLK_TCK")


def backend_cpu(pid: int) -> float:
    """CPU seconds (user + system) of a PostgreSQL backend on this machine."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1250)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--via", choices=["api", "service"], default="api")
    parser.add_argument("--hot", type=int, default=20, help="cards reading 92 °C")
    parser.add_argument(
        "--postgres", default="postgres://postgres@127.0.0.1:5432/cardpool_health_bench"
    )
    args = parser.parse_args()

    sys.path.insert(0, str(ROOT))
    os.environ["DJANGO_SETTINGS_MODULE"] = "tests.settings"
    os.environ["DATABASE_URL"] = args.postgres
    import django

    django.setup()
    from datetime import timedelta

    import time_machine
    from django.conf import settings
    from django.db import connection
    from django.test import Client
    from django.test.utils import setup_test_environment
    from django.utils import timezone

    setup_test_environment()
    settings.ALLOWED_HOSTS = ["*"]
    # A bench of 1,250 nodes posting from one process: the per-node rate limit is not measured.
    settings.REST_FRAMEWORK = {
        **settings.REST_FRAMEWORK,
        "DEFAULT_THROTTLE_RATES": {
            **settings.REST_FRAMEWORK.get("DEFAULT_THROTTLE_RATES", {}),
            "telemetry": "100000/min",
        },
    }
    old_name = connection.creation.create_test_db(verbosity=0, autoclobber=True)
    try:
        from inventory.models import Card, Node, Region
        from inventory.telemetry import node_token_issue, telemetry_record
        from leasing.choices import LeaseStatus
        from leasing.health.services import health_evaluate
        from leasing.models import Alert, Allocation, Lease
        from tests.factories import CardModelFactory, TeamFactory, UserFactory

        now = timezone.now().replace(microsecond=0)
        region = Region.objects.create(slug="bench", name="Bench")
        model = CardModelFactory(slug="bench-h800", name="H800 bench", tdp_w=700, memory_gb=80)
        Node.objects.bulk_create(
            Node(hostname=f"bench-{i:04d}", region=region, telemetry_seen_at=now)
            for i in range(args.nodes)
        )
        nodes = list(Node.objects.order_by("hostname"))
        Card.objects.bulk_create(
            Card(node=node, card_model=model, index=i, uuid=f"{node.hostname}-{i}")
            for node in nodes
            for i in range(8)
        )
        cards = list(Card.objects.order_by("node__hostname", "index"))
        user, team = UserFactory(username="bench"), TeamFactory(slug="bench")
        held = cards[::2]
        leases = Lease.objects.bulk_create(
            Lease(
                user=user,
                team=team,
                card_model=model,
                count=1,
                duration=timedelta(hours=4),
                start_at=now - timedelta(hours=2),
                end_at=now + timedelta(hours=2),
                status=LeaseStatus.ACTIVE,
                submitted_at=now - timedelta(hours=2),
            )
            for _ in held
        )
        Allocation.objects.bulk_create(
            Allocation(card=card, lease=lease, start_at=lease.start_at, end_at=lease.end_at)
            for card, lease in zip(held, leases, strict=True)
        )
        with connection.cursor() as cursor:
            # An hour of readings, every card every 30 s (built in the database: fast).
            cursor.execute(
                """
                INSERT INTO inventory_cardsample
                    (card_id, at, utilization_pct, memory_used_mb, temperature_c, power_w)
                SELECT c.id, %s - make_interval(secs => 30 * s), 40 + (c.id %% 50),
                       30000, 60 + (c.id %% 10), 300
                FROM inventory_card c, generate_series(1, 120) AS s
                """,
                [now],
            )
        hot = {card.pk for card in cards[1 : 1 + 2 * args.hot : 2]}  # not held: free hot cards
        silent = nodes[-1]
        with connection.cursor() as cursor:
            # The hot cards have read 92 °C for the last 7 minutes; the last node fell silent
            # 10 minutes ago: their alerts open in the first round and last through the run.
            cursor.execute(
                "UPDATE inventory_cardsample SET temperature_c = 92 WHERE card_id = ANY(%s) "
                "AND at >= %s",
                [list(hot), now - timedelta(minutes=7)],
            )
            cursor.execute(
                "DELETE FROM inventory_cardsample WHERE card_id IN "
                "(SELECT id FROM inventory_card WHERE node_id = %s) AND at >= %s",
                [silent.pk, now - timedelta(minutes=10)],
            )
            cursor.execute("ANALYZE")
        Node.objects.filter(pk=silent.pk).update(telemetry_seen_at=now - timedelta(minutes=10))
        tokens = {node.pk: node_token_issue(node=node) for node in nodes}
        by_node: dict[int, list[Card]] = {}
        for card in cards:
            by_node.setdefault(card.node_id, []).append(card)
        client = Client()
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_backend_pid()")
            backend = cursor.fetchone()[0]

        def post_all(at):
            for node in nodes:
                if node.pk == silent.pk:
                    continue
                samples = [
                    {
                        "index": c.index,
                        "utilization_pct": 0 if c.pk % 97 == 0 else 80,
                        "memory_used_mb": 40000,
                        "temperature_c": 92 if c.pk in hot else 65,
                        "power_w": 450,
                    }
                    for c in by_node[node.pk]
                ]
                if args.via == "service":
                    telemetry_record(node=node, samples=samples, now=at)
                else:
                    response = client.post(
                        "/api/v1/telemetry/",
                        data=json.dumps({"samples": samples}),
                        content_type="application/json",
                        HTTP_AUTHORIZATION=f"Node {tokens[node.pk]}",
                    )
                    assert response.status_code == 201, response.content[:300]

        rows = []
        for round_no in range(args.rounds + 1):  # round 0 warms up, not reported
            at = now + timedelta(seconds=30 * (round_no + 1))
            with time_machine.travel(at, tick=False):
                cpu0, db0, wall0 = time.process_time(), backend_cpu(backend), time.perf_counter()
                post_all(at)
                cpu1, db1 = time.process_time(), backend_cpu(backend)
                result = health_evaluate(now=at)
                cpu2, db2, wall2 = time.process_time(), backend_cpu(backend), time.perf_counter()
            if round_no:
                rows.append(
                    {
                        "ingest": (cpu1 - cpu0) + (db1 - db0),
                        "ingest_db": db1 - db0,
                        "rules": (cpu2 - cpu1) + (db2 - db1),
                        "rules_db": db2 - db1,
                        "wall": wall2 - wall0,
                        **result,
                    }
                )
        lasting = Alert.objects.exclude(status="resolved").values_list("kind", flat=True)
        kept_out = Card.objects.exclude(health="ok").count()
        n_cards = len(cards)
        print(
            f"## Telemetry ingest + pool-health rules — {n_cards:,} cards ({args.nodes} nodes × 8), "
            f"{len(held):,} leased, an hour of readings stored, via {args.via}, "
            f"{args.rounds} rounds of 30 s\n"
        )
        print(
            "| round | ingest CPU s (of which PostgreSQL) | rules CPU s (of which PostgreSQL) "
            "| total CPU s | share of one core over 30 s | wall s |"
        )
        print("|---:|---:|---:|---:|---:|---:|")
        for i, r in enumerate(rows, 1):
            total = r["ingest"] + r["rules"]
            print(
                f"| {i} | {r['ingest']:.2f} ({r['ingest_db']:.2f}) | {r['rules']:.2f} "
                f"({r['rules_db']:.2f}) | {total:.2f} | {100 * total / 30:.1f} % | {r['wall']:.2f} |"
            )
        totals = [r["ingest"] + r["rules"] for r in rows]
        print(
            f"\nmedian share of one core: {100 * statistics.median(totals) / 30:.1f} % "
            f"(max {100 * max(totals) / 30:.1f} %); alerts lasting: "
            f"{sorted(set(lasting))} ({len(lasting)}); cards kept out: {kept_out}"
        )
    finally:
        connection.creation.destroy_test_db(old_name, verbosity=0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
