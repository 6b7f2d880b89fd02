"""CSV and XLSX files of reports and statements.

CSV is streamed row by row from a database cursor (``StreamingHttpResponse``), so memory stays
flat whatever the size. XLSX is written by openpyxl in write-only mode (rows go straight to a
temporary file, not kept in memory) and then sent as a file.
"""

from __future__ import annotations

import csv
import tempfile
from collections.abc import Iterable, Iterator
from datetime import date, datetime
from decimal import Decimal

from django.http import FileResponse, StreamingHttpResponse
from django.utils import timezone
from django.utils.translation import gettext as _
from openpyxl import Workbook
from openpyxl.cell import WriteOnlyCell
from openpyxl.styles import Font

from leasing.billing import accrued, reports
from leasing.billing.prices import currency
from leasing.periods import site_tz

CSV_TYPE = "text/csv; charset=utf-8"
XLSX_TYPE = "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"
MONEY = "#,##0.00"
HOURS = "#,##0.00"
PRICE = "#,##0.00##"
DAY = "yyyy-mm-dd"
MONTH = "yyyy-mm"
MOMENT = "yyyy-mm-dd hh:mm"


class _Echo:
    """A file-like object whose write() returns the line instead of keeping it."""

    def write(self, value: str) -> str:
        return value


# A spreadsheet runs a cell that starts with one of these as a formula (=HYPERLINK(...),
# =cmd|...); a leading apostrophe makes it text (OWASP "CSV injection").
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def neutralise(value):
    """*value* with a leading apostrophe when it is text a spreadsheet would run as a formula."""
    if isinstance(value, str) and value.startswith(FORMULA_STARTS):
        return "'" + value
    return value


def _cell(value):
    if isinstance(value, datetime):
        return value.astimezone(site_tz()).strftime("%Y-%m-%d %H:%M")
    if isinstance(value, date):
        return value.isoformat()
    return neutralise(value)


def csv_response(
    filename: str, header: Iterable, rows: Iterable[Iterable]
) -> StreamingHttpResponse:
    """Stream *rows* as CSV (UTF-8 with a BOM, so Excel reads Chinese names right)."""
    writer = csv.writer(_Echo())

    def lines() -> Iterator[str]:
        yield "\ufeff" + writer.writerow([neutralise(str(h)) for h in header])
        for row in rows:
            yield writer.writerow([_cell(v) for v in row])

    response = StreamingHttpResponse(lines(), content_type=CSV_TYPE)
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    return response


def period_heading(period: str) -> str:
    """The first column's name says what its dates are: a month, a week's Monday, a day."""
    return {"month": _("Month"), "week": _("Week starting"), "day": _("Day")}[period]


def period_text(period: str, value: date) -> str:
    """A period as the report page writes it: 2026-11 for a month, else the day."""
    return f"{value:%Y-%m}" if period == "month" else value.isoformat()


def _report_header(f: reports.ReportFilter) -> list:
    return [
        period_heading(f.period),
        str(reports.GROUPS[f.group_by][1]),
        _("Card-hours"),
        _("Cost (%(currency)s)") % {"currency": currency()},
        _("Leases"),
        _("Average queue wait (min)"),
        _("Usage"),
    ]


def as_of(at: datetime) -> str:
    """A moment in the reader's time zone (the one the request activated), named."""
    return f"{timezone.localtime(at):%Y-%m-%d %H:%M} ({timezone.get_current_timezone_name()})"


def _report_values(report: dict) -> Iterator[list]:
    for row in report["rows"]:
        yield [
            row["period"],
            row["label"],
            row["card_hours"],
            row["cost"],
            row["leases"],
            row["wait_minutes"],
            str(row["usage_label"]),
        ]


def report_filename(f: reports.ReportFilter, ext: str, detail: bool = False) -> str:
    kind = "usage-records" if detail else f"usage-{f.group_by}-{f.period}"
    return f"cardpool-{kind}-{f.start:%Y%m%d}-{f.end:%Y%m%d}.{ext}"


def report_csv(f: reports.ReportFilter, *, detail: bool = False) -> StreamingHttpResponse:
    if detail:
        return csv_response(
            report_filename(f, "csv", True),
            reports.detail_headings(),
            reports.usage_detail_rows(f),
        )
    rows = (
        [period_text(f.period, values[0]), *values[1:]]
        for values in _report_values(reports.usage_report(f))
    )
    return csv_response(report_filename(f, "csv"), _report_header(f), rows)


# --- XLSX -------------------------------------------------------------------------------------


def _styled(ws, value, *, bold: bool = False, number_format: str | None = None):
    cell = WriteOnlyCell(ws, value=_xlsx_value(value))
    if bold:
        cell.font = Font(bold=True)
    if number_format:
        cell.number_format = number_format
    return cell


def _dated(ws, value, *, bold: bool = False, month: bool = False):
    """A cell that is a real date (or moment) in the sheet, shown the way the page shows it."""
    if isinstance(value, datetime):
        return _styled(ws, value, bold=bold, number_format=MOMENT)
    if isinstance(value, date):
        return _styled(ws, value, bold=bold, number_format=MONTH if month else DAY)
    return _styled(ws, value, bold=bold)


def _xlsx_value(value):
    if isinstance(value, Decimal):
        return float(value)
    if isinstance(value, datetime):
        return value.astimezone(site_tz()).replace(tzinfo=None)
    # openpyxl stores a string that starts with "=" as a formula.
    return neutralise(value)


def _file_response(wb: Workbook, filename: str) -> FileResponse:
    handle = tempfile.TemporaryFile()
    wb.save(handle)
    handle.seek(0)
    return FileResponse(handle, as_attachment=True, filename=filename, content_type=XLSX_TYPE)


def _title_rows(ws, title: str, filters: list[tuple[str, object]], width: int) -> None:
    ws.append([_styled(ws, title, bold=True)])
    for name, value in filters:
        ws.append([_styled(ws, name, bold=True), _dated(ws, value)])
    ws.append([_("Generated"), as_of(timezone.now())])
    ws.append([])


def _filters(f: reports.ReportFilter, teams: str, now: datetime) -> list[tuple[str, object]]:
    return [
        (_("From"), f.start),
        (_("To (inclusive)"), f.end),
        (_("Group by"), str(reports.GROUPS[f.group_by][1])),
        (_("Period"), str(reports.PERIODS[f.period])),
        (_("Teams"), teams),
        (_("Accrued usage as of"), as_of(now)),
    ]


def report_xlsx(f: reports.ReportFilter, *, teams: str, detail: bool = False) -> FileResponse:
    """The report (or every record) as a sheet: the filter on top, a bold totals row at the end."""
    now = timezone.now()
    wb = Workbook(write_only=True)
    ws = wb.create_sheet(_("Usage"))
    _title_rows(ws, _("Cardpool usage report"), _filters(f, teams, now), 7)
    if detail:
        header = reports.detail_headings()
        ws.append([_styled(ws, h, bold=True) for h in header])
        card_hours = Decimal(0)
        cost = Decimal(0)
        formats = {12: HOURS, 13: PRICE, 14: MONEY}
        for row in reports.usage_detail_rows(f, now=now):
            card_hours += row[12]
            cost += row[14]
            ws.append(
                [
                    _dated(ws, v) if i in (9, 10) else _styled(ws, v, number_format=formats.get(i))
                    for i, v in enumerate(row)
                ]
            )
        total = [_styled(ws, _("Total"), bold=True)] + [None] * 11
        total += [
            _styled(ws, card_hours, bold=True, number_format=HOURS),
            None,
            _styled(ws, cost, bold=True, number_format=MONEY),
        ]
        ws.append(total)
        return _file_response(wb, report_filename(f, "xlsx", True))
    report = reports.usage_report(f, now=now)
    ws.append([_styled(ws, h, bold=True) for h in _report_header(f)])
    for values in _report_values(report):
        ws.append(
            [
                _dated(ws, values[0], month=f.period == "month"),
                _xlsx_value(values[1]),
                _styled(ws, values[2], number_format=HOURS),
                _styled(ws, values[3], number_format=MONEY),
                values[4],
                _xlsx_value(values[5]),
                values[6],
            ]
        )
    totals = report["totals"]
    for label, t, usage in (
        (_("Total"), totals["recorded"], totals["recorded"]["usage_label"]),
        (_("Total"), totals["accrued"], totals["accrued"]["usage_label"]),
        (_("Total"), totals, ""),
    ):
        ws.append(
            [
                _styled(ws, label, bold=True),
                None,
                _styled(ws, t["card_hours"], bold=True, number_format=HOURS),
                _styled(ws, t["cost"], bold=True, number_format=MONEY),
                _styled(ws, t["leases"], bold=True),
                _xlsx_value(t["wait_minutes"]),
                _styled(ws, str(usage), bold=True),
            ]
        )
    return _file_response(wb, report_filename(f, "xlsx"))


def statement_headings() -> list[str]:
    money_unit = {"currency": currency()}
    return [
        _("Lease"),
        _("User"),
        _("Card model"),
        _("Node"),
        _("Cards"),
        _("Start"),
        _("End"),
        _("Card-hours"),
        _("Price per card-hour (%(currency)s)") % money_unit,
        _("Cost (%(currency)s)") % money_unit,
        _("Usage"),
    ]


def statement_rows(st: dict) -> Iterator[list]:
    """The recorded lines, then the accrued ones; the last column says which."""
    kinds = {k: str(label) for k, label in accrued.USAGE_LABELS.items()}
    for kind, lines in (
        (accrued.RECORDED, st["lines"].iterator(chunk_size=2000)),
        (accrued.ACCRUED, st["accrued"]),
    ):
        for line in lines:
            yield [
                line.lease_id,
                line.user.username,
                line.card_model.name,
                line.node.hostname,
                line.cards,
                line.start_at,
                line.end_at,
                reports.hours(line.card_minutes),
                line.price,
                line.cost,
                kinds[kind],
            ]


def statement_state(st: dict) -> str:
    """Open (as of when), closing, or closed — in words, for the file's head."""
    if st["state"] == "closed":
        return _("Closed: usage records only; they do not change.")
    if st["state"] == "closing":
        return _("Month ended; being closed (accrued usage as of %(at)s).") % {
            "at": as_of(st["as_of"])
        }
    return _("Open: recorded usage and usage accrued by running leases as of %(at)s.") % {
        "at": as_of(st["as_of"])
    }


def statement_issue_rows(st: dict) -> list[tuple[str, object]]:
    """A closed month's statement carries its number and the day it was issued."""
    issued = st.get("issued")
    if issued is None:
        return []
    return [
        (_("Statement number"), issued.number),
        (_("Issued"), timezone.localtime(issued.issued_at).date()),
        (_("Currency"), currency()),
    ]


def statement_xlsx(st: dict) -> FileResponse:
    team, month, totals = st["team"], st["month"], st["totals"]
    wb = Workbook(write_only=True)
    ws = wb.create_sheet(_("Statement"))
    _title_rows(
        ws,
        _("Cardpool statement"),
        [
            (_("Team"), team.name),
            (_("Month"), f"{month:%Y-%m}"),
            (_("Status"), statement_state(st)),
            *statement_issue_rows(st),
        ],
        11,
    )
    ws.append([_styled(ws, h, bold=True) for h in statement_headings()])
    formats = {7: HOURS, 8: PRICE, 9: MONEY}
    for row in statement_rows(st):
        ws.append(
            [
                _dated(ws, v) if i in (5, 6) else _styled(ws, v, number_format=formats.get(i))
                for i, v in enumerate(row)
            ]
        )
    for t, usage in (
        (totals["recorded"], accrued.USAGE_LABELS[accrued.RECORDED]),
        (totals["accrued"], accrued.USAGE_LABELS[accrued.ACCRUED]),
        (totals, ""),
    ):
        ws.append(
            [_styled(ws, _("Total"), bold=True)]
            + [None] * 6
            + [
                _styled(ws, t["card_hours"], bold=True, number_format=HOURS),
                None,
                _styled(ws, t["cost"], bold=True, number_format=MONEY),
                _styled(ws, str(usage), bold=True),
            ]
        )
    return _file_response(wb, f"cardpool-statement-{team.slug}-{month:%Y-%m}.xlsx")
