"""Reports at scale: 10,000 cards, 1,000,000 ended leases with usage records, on PostgreSQL.

Times the monthly usage report by team (and a few other shapes) and measures the memory of
streaming the CSV export of every record. Not a test; run by hand (see bench/README.md):

    .venv/bin/python bench/report_scale.py                    # about 3-5 minutes
    .venv/bin/python bench/report_scale.py --leases 200000 --keep-db

Needs PostgreSQL on 127.0.0.1:5432 (user postgres, trust auth). Drops and recreates the
database named by --database (the name must contain "bench").

Leases and records are written with COPY (psycopg's ``copy.write_row``); allocations are not
generated (the report reads usage records only; the records are built with the same rules as
``leasing.usage``: minute counts, a month boundary split, price × discount, cost per record).
"""

from __future__ import annotations

import argparse
import os
import random
import resource
import secrets
import statistics
import sys
import time
import tracemalloc
from bisect import bisect_right
from datetime import date, datetime, timedelta
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path
from zoneinfo import ZoneInfo

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--postgres", default="postgres://postgres@127.0.0.1:5432")
    p.add_argument("--database", default="cardpool_bench_reports")
    p.add_argument("--leases", type=int, default=1_000_000)
    p.add_argument("--nodes", type=int, default=1250, help="× 8 cards each (default 10,000)")
    p.add_argument("--teams", type=int, default=60)
    p.add_argument("--users", type=int, default=600)
    p.add_argument("--months", type=int, default=12, help="history spread over this many months")
    p.add_argument("--runs", type=int, default=5, help="timed runs per report")
    p.add_argument("--keep-db", action="store_true")
    p.add_argument("--seed", type=int, default=7)
    return p.parse_args(argv)


def setup_django(args) -> None:
    if "bench" not in args.database:
        sys.exit("--database must contain 'bench' (it is dropped and recreated)")
    import psycopg
    from psycopg import sql

    with psycopg.connect(f"{args.postgres}/postgres", autocommit=True) as conn:
        name = sql.Identifier(args.database)
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(name))
        conn.execute(sql.SQL("CREATE DATABASE {}").format(name))
    os.environ["DATABASE_URL"] = f"{args.postgres}/{args.database}"
    os.environ.setdefault("CARDPOOL_SECRET_KEY", secrets.token_hex(32))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", interactive=False, verbosity=0)


def drop_db(args) -> None:
    import psycopg
    from django.db import connections
    from psycopg import sql

    connections.close_all()
    with psycopg.connect(f"{args.postgres}/postgres", autocommit=True) as conn:
        conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(args.database))
        )


def _copy(model, columns: list[str], rows) -> int:
    """COPY rows (tuples in *columns* order) into *model*'s table; returns the count.

    Every other NOT NULL column with a default gets its default, so a column added to the
    model later does not break the bench (the smoke run in .ci/run would fail otherwise).
    """
    import json

    from django.db import connection, models

    table = model._meta.db_table
    extra_cols, extra = [], ()
    for field in model._meta.concrete_fields:
        if field.column in columns or field.null or not field.has_default():
            continue
        value = field.get_default()
        if isinstance(field, models.JSONField):
            value = json.dumps(value)
        else:
            value = field.get_db_prep_save(value, connection)
        extra_cols.append(field.column)
        extra += (value,)
    n = 0
    with connection.cursor() as cur:
        raw = cur.cursor  # psycopg 3
        cols = ", ".join(f'"{c}"' for c in [*columns, *extra_cols])
        with raw.copy(f'COPY "{table}" ({cols}) FROM STDIN') as copy:
            for row in rows:
                copy.write_row(row + extra)
                n += 1
    return n


def build_world(args, rnd: random.Random) -> dict:
    from django.contrib.auth import get_user_model

    from inventory.models import Card, CardModel, Node, Region
    from portal.models import Department, Membership, Team

    regions = [
        Region.objects.create(slug=f"r{i}", name=f"Region {i}", kind=Region.Kind.CENTRE)
        for i in range(4)
    ]
    models = [
        CardModel.objects.create(
            slug=f"bench-m{i}",
            name=f"Bench model {i}",
            vendor=vendor,
            memory_gb=80,
            price_per_hour=Decimal(price),
        )
        for i, (vendor, price) in enumerate(
            [("nvidia", "28.00"), ("nvidia", "45.00"), ("huawei", "18.00"), ("cambricon", "9.50"),
             ("hygon", "7.20"), ("amd", "22.00")]
        )
    ]  # fmt: skip
    Node.objects.bulk_create(
        Node(hostname=f"bn{i:05d}", region=regions[i % len(regions)]) for i in range(args.nodes)
    )
    nodes = list(Node.objects.order_by("pk").values_list("pk", "region_id"))
    Card.objects.bulk_create(
        (
            Card(node_id=node_id, card_model=models[k % len(models)], index=j, uuid=f"GPU-{k}-{j}")
            for k, (node_id, _r) in enumerate(nodes)
            for j in range(8)
        ),
        batch_size=5000,
    )
    departments = [Department.objects.create(slug=f"dept{i}", name=f"Dept {i}") for i in range(8)]
    teams = Team.objects.bulk_create(
        Team(slug=f"team{i:03d}", name=f"Team {i:03d}", department=departments[i % 8])
        for i in range(args.teams)
    )
    User = get_user_model()
    User.objects.bulk_create(User(username=f"u{i:04d}") for i in range(args.users))
    users = list(User.objects.filter(username__startswith="u").order_by("pk"))
    Membership.objects.bulk_create(
        Membership(user=u, team=teams[i % len(teams)], role=Membership.Role.MEMBER)
        for i, u in enumerate(users)
    )
    return {
        "models": [(m.pk, m.vendor, m.price_per_hour) for m in models],
        "nodes": nodes,
        "teams": [(t.pk, t.department_id) for t in teams],
        "users_by_team": {
            t.pk: [u.pk for i, u in enumerate(users) if i % len(teams) == k]
            for k, t in enumerate(teams)
        },
    }


def generate(args, world: dict, rnd: random.Random) -> tuple[int, int]:
    """COPY the leases, then their usage records (split at month boundaries)."""
    from leasing.models import Lease, UsageRecord
    from leasing.periods import month_of

    tz = ZoneInfo("Asia/Shanghai")
    end = datetime(2026, 7, 1, tzinfo=tz)
    span = timedelta(days=30.5 * args.months)
    begin = end - span
    priorities = ["normal"] * 7 + ["high", "critical", "preemptible"]
    record_rows = []
    # Month starts (site time zone) around the history, for a quick lookup per lease.
    starts = [month_of(begin - timedelta(days=31))[0]]
    while starts[-1] < end + timedelta(days=62):
        starts.append(month_of(starts[-1] + timedelta(days=32))[0])
    month_ends = starts[1:]
    month_firsts = [m.date() for m in starts[:-1]]
    next_first = {a: b for a, b in zip(month_firsts, month_firsts[1:], strict=False)}
    cent = Decimal("0.01")
    half = Decimal("0.5")

    def leases():
        for pk in range(1, args.leases + 1):
            team_id, dept_id = world["teams"][rnd.randrange(len(world["teams"]))]
            user_id = rnd.choice(world["users_by_team"][team_id])
            model_id, vendor, list_price = world["models"][rnd.randrange(len(world["models"]))]
            node_id, region_id = world["nodes"][rnd.randrange(len(world["nodes"]))]
            count = rnd.choice((1, 1, 1, 2, 2, 4, 8))
            minutes = max(1, int(rnd.expovariate(1 / 300)))
            submitted = begin + timedelta(minutes=rnd.randrange(int(span.total_seconds() // 60)))
            start = submitted + timedelta(minutes=int(rnd.expovariate(1 / 15)))
            stop = start + timedelta(minutes=minutes)
            priority = rnd.choice(priorities)
            lease = (
                pk, user_id, team_id, model_id, "{}", count, timedelta(minutes=minutes), start,
                stop, "ended", "expired", priority, 100, "development", True, "", False, "", "[]",
                submitted, stop, start, stop, "{}", "",
            )  # fmt: skip
            price = list_price * (half if priority == "preemptible" else 1)
            m_end = month_ends[bisect_right(month_ends, start)]
            m_first = month_firsts[bisect_right(month_ends, start)]
            pieces = [(start, min(stop, m_end))]
            if stop > m_end:
                pieces.append((m_end, stop))
            for i, (s, e) in enumerate(pieces):
                mins = int((e - s).total_seconds() // 60)
                if mins <= 0:
                    continue
                cm = mins * count
                record_rows.append(
                    (
                        pk, user_id, team_id, dept_id, model_id, vendor, node_id, region_id,
                        priority, m_first if i == 0 else next_first[m_first], s, e, count, mins,
                        cm, list_price,
                        Decimal(1) if priority != "preemptible" else half, price,
                        (Decimal(cm) * price / 60).quantize(cent, rounding=ROUND_HALF_UP),
                        int((start - submitted).total_seconds()) if i == 0 else None,
                    )
                )  # fmt: skip
            yield lease

    lease_cols = [
        "id", "user_id", "team_id", "card_model_id", "requirements", "count", "duration",
        "start_at", "end_at", "status", "end_reason", "priority", "priority_rank", "purpose",
        "same_node", "description", "borrowed", "approval_reason", "warning_offsets",
        "submitted_at", "status_changed_at", "activated_at", "ended_at", "access",
        "failure_reason",
    ]  # fmt: skip
    n_leases = _copy(Lease, lease_cols, leases())
    record_cols = [
        "lease_id", "user_id", "team_id", "department_id", "card_model_id", "vendor", "node_id",
        "region_id", "priority", "month", "start_at", "end_at", "cards", "minutes",
        "card_minutes", "list_price", "discount", "price", "cost", "wait_seconds",
    ]  # fmt: skip
    n_records = _copy(UsageRecord, record_cols, iter(record_rows))
    from django.db import connection

    with connection.cursor() as cur:
        cur.execute("SELECT setval(pg_get_serial_sequence('leasing_lease', 'id'), %s)", [n_leases])
        cur.execute("ANALYZE leasing_lease")
        cur.execute("ANALYZE leasing_usagerecord")
    return n_leases, n_records


def timed(fn, runs: int) -> tuple[float, float]:
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times), statistics.median(times)


def rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def stream_csv(f, *, trace: bool) -> tuple[int, int, float, float, float]:
    """Rows, bytes, seconds, tracemalloc peak (MiB) and max-RSS growth (MiB) of a detail CSV."""
    from leasing.billing import exports

    rss_before = rss_mb()
    if trace:
        tracemalloc.start()
    t = time.perf_counter()
    response = exports.report_csv(f, detail=True)
    size = lines = 0
    for chunk in response.streaming_content:
        size += len(chunk)
        lines += 1
    seconds = time.perf_counter() - t
    peak = 0
    if trace:
        _cur, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    return lines - 1, size, seconds, peak / 2**20, rss_mb() - rss_before


def main(argv=None) -> None:
    args = parse_args(argv)
    rnd = random.Random(args.seed)
    t0 = time.perf_counter()
    print(f"database {args.database}: recreate and migrate …", flush=True)
    setup_django(args)
    try:
        world = build_world(args, rnd)
        t1 = time.perf_counter()
        print(
            f"pool: {args.nodes * 8:,} cards on {args.nodes:,} nodes ({t1 - t0:.1f} s)", flush=True
        )
        n_leases, n_records = generate(args, world, rnd)
        t2 = time.perf_counter()
        print(f"generated {n_leases:,} leases, {n_records:,} usage records ({t2 - t1:.1f} s)")
        report(args)
    finally:
        if not args.keep_db:
            drop_db(args)


def report(args) -> None:
    from django.db import reset_queries

    from leasing.billing import exports, reports
    from portal.models import Team

    month = date(2026, 5, 1)
    last = reports.month_bounds(month)[1]
    shapes = [
        ("month by team", dict(start=month, end=last, group_by="team", period="month")),
        ("month by user", dict(start=month, end=last, group_by="user", period="month")),
        ("month by card model × day", dict(start=month, end=last, group_by="card_model", period="day")),
        ("year by department × week", dict(start=date(2025, 7, 1), end=date(2026, 6, 30), group_by="department", period="week")),
        ("year by team × month", dict(start=date(2025, 7, 1), end=date(2026, 6, 30), group_by="team", period="month")),
    ]  # fmt: skip
    print()
    print(f"{'report':34} {'rows':>6} {'records':>10} {'best s':>8} {'median s':>9}")
    for name, kw in shapes:
        f = reports.ReportFilter(**kw)
        out = reports.usage_report(f)
        best, median = timed(lambda f=f: reports.usage_report(f), args.runs)
        records = reports.records(f).count()
        print(f"{name:34} {len(out['rows']):>6} {records:>10,} {best:>8.3f} {median:>9.3f}")
        reset_queries()
    team = Team.objects.order_by("pk").first()
    best, median = timed(lambda: list(reports.statement(team, month)["lines"]), args.runs)
    print(f"{'statement, one team, one month':34} {'':>6} {'':>10} {best:>8.3f} {median:>9.3f}")
    print()
    print(
        f"{'CSV of every record':34} {'rows':>10} {'MiB':>8} {'s':>7} {'py peak MiB':>12} {'RSS +MiB':>9}"
    )
    for name, kw in [
        ("one month", dict(start=month, end=last)),
        ("three months", dict(start=date(2026, 4, 1), end=date(2026, 6, 30))),
        ("whole year", dict(start=date(2025, 7, 1), end=date(2026, 6, 30))),
    ]:
        f = reports.ReportFilter(**kw)
        rows, size, seconds, _peak, rss = stream_csv(f, trace=False)
        peak = stream_csv(f, trace=True)[3]  # tracemalloc slows it down: a second pass
        print(
            f"{name:34} {rows:>10,} {size / 2**20:>8.1f} {seconds:>7.1f} {peak:>12.1f} {rss:>9.1f}"
        )
    t = time.perf_counter()
    exports.report_xlsx(
        reports.ReportFilter(start=month, end=last, group_by="team"), teams="all"
    ).close()
    print(f"\nXLSX, month by team: {time.perf_counter() - t:.2f} s")


if __name__ == "__main__":
    main()
