"""Usage records reconcile: a month's statement == the usage report == Σ allocations' minutes × price.

The expected figures are computed independently, minute by minute from the allocations, with a
price function written here from the rules in docs/reports.md (team override, else the latest
list price, else the card model's price; × 0.5 when preemptible).
"""

from __future__ import annotations

from datetime import date, datetime, timedelta
from decimal import Decimal
from zoneinfo import ZoneInfo

import pytest
import time_machine

from leasing.billing import reports, usage
from leasing.choices import EndReason, LeaseStatus, Priority
from leasing.lifecycle import changes, provisioning
from leasing.models import Allocation, Lease, Price, TeamPrice, UsageRecord
from tests.factories import CardModelFactory, make_node
from tests.leasing.conftest import ask

TZ = ZoneInfo("Asia/Shanghai")
MINUTE = timedelta(minutes=1)


def at(month: int, day: int, hour: int, minute: int = 0, second: int = 0, year: int = 2026):
    return datetime(year, month, day, hour, minute, second, tzinfo=TZ)


@pytest.fixture
def world(db, vision, nlp, alice, bob):
    """One card model at 30.00/h, 60.00/h from 15 Nov; nlp pays 24.00/h from 1 Nov."""
    model = CardModelFactory(slug="rec-a100", name="Rec A100", price_per_hour=Decimal("30.00"))
    node = make_node(model, cards=4, hostname="rec-node1")
    node2 = make_node(model, cards=4, hostname="rec-node2")
    Price.objects.create(
        card_model=model, price_per_hour=Decimal("60.00"), effective_from=at(11, 15, 0)
    )
    TeamPrice.objects.create(
        team=nlp, card_model=model, price_per_hour=Decimal("24.00"), effective_from=at(11, 1, 0)
    )
    cards = list(node.cards.order_by("index")) + list(node2.cards.order_by("index"))
    return {
        "model": model,
        "cards": cards,
        "vision": vision,
        "nlp": nlp,
        "alice": alice,
        "bob": bob,
    }


def _ended_lease(w, *, user, team, pieces, priority=Priority.NORMAL, submitted=None):
    """An ended lease holding cards[i] over [start, end) for each (i, start, end)."""
    start = min(p[1] for p in pieces)
    end = max(p[2] for p in pieces)
    lease = Lease.objects.create(
        user=user,
        team=team,
        card_model=w["model"],
        count=len({p[0] for p in pieces}),
        duration=end - start,
        start_at=start,
        end_at=end,
        status=LeaseStatus.ENDED,
        end_reason=EndReason.EXPIRED,
        priority=priority,
        submitted_at=submitted or start,
        activated_at=start,
        ended_at=end,
    )
    for i, s, e in pieces:
        Allocation.objects.create(lease=lease, card=w["cards"][i], start_at=s, end_at=e)
    return lease


def expected_price(team, model, priority, t: datetime) -> Decimal:
    """The price per card-hour in force at t, from the rules (independent of leasing.usage)."""
    override = (
        TeamPrice.objects.filter(team=team, card_model=model, effective_from__lte=t)
        .order_by("-effective_from")
        .first()
    )
    listed = (
        Price.objects.filter(card_model=model, effective_from__lte=t)
        .order_by("-effective_from")
        .first()
    )
    price = (override or listed or model).price_per_hour
    return price * (Decimal("0.5") if priority == Priority.PREEMPTIBLE else 1)


def expected_cost(team_id: int, lo: datetime, hi: datetime) -> tuple[int, Decimal]:
    """Card-minutes and cost of a team in [lo, hi), minute by minute from the allocations."""
    minutes, cost = 0, Decimal(0)
    for a in Allocation.objects.filter(lease__team_id=team_id).select_related(
        "lease__team", "lease__card_model"
    ):
        t = a.start_at.replace(second=0, microsecond=0)
        stop = a.end_at.replace(second=0, microsecond=0)
        while t < stop:
            if lo <= t < hi:
                minutes += 1
                cost += expected_price(a.lease.team, a.lease.card_model, a.lease.priority, t) / 60
            t += MINUTE
    return minutes, cost


@pytest.fixture
def november(world):
    """Leases of vision and nlp around November 2026 (see each comment), recorded."""
    w = world
    vision, nlp, alice, bob = w["vision"], w["nlp"], w["alice"], w["bob"]
    leases = {
        # Across the month boundary (site time zone): 2 h in October, 2 h in November, 2 cards.
        "boundary": _ended_lease(
            w, user=alice, team=vision, pieces=[(0, at(10, 31, 22), at(11, 1, 2)), (1, at(10, 31, 22), at(11, 1, 2))]
        ),
        # Across the price change at 15 Nov 00:00: 4 h at 30, 4 h at 60.
        "price_change": _ended_lease(
            w, user=alice, team=vision, pieces=[(2, at(11, 14, 20), at(11, 15, 4))],
            submitted=at(11, 14, 19, 30),
        ),
        # Preemptible: half price.
        "preemptible": _ended_lease(
            w, user=alice, team=vision, pieces=[(3, at(11, 10, 10), at(11, 10, 12))],
            priority=Priority.PREEMPTIBLE,
        ),
        # Seconds are cut: 10:00:30–11:00:45 counts 10:00–11:00; two nodes, a card moved.
        "seconds": _ended_lease(
            w, user=alice, team=vision,
            pieces=[(0, at(11, 20, 10, 0, 30), at(11, 20, 11, 0, 45)), (4, at(11, 20, 11, 0, 45), at(11, 20, 12, 7, 5))],
        ),
        # nlp's override (24/h) wins over the list price, before and after 15 Nov.
        "override": _ended_lease(
            w, user=bob, team=nlp, pieces=[(5, at(11, 14, 22), at(11, 15, 1, 30))]
        ),
        # December, outside the month.
        "december": _ended_lease(
            w, user=alice, team=vision, pieces=[(6, at(12, 1, 0), at(12, 1, 1))]
        ),
    }  # fmt: skip
    for lease in leases.values():
        assert usage.usage_record_lease(lease.pk) > 0
    return leases


NOV = (at(11, 1, 0), at(12, 1, 0))


def test_month_statement_equals_report_equals_allocations(november, world, fin):
    vision, nlp = world["vision"], world["nlp"]
    f = reports.ReportFilter(start=date(2026, 11, 1), end=date(2026, 11, 30), group_by="team")
    report = reports.usage_report(f)
    by_team = {row["key"]: row for row in report["rows"]}
    for team in (vision, nlp):
        minutes, cost = expected_cost(team.pk, *NOV)
        st = reports.statement(team, date(2026, 11, 1))
        assert st["totals"]["card_minutes"] == minutes
        assert st["totals"]["cost"] == cost == by_team[team.pk]["cost"]
        assert sum(line.cost for line in st["lines"]) == cost
    assert report["totals"]["cost"] == sum(r["cost"] for r in report["rows"])
    # The hand-worked figures, so the independent check is not checking itself.
    assert by_team[vision.pk]["cost"] == Decimal("637.00")  # 120 + (120 + 240) + 30 + (60 + 67)
    assert by_team[nlp.pk]["cost"] == Decimal("84.00")  # 3.5 h × 24


def test_splits_at_month_boundary_and_price_change(november):
    boundary = list(november["boundary"].usage_records.order_by("start_at"))
    assert [(r.month, r.card_minutes, r.cost) for r in boundary] == [
        (date(2026, 10, 1), 240, Decimal("120.00")),
        (date(2026, 11, 1), 240, Decimal("120.00")),
    ]
    change = list(november["price_change"].usage_records.order_by("start_at"))
    assert [(r.minutes, r.price, r.cost) for r in change] == [
        (240, Decimal("30.0000"), Decimal("120.00")),
        (240, Decimal("60.0000"), Decimal("240.00")),
    ]
    assert change[0].wait_seconds == 30 * 60 and change[1].wait_seconds is None
    pre = november["preemptible"].usage_records.get()
    assert (pre.list_price, pre.discount, pre.price, pre.cost) == (
        Decimal("30.00"), Decimal("0.5000"), Decimal("15.0000"), Decimal("30.00")
    )  # fmt: skip
    override = list(november["override"].usage_records.order_by("start_at"))
    assert {r.list_price for r in override} == {Decimal("24.00")}
    seconds = list(november["seconds"].usage_records.order_by("start_at"))
    assert [(r.node.hostname, r.card_minutes) for r in seconds] == [
        ("rec-node1", 60),
        ("rec-node2", 67),
    ]


def test_day_and_week_reports_add_up_to_the_month(november, world):
    month = reports.usage_report(
        reports.ReportFilter(start=date(2026, 11, 1), end=date(2026, 11, 30), period="month")
    )
    for period in ("day", "week"):
        for group_by in reports.GROUPS:
            r = reports.usage_report(
                reports.ReportFilter(
                    start=date(2026, 11, 1),
                    end=date(2026, 11, 30),
                    period=period,
                    group_by=group_by,
                )
            )
            assert sum(row["cost"] for row in r["rows"]) == month["totals"]["cost"]
            assert sum(row["card_minutes"] for row in r["rows"]) == month["totals"]["card_minutes"]
    days = reports.usage_report(
        reports.ReportFilter(start=date(2026, 11, 1), end=date(2026, 11, 30), period="day")
    )
    assert {row["period"] for row in days["rows"]} >= {date(2026, 11, 14), date(2026, 11, 20)}


def test_report_is_aggregated_in_a_few_queries(november, django_assert_max_num_queries):
    f = reports.ReportFilter(start=date(2026, 10, 1), end=date(2026, 12, 31), group_by="user")
    # The grouped records, their totals, the labels, the held time not yet recorded (none).
    with django_assert_max_num_queries(4):
        reports.usage_report(f)


def test_recording_twice_writes_nothing_more(november):
    count = UsageRecord.objects.count()
    for lease in november.values():
        assert usage.usage_record_lease(lease.pk) == 0
    assert UsageRecord.objects.count() == count


def test_periodic_task_records_missing_leases_and_skips_others(world):
    w = world
    # First by pk: a lease that held a card under a minute (nothing to bill, must not block).
    blip = _ended_lease(
        w, user=w["alice"], team=w["vision"], pieces=[(0, at(11, 2, 9, 0, 10), at(11, 2, 9, 0, 50))]
    )
    running = _ended_lease(
        w, user=w["alice"], team=w["vision"], pieces=[(1, at(11, 2, 9), at(11, 2, 10))]
    )
    Lease.objects.filter(pk=running.pk).update(status=LeaseStatus.ACTIVE, end_reason="")
    missed = _ended_lease(
        w, user=w["alice"], team=w["vision"], pieces=[(2, at(11, 2, 9), at(11, 2, 10))]
    )
    assert list(usage.leases_missing_usage().values_list("pk", flat=True)) == [missed.pk]
    from leasing.billing.tasks import usage_record_missing

    assert usage_record_missing() == 1
    assert usage_record_missing() == 0
    assert not blip.usage_records.exists() and not running.usage_records.exists()
    assert missed.usage_records.get().card_minutes == 60


T0 = datetime(2026, 12, 1, 9, 0, tzinfo=TZ)


def test_early_release_bills_only_the_time_held(
    db, alice, vision, django_capture_on_commit_callbacks
):
    """Through the services: asked for 2 h, released after 37 min 20 s → 37 card-minutes each."""
    model = CardModelFactory(slug="rel-a100", name="Rel A100", price_per_hour=Decimal("12.00"))
    make_node(model, cards=4, hostname="rel-node")
    with time_machine.travel(T0, tick=False) as clock:
        lease = ask(alice, vision, model, count=2, duration=timedelta(hours=2))
        provisioning.provision_step(lease_id=lease.pk)
        lease.refresh_from_db()
        assert lease.status == LeaseStatus.ACTIVE
        clock.move_to(T0 + timedelta(minutes=37, seconds=20))
        with django_capture_on_commit_callbacks(execute=False) as callbacks:
            changes.lease_release(lease=lease, user=alice)
            provisioning.lease_finish_release(lease_id=lease.pk)
        mine = [c for c in callbacks if "usage_record_lease_safely" in c.__code__.co_names]
        assert mine, "the end-of-lease hook queued no usage recording"
        for callback in mine:
            callback()
    record = lease.usage_records.get()
    assert (record.cards, record.minutes, record.card_minutes) == (2, 37, 74)
    assert record.cost == Decimal("14.80")  # 74 × 12 / 60
    minutes, cost = expected_cost(vision.pk, T0, T0 + timedelta(days=1))
    assert (minutes, cost) == (74, record.cost)
