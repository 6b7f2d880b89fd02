"""The export rules finance relies on: one unit per column, named in the header; the currency
named; labels in the reader's language (no raw keys or slugs); dates as real dates in XLSX;
periods as the page writes them. And a closed month's statement: numbered, dated, sent to
the team's leads and to finance, once."""

from __future__ import annotations

import csv
import io
from datetime import datetime
from decimal import Decimal
from zoneinfo import ZoneInfo

import openpyxl
import pytest
import time_machine

from inventory.models import Vendor
from leasing.billing import statements, usage
from leasing.choices import Kind, Priority
from leasing.models import Delivery, Notification, Statement, UsageRecord
from portal.models import Membership
from tests.factories import UserFactory
from tests.leasing import test_usage_reconcile as reconcile

world, november = reconcile.world, reconcile.november  # the same fixtures
NOV = "start=2026-11-01&end=2026-11-30"
SHANGHAI = ZoneInfo("Asia/Shanghai")


def _body(response) -> bytes:
    return b"".join(response.streaming_content) if response.streaming else response.content


def _csv(response) -> list[list[str]]:
    return list(csv.reader(io.StringIO(_body(response).decode("utf-8-sig"))))


def _sheet(response) -> list[list]:
    wb = openpyxl.load_workbook(io.BytesIO(_body(response)))
    return [list(row) for row in wb.worksheets[0].iter_rows(values_only=False)]


@pytest.fixture
def as_user(client):
    def login(user, language="en"):
        client.defaults["HTTP_ACCEPT_LANGUAGE"] = language
        client.cookies["django_language"] = language
        client.force_login(user)
        return client

    return login


def test_every_money_column_names_the_currency_and_hours_are_hours(november, fin, as_user):
    client = as_user(fin)
    summary = _csv(client.get(f"/reports/?{NOV}&group_by=team&format=csv"))
    detail = _csv(client.get(f"/reports/?{NOV}&format=csv&detail=on"))
    assert summary[0][2:4] == ["Card-hours", "Cost (CNY)"]
    assert detail[0][12:15] == ["Card-hours", "Price per card-hour (CNY)", "Cost (CNY)"]
    assert not any("minute" in h.lower() for h in detail[0])  # one unit: hours
    # The detail adds up to the summary, hour for hour and fen for fen.
    assert sum(Decimal(r[12]) for r in detail[1:]) == sum(Decimal(r[2]) for r in summary[1:])
    assert sum(Decimal(r[14]) for r in detail[1:]) == sum(Decimal(r[3]) for r in summary[1:])
    total_minutes = sum(r.card_minutes for r in UsageRecord.objects.filter(month="2026-11-01"))
    hours = sum(Decimal(r[2]) for r in summary[1:])
    assert abs(hours - Decimal(total_minutes) / 60) <= Decimal("0.01") * len(summary[1:])


def test_labels_in_chinese_never_raw_keys_or_slugs(november, fin, as_user):
    client = as_user(fin, "zh-hans")
    detail = _csv(client.get(f"/reports/?{NOV}&format=csv&detail=on"))
    header, rows = detail[0], detail[1:]
    assert header[0] == "租约" and "CNY" in header[14]
    teams, vendors, priorities = {r[2] for r in rows}, {r[5] for r in rows}, {r[8] for r in rows}
    assert teams == {"Vision", "NLP"}  # names, not slugs
    assert "vision" not in teams and "nlp" not in teams
    assert not vendors & set(Vendor.values)
    assert not priorities & set(Priority.values)  # 'normal', 'preemptible' are keys
    by_priority = _csv(client.get(f"/reports/?{NOV}&group_by=priority&format=csv"))
    assert not {r[1] for r in by_priority[1:]} & set(Priority.values)
    by_vendor = _csv(client.get(f"/reports/?{NOV}&group_by=vendor&format=csv"))
    assert not {r[1] for r in by_vendor[1:]} & set(Vendor.values)


def test_periods_read_as_on_the_page(november, fin, as_user):
    client = as_user(fin)
    months = _csv(client.get(f"/reports/?{NOV}&group_by=team&period=month&format=csv"))
    assert months[0][0] == "Month" and {r[0] for r in months[1:]} == {"2026-11"}
    days = _csv(client.get(f"/reports/?{NOV}&group_by=team&period=day&format=csv"))
    assert days[0][0] == "Day" and all(len(r[0]) == 10 for r in days[1:])
    weeks = _csv(client.get(f"/reports/?{NOV}&group_by=team&period=week&format=csv"))
    assert weeks[0][0] == "Week starting"


def test_xlsx_dates_are_dates(november, fin, as_user):
    client = as_user(fin)
    rows = _sheet(client.get(f"/reports/?{NOV}&group_by=team&period=month&format=xlsx"))
    header_at = next(i for i, r in enumerate(rows) if r[0].value == "Month")
    periods = [r[0] for r in rows[header_at + 1 :] if r[0].value != "Total"]
    assert periods and all(isinstance(c.value, datetime) for c in periods)
    assert {c.number_format for c in periods} == {"yyyy-mm"}
    assert isinstance(rows[1][1].value, datetime)  # "From" in the head
    detail = _sheet(client.get(f"/reports/?{NOV}&format=xlsx&detail=on"))
    header_at = next(i for i, r in enumerate(detail) if r[0].value == "Lease")
    lines = [r for r in detail[header_at + 1 :] if isinstance(r[0].value, int)]
    assert lines and all(isinstance(r[9].value, datetime) for r in lines)
    assert all(r[9].number_format == "yyyy-mm-dd hh:mm" for r in lines)
    assert all(r[14].number_format == "#,##0.00" for r in lines)
    statement = _sheet(client.get("/reports/statements/vision/2026-11/?format=xlsx"))
    header_at = next(i for i, r in enumerate(statement) if r[0].value == "Lease")
    assert [c.value for c in statement[header_at]][7:10] == [
        "Card-hours",
        "Price per card-hour (CNY)",
        "Cost (CNY)",
    ]
    lines = [r for r in statement[header_at + 1 :] if isinstance(r[0].value, int)]
    assert lines and all(isinstance(r[5].value, datetime) for r in lines)


@pytest.fixture
def finance_reader(db):
    reader = UserFactory(username="fin2")
    reader.profile.is_finance = True
    reader.profile.language = "zh-hans"
    reader.profile.save()
    return reader


def test_a_closed_month_gets_numbered_statements_sent_to_leads_and_finance(
    november, fin, lena, alice, finance_reader, as_user
):
    fin.profile.language = "en"
    fin.profile.save()
    december = datetime(2026, 12, 1, 0, 10, tzinfo=SHANGHAI)
    with time_machine.travel(december, tick=False):
        usage.usage_close_month()
        issued = statements.statements_issue()
    assert [(s.team.slug, s.number) for s in issued] == [
        ("nlp", "2026-11-0001"),
        ("vision", "2026-11-0002"),
    ]
    vision = Statement.objects.get(team__slug="vision")
    assert vision.cost == Decimal("637.00") and vision.currency == "CNY"
    assert vision.issued_at == december
    notes = Notification.objects.filter(kind=Kind.STATEMENT_ISSUED)
    readers = sorted(notes.values_list("user__username", "data__params__number"))
    assert readers == [
        ("fin", "2026-11-0001"),
        ("fin", "2026-11-0002"),
        ("fin2", "2026-11-0001"),
        ("fin2", "2026-11-0002"),
        ("lena", "2026-11-0002"),  # vision's lead; nlp has none here
    ]
    assert not notes.filter(user=alice).exists()  # a member gets no statement
    # By email too, by default (each reader may turn it off in their notification settings).
    emailed = Delivery.objects.filter(notification__in=notes, channel="email")
    assert set(emailed.values_list("notification__user__username", flat=True)) == {
        u.username for u in (fin, finance_reader, lena) if u.email
    }
    assert emailed.exists()
    # Each reader in their own language.
    assert notes.get(user=fin, data__params__number="2026-11-0002").title.startswith(
        "Statement 2026-11-0002"
    )
    assert (
        "2026-11-0002" in notes.get(user=finance_reader, data__params__number="2026-11-0002").title
    )
    assert "账单" in notes.get(user=finance_reader, data__params__number="2026-11-0002").title
    # Running again (the beat task every few minutes) issues and sends nothing new.
    with time_machine.travel(december, tick=False):
        assert statements.statements_issue() == []
    assert notes.count() == 5
    # The statement page and its XLSX carry the number and the issue date.
    client = as_user(lena)
    page = client.get("/reports/statements/vision/2026-11/").content.decode()
    assert "data-statement-number>2026-11-0002<" in page and "2026-12-01" in page
    rows = _sheet(client.get("/reports/statements/vision/2026-11/?format=xlsx"))
    head = {r[0].value: r[1].value for r in rows[:10] if len(r) > 1}
    assert head["Statement number"] == "2026-11-0002"
    assert head["Issued"].date() == datetime(2026, 12, 1).date()  # noqa: DTZ001
    assert head["Currency"] == "CNY"


def test_no_statement_while_the_month_is_still_being_closed(world, lena, fin):
    from tests.leasing.conftest import ask

    w = world
    with time_machine.travel(datetime(2026, 11, 30, 22, 0, tzinfo=SHANGHAI), tick=False):
        from leasing.lifecycle import provisioning

        lease = ask(w["alice"], w["vision"], w["model"], duration=reconcile.timedelta(hours=5))
        provisioning.provision_step(lease_id=lease.pk)
    with time_machine.travel(datetime(2026, 12, 1, 0, 5, tzinfo=SHANGHAI), tick=False):
        assert statements.statements_issue() == []  # its November part is not recorded yet
        usage.usage_close_month()
        issued = statements.statements_issue()
    assert [s.team.slug for s in issued] == ["vision"]
    assert Membership.objects.filter(team=w["vision"], role="lead").exists()
