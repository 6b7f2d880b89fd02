"""Finance's "this month" is complete at any moment (issue #14).

Reports, statements, exports, charts and the API show the usage accrued by running leases up
to now, labelled, beside the recorded usage of ended leases; accrued cost uses the price book
(team prices); a month's statement closes when the month ends and never changes after.
"""

from __future__ import annotations

import csv
import io
from datetime import date, datetime, timedelta
from decimal import Decimal
from html import unescape
from zoneinfo import ZoneInfo

import openpyxl
import pytest
import time_machine

from leasing.billing import accrued, reports, usage
from leasing.billing.tasks import usage_close_month
from leasing.choices import EndReason, LeaseStatus
from leasing.lifecycle import changes, provisioning
from leasing.models import Allocation, Lease, Price, TeamPrice, UsageRecord
from leasing.teams.selectors import team_month_total, team_overview
from portal.models import Membership
from tests.factories import CardModelFactory, MembershipFactory, UserFactory, make_node
from tests.leasing.conftest import ask

TZ = ZoneInfo("Asia/Shanghai")
DEC = reports.ReportFilter(start=date(2026, 12, 1), end=date(2026, 12, 31), group_by="team")


def at(month: int, day: int, hour: int, minute: int = 0) -> datetime:
    return datetime(2026, month, day, hour, minute, tzinfo=TZ)


def _body(response) -> bytes:
    return b"".join(response.streaming_content) if response.streaming else response.content


@pytest.fixture
def model(db, vision):
    """List price 30.00/h; vision pays its own 40.00/h (a team price)."""
    m = CardModelFactory(slug="acc-h100", name="Acc H100", price_per_hour=Decimal("30.00"))
    make_node(m, cards=8, hostname="acc-node1")
    make_node(m, cards=8, hostname="acc-node2")
    TeamPrice.objects.create(
        team=vision, card_model=m, price_per_hour=Decimal("40.00"), effective_from=at(11, 1, 0)
    )
    return m


@pytest.fixture
def carol(vision):
    user = UserFactory(username="carol")
    MembershipFactory(user=user, team=vision, role=Membership.Role.MEMBER)
    return user


def _start(user, team, model, count, duration):
    lease = ask(user, team, model, count=count, duration=duration)
    provisioning.provision_step(lease_id=lease.pk)
    lease.refresh_from_db()
    assert lease.status == LeaseStatus.ACTIVE
    return lease


def _release(lease, user, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        changes.lease_release(lease=lease, user=user)
        provisioning.lease_finish_release(lease_id=lease.pk)


@pytest.fixture
def finding(model, vision, alice, carol, django_capture_on_commit_callbacks):
    """The finding: one ended lease of 0.1 card-hours and an 8-card lease running an hour.

    Leaves the clock at 2026-12-10 11:00 (Asia/Shanghai)."""
    with time_machine.travel(at(12, 10, 9), tick=False) as clock:
        short = _start(alice, vision, model, 1, timedelta(hours=2))
        clock.move_to(at(12, 10, 9, 6))
        _release(short, alice, django_capture_on_commit_callbacks)
        clock.move_to(at(12, 10, 10))
        running = _start(carol, vision, model, 8, timedelta(hours=4))
        clock.move_to(at(12, 10, 11))
        yield {"short": short, "running": running, "clock": clock}


def test_report_shows_running_leases_as_accrued(finding, vision):
    report = reports.usage_report(DEC)
    by_kind = {(row["key"], row["usage"]): row for row in report["rows"]}
    recorded = by_kind[(vision.pk, "recorded")]
    running = by_kind[(vision.pk, "accrued")]
    assert (recorded["card_hours"], recorded["cost"], recorded["leases"]) == (
        Decimal("0.10"), Decimal("4.00"), 1
    )  # fmt: skip
    # 8 cards × 1 h at vision's own price (40.00), not the list price (30.00).
    assert (running["card_hours"], running["cost"], running["leases"]) == (
        Decimal("8.00"), Decimal("320.00"), 1
    )  # fmt: skip
    assert str(running["usage_label"]) == "Accrued (running)"
    totals = report["totals"]
    assert (totals["card_hours"], totals["cost"], totals["leases"]) == (
        Decimal("8.10"), Decimal("324.00"), 2
    )  # fmt: skip
    assert totals["accrued"]["card_hours"] == Decimal("8.00")
    assert report["open"] and report["as_of"] == at(12, 10, 11)


def test_team_page_and_finance_report_agree(finding, vision):
    """This month so far: the team page's card-hours and cost equal the report's totals."""
    team = team_overview(vision, now=at(12, 10, 11))
    all_models = next(row for row in team["rows"] if row.card_model is None)
    report = reports.usage_report(replace_team(DEC, vision))
    assert all_models.used_hours.quantize(Decimal("0.01")) == report["totals"]["card_hours"]
    assert report["totals"]["card_hours"] == Decimal("8.10")
    # Money too: the team page's cost so far is the report's (the one price rule).
    assert all_models.money_spent.quantize(Decimal("0.01")) == report["totals"]["cost"]
    st = reports.statement(vision, date(2026, 12, 1))
    assert (st["totals"]["card_hours"], st["totals"]["cost"]) == (
        report["totals"]["card_hours"], report["totals"]["cost"]
    )  # fmt: skip
    # The lead's dashboard reads the same total line on its own.
    total = team_month_total(vision, now=at(12, 10, 11))
    assert (total.used_hours, total.money_spent, total.concurrent_now) == (
        all_models.used_hours, all_models.money_spent, all_models.concurrent_now
    )  # fmt: skip
    assert total.concurrent_now == 8


def replace_team(f: reports.ReportFilter, team) -> reports.ReportFilter:
    return reports.ReportFilter(
        start=f.start, end=f.end, group_by=f.group_by, period=f.period, team_ids=(team.pk,)
    )


def test_api_and_page_give_the_same_figures(finding, vision, fin, client):
    client.defaults["HTTP_ACCEPT_LANGUAGE"] = "en"
    client.force_login(fin)
    query = "start=2026-12-01&end=2026-12-31&group_by=team"
    body = client.get(f"/api/v1/reports/usage/?{query}").json()
    rows = {
        (r["label"], r["usage"]): (Decimal(str(r["card_hours"])), Decimal(str(r["cost"])))
        for r in body["rows"]
    }
    assert rows == {
        ("Vision", "recorded"): (Decimal("0.10"), Decimal("4.00")),
        ("Vision", "accrued"): (Decimal("8.00"), Decimal("320.00")),
    }
    assert Decimal(str(body["totals"]["card_hours"])) == Decimal("8.10")
    assert Decimal(str(body["totals"]["accrued"]["cost"])) == Decimal("320.00")
    assert body["open"] is True and body["as_of"] == "2026-12-10T03:00:00Z"
    html = client.get(f"/reports/?{query}").content.decode()
    assert 'data-usage="accrued"' in html and "Accrued (running)" in html
    assert "320.00" in html and "8.10" in html and "324.00" in html
    assert "As of 2026-12-10 11:00 (Asia/Shanghai)" in html


def test_as_of_is_in_the_readers_time_zone_and_language(finding, fin, client):
    fin.profile.timezone = "Europe/Berlin"
    fin.profile.save()
    client.defaults["HTTP_ACCEPT_LANGUAGE"] = "zh-hans"
    client.force_login(fin)
    html = client.get("/reports/statements/vision/2026-12/").content.decode()
    assert "2026-12-10 04:00" in html and "Europe/Berlin" in html  # 11:00 in Shanghai
    assert "应计（运行中）" in html and "已记录" in html


def test_statement_lists_accrued_lines_apart(finding, vision, lena, client):
    client.defaults["HTTP_ACCEPT_LANGUAGE"] = "en"
    client.force_login(lena)
    html = client.get("/reports/statements/vision/2026-12/").content.decode()
    assert 'data-statement-state="open"' in html
    assert f'data-lease="{finding["running"].pk}" data-usage="accrued"' in html
    assert f'data-lease="{finding["short"].pk}"' in html
    rows = _sheet(client.get("/reports/statements/vision/2026-12/?format=xlsx"))

    header = next(r for r in rows if r[0] == "Lease")
    assert header[-1] == "Usage"
    kinds = {r[0]: r[-1] for r in rows if isinstance(r[0], int)}
    assert kinds == {finding["short"].pk: "Recorded", finding["running"].pk: "Accrued (running)"}
    status = next(r[1] for r in rows if r[0] == "Status")
    assert status.startswith("Open") and "2026-12-10 11:00" in status
    assert [r[9] for r in rows if r[0] == "Total"] == [4.0, 320.0, 324.0]


def _sheet(response):
    wb = openpyxl.load_workbook(io.BytesIO(_body(response)), read_only=True)
    return [list(row) or [None] for row in wb.worksheets[0].iter_rows(values_only=True)]


def test_exports_say_recorded_or_accrued(finding, fin, client):
    client.defaults["HTTP_ACCEPT_LANGUAGE"] = "en"
    client.force_login(fin)
    query = "start=2026-12-01&end=2026-12-31&group_by=user"
    text = _body(client.get(f"/reports/?{query}&format=csv")).decode("utf-8-sig")
    rows = list(csv.reader(io.StringIO(text)))
    assert rows[0] == [
        "Month", "User", "Card-hours", "Cost (CNY)", "Leases", "Average queue wait (min)", "Usage"
    ]  # fmt: skip
    assert sorted((r[1], r[2], r[3], r[6]) for r in rows[1:]) == [
        ("alice", "0.10", "4.00", "Recorded"),
        ("carol", "8.00", "320.00", "Accrued (running)"),
    ]
    detail = list(
        csv.reader(
            io.StringIO(
                _body(client.get(f"/reports/?{query}&format=csv&detail=on")).decode("utf-8-sig")
            )
        )
    )
    assert detail[0][-1] == "Usage" and detail[0][14] == "Cost (CNY)"
    accrued = [r for r in detail[1:] if r[-1] == "Accrued (running)"]
    assert [(r[0], r[11], r[12], r[13], r[14]) for r in accrued] == [
        (str(finding["running"].pk), "8", "8.00", "40.0000", "320.00")
    ]
    sheet = _sheet(client.get(f"/reports/?{query}&format=xlsx"))
    assert next(r[1] for r in sheet if r[0] == "Accrued usage as of").startswith("2026-12-10 11:00")
    totals = [(r[2], r[3], r[6]) for r in sheet if r[0] == "Total"]
    assert totals == [(0.1, 4.0, "Recorded"), (8.0, 320.0, "Accrued (running)"), (8.1, 324.0, None)]


def test_charts_include_accrued_usage_named_apart(finding, fin, client):
    client.defaults["HTTP_ACCEPT_LANGUAGE"] = "en"
    client.force_login(fin)
    page = client.get("/reports/?start=2026-12-01&end=2026-12-31").content.decode()
    html = unescape(page)  # the figures are JSON in data-figure attributes
    assert '"name":"Vision \\u00b7 Accrued (running)"' in html  # the team chart's series
    assert '"name":"Accrued (running)"' in html  # the top users' stacked bar


def test_figures_do_not_move_when_the_lease_is_recorded(
    finding, vision, carol, django_capture_on_commit_callbacks
):
    """The accrued figure is what the records say once the lease ends: only the label moves."""
    before = reports.usage_report(DEC)["totals"]
    _release(finding["running"], carol, django_capture_on_commit_callbacks)
    after = reports.usage_report(DEC)["totals"]
    assert (after["card_hours"], after["cost"], after["leases"]) == (
        before["card_hours"], before["cost"], before["leases"]
    )  # fmt: skip
    assert after["accrued"]["card_minutes"] == 0
    assert after["recorded"]["cost"] == Decimal("324.00")


def test_pieces_read_for_sums_are_the_pieces_in_full(finding):
    """``detail=False`` (reports, the team's month) reads less of each lease, not other pieces."""
    args = {"since": DEC.since, "until": DEC.until, "now": at(12, 10, 11)}
    fields = ("lease_id", "user_id", "team_id", "department_id", "card_model_id", "vendor")
    fields += ("node_id", "region_id", "priority", "month", "start_at", "end_at", "cards")
    fields += ("card_minutes", "price", "cost", "off_peak", "wait_seconds")

    def read(pieces):
        return [tuple(getattr(p, f) for f in fields) for p in pieces]

    full = accrued.accrued_pieces(**args)
    assert full and read(accrued.accrued_pieces(**args, detail=False)) == read(full)


def test_report_queries_stay_bounded_with_running_leases(
    model, vision, carol, django_assert_max_num_queries
):
    with time_machine.travel(at(12, 10, 9), tick=False) as clock:
        for _ in range(6):
            _start(carol, vision, model, 2, timedelta(hours=3))
        clock.move_to(at(12, 10, 10))
        f = reports.ReportFilter(start=date(2026, 12, 1), end=date(2026, 12, 31), group_by="user")
        # records, totals, labels; held time not recorded, its leases, two price lists, the
        # off-peak windows, nodes, which of those leases have records too — whatever the
        # number of running leases.
        with django_assert_max_num_queries(10):
            report = reports.usage_report(f)
    assert report["totals"]["accrued"]["card_hours"] == Decimal("12.00")


# --- a month closes when it ends -------------------------------------------------------------


@pytest.fixture
def across(model, vision, carol):
    """2 cards from 30 Nov 22:00 for 4 h: 2 h in November, 2 h in December."""
    with time_machine.travel(at(11, 30, 22), tick=False) as clock:
        lease = _start(carol, vision, model, 2, timedelta(hours=4))
        yield {"lease": lease, "clock": clock}


def _nov(team):
    st = reports.statement(team, date(2026, 11, 1))
    return st["state"], st["totals"]["card_minutes"], st["totals"]["cost"]


def test_a_closed_month_reads_records_only_and_never_changes(
    across, vision, carol, django_capture_on_commit_callbacks
):
    clock, lease = across["clock"], across["lease"]
    clock.move_to(at(11, 30, 23))
    assert _nov(vision) == ("open", 120, Decimal("80.00"))  # 2 cards × 1 h so far, at 40/h
    clock.move_to(at(12, 1, 0, 30))
    # Ended, not closed yet: the same figures, still computed from the allocations.
    assert _nov(vision) == ("closing", 240, Decimal("160.00"))
    assert usage_close_month() > 0
    assert usage_close_month() == 0  # closed once
    assert _nov(vision) == ("closed", 240, Decimal("160.00"))
    nov_records = set(UsageRecord.objects.filter(month="2026-11-01").values_list("pk", "cost"))
    assert nov_records and not reports.statement(vision, date(2026, 11, 1))["accrued"]
    # A price entered afterwards for the past, and the lease's end, leave November alone.
    TeamPrice.objects.create(
        team=vision, card_model=lease.card_model, price_per_hour=Decimal("99.00"),
        effective_from=at(11, 15, 0),
    )  # fmt: skip
    clock.move_to(at(12, 1, 1, 30))
    _release(lease, carol, django_capture_on_commit_callbacks)
    assert _nov(vision) == ("closed", 240, Decimal("160.00"))
    assert (
        set(UsageRecord.objects.filter(month="2026-11-01").values_list("pk", "cost")) == nov_records
    )
    # December got the rest, at the price in force then (99.00 from 15 Nov): 2 × 1.5 h.
    dec = reports.statement(vision, date(2026, 12, 1))
    assert (dec["totals"]["card_minutes"], dec["totals"]["cost"], dec["accrued"]) == (
        180, Decimal("297.00"), []
    )  # fmt: skip
    # Together the records are the allocations, minute for minute.
    held = sum(
        (a.end_at - a.start_at) // timedelta(minutes=1)
        for a in Allocation.objects.filter(lease=lease)
    )
    assert sum(lease.usage_records.values_list("card_minutes", flat=True)) == held == 420
    assert usage.usage_record_lease(lease.pk) == 0


def test_month_close_skips_closed_and_ended_leases(model, vision, carol, alice):
    """The periodic close: a lease it must skip comes before the one it must close."""
    with time_machine.travel(at(11, 30, 20), tick=False) as clock:
        closed = _start(alice, vision, model, 1, timedelta(hours=8))
        running = _start(carol, vision, model, 1, timedelta(hours=8))
        Lease.objects.filter(pk=closed.pk).update(usage_recorded_until=at(12, 1, 0))
        clock.move_to(at(12, 1, 0, 5))
        assert list(usage.leases_to_close(at(12, 1, 0)).values_list("pk", flat=True)) == [
            running.pk
        ]
        assert usage.usage_close_month() == 1
        assert not closed.usage_records.exists()
        assert running.usage_records.get().card_minutes == 240


def test_missing_task_records_what_came_after_the_close(across, vision):
    clock, lease = across["clock"], across["lease"]
    clock.move_to(at(12, 1, 0, 10))
    usage.usage_close_month()
    # The end-of-lease hook was lost: the periodic task finds the lease and records December.
    Lease.objects.filter(pk=lease.pk).update(
        status=LeaseStatus.ENDED, end_reason=EndReason.EXPIRED, ended_at=at(12, 1, 2)
    )
    assert list(usage.leases_missing_usage().values_list("pk", flat=True)) == [lease.pk]
    assert usage.usage_record_missing() == 1
    assert list(usage.leases_missing_usage()) == []
    assert [r.month for r in lease.usage_records.order_by("start_at")] == [
        date(2026, 11, 1), date(2026, 12, 1)
    ]  # fmt: skip


def test_accrued_cost_uses_the_price_book_not_the_list_price(model, vision, carol):
    """A list price change inside the lease, and a preemptible-free normal lease of a team with
    no override on another model: the accrued cost follows the price book piece by piece."""
    other = CardModelFactory(slug="acc-l40", name="Acc L40", price_per_hour=Decimal("10.00"))
    make_node(other, cards=2, hostname="acc-node3")
    Price.objects.create(
        card_model=other, price_per_hour=Decimal("20.00"), effective_from=at(12, 10, 10)
    )
    with time_machine.travel(at(12, 10, 9), tick=False) as clock:
        _start(carol, vision, other, 2, timedelta(hours=4))
        clock.move_to(at(12, 10, 11))
        report = reports.usage_report(DEC)
    # 2 cards × 1 h at 10.00, then 2 cards × 1 h at 20.00 (the list price from 10:00).
    assert report["totals"]["accrued"]["cost"] == Decimal("60.00")


@pytest.mark.postgres
def test_closing_and_recording_at_once_write_each_minute_once(
    transactional_db, model, vision, carol
):
    """Month closes and end-of-lease recordings racing on real PostgreSQL: the bookmark's
    compare-and-set lets one writer through each time; the records are the allocations."""
    import threading

    from django.db import connections

    lease = Lease.objects.create(
        user=carol, team=vision, card_model=model, count=2, duration=timedelta(hours=4),
        start_at=at(11, 30, 22), end_at=at(12, 1, 2), status=LeaseStatus.ACTIVE,
        submitted_at=at(11, 30, 22), activated_at=at(11, 30, 22),
    )  # fmt: skip
    for card in model.cards.order_by("pk")[:2]:
        Allocation.objects.create(
            lease=lease, card=card, start_at=at(11, 30, 22), end_at=at(12, 1, 2)
        )
    errors: list[BaseException] = []

    def race(work, copies=8):
        barrier = threading.Barrier(copies)

        def run():
            try:
                barrier.wait()
                work()
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)
            finally:
                connections.close_all()

        threads = [threading.Thread(target=run) for _ in range(copies)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)

    race(lambda: usage.usage_close_month(now=at(12, 1, 0, 10)))
    assert UsageRecord.objects.filter(lease=lease).count() == 1  # November, once
    Lease.objects.filter(pk=lease.pk).update(
        status=LeaseStatus.ENDED, end_reason=EndReason.EXPIRED, ended_at=at(12, 1, 2)
    )
    race(lambda: usage.usage_record_lease(lease.pk) + usage.usage_record_missing())
    assert not errors, errors
    minutes = list(lease.usage_records.order_by("start_at").values_list("month", "card_minutes"))
    assert minutes == [(date(2026, 11, 1), 240), (date(2026, 12, 1), 240)]
