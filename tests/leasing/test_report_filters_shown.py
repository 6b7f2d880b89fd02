"""The /reports/ filters show the period and the dates the table uses: with nothing asked,
the defaults (this month so far, by team, by month) spelled out in the form and the export
links, never empty dates over a monthly table with "day" in the period box."""

from __future__ import annotations

import re

import pytest
import time_machine

from tests.leasing.conftest import T0

pytestmark = pytest.mark.django_db


def _form(page: str) -> str:
    form = page[page.index('id="report-filter"') :]
    return form[: form.index("</form>")]


def _selected(form: str, name: str) -> list[str]:
    select = form[form.index(f'name="{name}"') :]
    select = select[: select.index("</select>")]
    return re.findall(r'<option value="([^"]*)"[^>]*selected', select)


def _value(form: str, name: str) -> str | None:
    match = re.search(rf'<input[^>]*name="{name}"[^>]*>', form)
    assert match, name
    value = re.search(r'value="([^"]*)"', match.group(0))
    return value.group(1) if value else None


@pytest.mark.parametrize(
    ("query", "start", "end", "period", "group_by"),
    [
        ("", "2026-12-01", "2026-12-01", "month", "team"),  # T0 is 1 December
        ("?start=&end=&period=&group_by=", "2026-12-01", "2026-12-01", "month", "team"),
        ("?start=2026-11-03&period=week", "2026-11-03", "2026-12-01", "week", "team"),
        ("?end=2026-12-01&group_by=user", "2026-12-01", "2026-12-01", "month", "user"),
    ],
)
def test_the_form_shows_what_the_table_uses(client, fin, query, start, end, period, group_by):
    client.force_login(fin)
    with time_machine.travel(T0, tick=False):
        page = client.get(f"/reports/{query}", HTTP_ACCEPT_LANGUAGE="en").content.decode()
    form = _form(page)
    assert (_value(form, "start"), _value(form, "end")) == (start, end)
    assert _selected(form, "period") == [period]
    assert _selected(form, "group_by") == [group_by]
    heading = page[page.index('id="report-table"') :]
    assert f"{start} to {end}" in heading[: heading.index("</h2>")]
    csv_link = re.search(r'href="\?([^"]*)" download data-export="csv"', page).group(1)
    assert f"start={start}" in csv_link and f"period={period}" in csv_link


def test_a_refused_filter_keeps_what_was_typed(client, fin):
    client.force_login(fin)
    page = client.get(
        "/reports/?start=2026-11-30&end=2026-11-01", HTTP_ACCEPT_LANGUAGE="en"
    ).content.decode()
    form = _form(page)
    assert (_value(form, "start"), _value(form, "end")) == ("2026-11-30", "2026-11-01")
    assert "The end is before the start." in form
