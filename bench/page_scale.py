"""Pages at scale: 10,000 cards on 1,250 nodes, 1,000,000 past leases, most cards held now.

Times the pages people open most — dashboard, catalogue, a card model, the node list, my
leases, a lease, the team page, the pool page, the monthly report — and the lease list of the
API: median, p95 and max over ``--runs`` requests each, and the SQL statements per request.
Requests go through Django's test client in this process (the whole view, middleware,
templates and database; no network and no web server in front). Not a test; run by hand
(bench/README.md):

    .venv/bin/python bench/page_scale.py            # about 4 minutes, most of it the data

Needs PostgreSQL on 127.0.0.1:5432 (user postgres, trust auth). Drops and recreates the
database named by --database (the name must contain "bench").

The world is ``bench/report_scale.py``'s (6 card models, 60 teams in 8 departments, 600
users, 1,000,000 ended leases over 12 months with their usage records, written with COPY), on
a clock stopped at the end of that history. On top of it, as the portal would hold them now:
``--busy`` of the cards in active leases of 1–4 cards (allocations included), a queue of
waiting leases per model, and the bench user (a team lead with a long history) holding a few.
Past leases carry no allocation rows here (random history would overlap on a card, which
the exclusion constraint refuses); the pages read allocations only of the leases they show
and of open ones, through the ``(card, end_at)`` index.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time
from datetime import datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import report_scale  # noqa: E402  (bench/report_scale.py: database, world, history)

NOW = datetime(2026, 6, 30, 15, 0, tzinfo=ZoneInfo("Asia/Shanghai"))


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--postgres", default="postgres://postgres@127.0.0.1:5432")
    p.add_argument("--database", default="cardpool_bench_pages")
    p.add_argument("--leases", type=int, default=1_000_000, help="past leases (1,000,000)")
    p.add_argument("--nodes", type=int, default=1250, help="× 8 cards each (default 10,000)")
    p.add_argument("--teams", type=int, default=60)
    p.add_argument("--users", type=int, default=600)
    p.add_argument("--months", type=int, default=12, help="history spread over this many months")
    p.add_argument("--busy", type=float, default=0.7, help="share of cards held now (0.7)")
    p.add_argument("--queued", type=int, default=40, help="waiting leases per card model (40)")
    p.add_argument("--runs", type=int, default=40, help="timed requests per page (40)")
    p.add_argument("--keep-db", action="store_true")
    p.add_argument("--seed", type=int, default=7)
    return p.parse_args(argv)


def open_leases(args, world: dict, rnd: random.Random) -> dict:
    """Active leases on --busy of the cards, a queue per model, and the bench user's own."""
    from inventory.models import Card
    from leasing.choices import LeaseStatus
    from leasing.models import Allocation, Lease
    from portal.models import Membership, Profile

    team_ids = [t for t, _d in world["teams"]]
    me_team = team_ids[0]
    me = world["users_by_team"][me_team][0]
    Membership.objects.filter(user_id=me, team_id=me_team).update(role=Membership.Role.LEAD)
    Profile.objects.get_or_create(user_id=me)
    ops = world["users_by_team"][team_ids[1]][0]
    Profile.objects.update_or_create(user_id=ops, defaults={"is_operator": True})

    cards_by_node: dict[int, list[tuple[int, int]]] = {}
    for pk, node_id, model_id in Card.objects.values_list("pk", "node_id", "card_model_id"):
        cards_by_node.setdefault(node_id, []).append((pk, model_id))
    leases: list[Lease] = []
    holdings: list[list[int]] = []
    total = sum(len(c) for c in cards_by_node.values())
    target = int(total * args.busy)
    held = 0
    nodes = list(cards_by_node)
    rnd.shuffle(nodes)
    mine = 0
    for node_id in nodes:
        free = cards_by_node[node_id]
        while free and held < target:
            count = min(len(free), rnd.choice((1, 1, 2, 2, 4)))
            taken, free = free[:count], free[count:]
            team_id = me_team if mine < 6 else rnd.choice(team_ids)
            user_id = me if mine < 6 else rnd.choice(world["users_by_team"][team_id])
            mine += 1
            start = NOW - timedelta(minutes=rnd.randrange(10, 3000))
            end = NOW + timedelta(minutes=rnd.randrange(30, 5000))
            leases.append(
                Lease(
                    user_id=user_id,
                    team_id=team_id,
                    card_model_id=taken[0][1],
                    count=count,
                    duration=end - start,
                    start_at=start,
                    end_at=end,
                    status=LeaseStatus.ACTIVE,
                    status_changed_at=start,
                    submitted_at=start,
                    activated_at=start,
                    access={"backend": "local", "nodes": []},
                )
            )
            holdings.append([pk for pk, _m in taken])
            held += count
        if held >= target:
            break
    Lease.objects.bulk_create(leases, batch_size=2000)
    Allocation.objects.bulk_create(
        (
            Allocation(
                card_id=card_id, lease_id=lease.pk, start_at=lease.start_at, end_at=lease.end_at
            )
            for lease, cards in zip(leases, holdings, strict=True)
            for card_id in cards
        ),
        batch_size=5000,
    )
    queued = []
    for model_id, _vendor, _price in world["models"]:
        for i in range(args.queued):
            team_id = rnd.choice(team_ids)
            submitted = NOW - timedelta(minutes=rnd.randrange(1, 600))
            queued.append(
                Lease(
                    user_id=rnd.choice(world["users_by_team"][team_id]),
                    team_id=team_id,
                    card_model_id=model_id,
                    count=rnd.choice((1, 2, 4, 8)),
                    duration=timedelta(hours=rnd.choice((1, 4, 12))),
                    start_at=submitted,
                    end_at=submitted + timedelta(hours=4),
                    status=LeaseStatus.QUEUED,
                    status_changed_at=submitted,
                    submitted_at=submitted,
                    estimated_start=NOW + timedelta(minutes=30 * (i + 1)),
                )
            )
    Lease.objects.bulk_create(queued, batch_size=2000)
    from django.db import connection

    with connection.cursor() as cur:
        for table in ("leasing_lease", "leasing_allocation", "inventory_card", "inventory_node"):
            cur.execute(f"ANALYZE {table}")
    return {
        "me": me,
        "ops": ops,
        "team_slug": f"team{0:03d}",
        "my_lease": leases[0].pk,
        "held_cards": held,
        "active": len(leases),
        "queued": len(queued),
    }


def pages(ctx: dict) -> list[tuple[str, str, str]]:
    """(label, who, url) — who is "me" (a team lead) or "ops" (an operator)."""
    first = NOW.date().replace(day=1)
    return [
        ("dashboard", "me", "/"),
        ("catalogue", "me", "/inventory/"),
        ("card model", "me", "/inventory/models/bench-m0/"),
        ("node list", "me", "/inventory/nodes/"),
        ("my leases", "me", "/leases/"),
        ("a lease", "me", f"/leases/{ctx['my_lease']}/"),
        ("team page", "me", f"/teams/{ctx['team_slug']}/"),
        ("pool page", "ops", "/pool/"),
        (
            "monthly report (page)",
            "ops",
            f"/reports/?start={first}&end={NOW.date()}&group_by=team&period=month",
        ),
        ("API: my leases", "me", "/api/v1/leases/"),
    ]


def measure(args, ctx: dict) -> list[dict]:
    from django.contrib.auth import get_user_model
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    User = get_user_model()
    clients = {}
    for who in ("me", "ops"):
        client = Client(HTTP_ACCEPT_LANGUAGE="zh-hans")
        client.force_login(User.objects.get(pk=ctx[who]))
        clients[who] = client
    rows = []
    for label, who, url in pages(ctx):
        client = clients[who]
        first = client.get(url)
        if first.status_code != 200:
            rows.append({"page": label, "url": url, "status": first.status_code})
            continue
        for _ in range(2):
            client.get(url)
        with CaptureQueriesContext(connection) as queries:
            response = client.get(url)
        n_queries = len(queries)  # now: each later request empties the log (reset_queries)
        times = []
        for _ in range(args.runs):
            t = time.perf_counter()
            client.get(url)
            times.append((time.perf_counter() - t) * 1000)
        times.sort()
        rows.append(
            {
                "page": label,
                "url": url,
                "status": 200,
                "queries": n_queries,
                "kib": len(response.content) / 1024,
                "median": statistics.median(times),
                "p95": times[min(len(times) - 1, round(0.95 * (len(times) - 1)))],
                "max": times[-1],
            }
        )
        print(f"  {label}: p95 {rows[-1]['p95']:.0f} ms", flush=True)
    return rows


def main(argv=None) -> None:
    args = parse_args(argv)
    os.environ.setdefault("CARDPOOL_ALLOWED_HOSTS", "testserver")
    os.environ.setdefault("CARDPOOL_SECURE_COOKIES", "false")
    rnd = random.Random(args.seed)
    t0 = time.perf_counter()
    print(f"database {args.database}: recreate and migrate …", flush=True)
    report_scale.setup_django(args)
    from django.core.management import call_command

    # Production settings serve hashed static files from a manifest, as on a real server.
    call_command("collectstatic", interactive=False, verbosity=0)
    try:
        import time_machine

        world = report_scale.build_world(args, rnd)
        n_leases, n_records = report_scale.generate(args, world, rnd)
        t1 = time.perf_counter()
        print(f"history: {n_leases:,} leases, {n_records:,} usage records ({t1 - t0:.0f} s)")
        with time_machine.travel(NOW, tick=True):
            ctx = open_leases(args, world, rnd)
            print(
                f"now: {ctx['active']:,} active leases on {ctx['held_cards']:,} cards, "
                f"{ctx['queued']} waiting ({time.perf_counter() - t1:.0f} s); timing …",
                flush=True,
            )
            rows = measure(args, ctx)
    finally:
        if not args.keep_db:
            report_scale.drop_db(args)
    cards = args.nodes * 8
    print()
    print(
        f"## Pages at scale — {cards:,} cards on {args.nodes:,} nodes, {n_leases:,} past leases, "
        f"{ctx['active']:,} active ({ctx['held_cards']:,} cards held), {ctx['queued']} waiting; "
        f"{args.runs} requests per page, in-process test client, zh-hans"
    )
    print()
    print("| page | URL | SQL statements | KiB | median ms | p95 ms | max ms |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for r in rows:
        if r["status"] != 200:
            print(f"| {r['page']} | `{r['url']}` | HTTP {r['status']} | | | | |")
            continue
        print(
            f"| {r['page']} | `{r['url']}` | {r['queries']} | {r['kib']:.0f} | "
            f"{r['median']:.0f} | {r['p95']:.0f} | {r['max']:.0f} |"
        )
    print(f"\n(total {time.perf_counter() - t0:.0f} s)")


if __name__ == "__main__":
    main()
