"""The reports page (filter, table, charts, exports) and the monthly statement per team."""

from __future__ import annotations

from datetime import date, timedelta

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import Http404
from django.shortcuts import render
from django.utils.translation import gettext as _

from leasing.billing import charts, exports, reports
from leasing.billing.api import report_response
from leasing.billing.forms import ReportForm, this_month_so_far
from portal.input import validate_date
from portal.models import Team


def _quick_ranges(today: date) -> list[tuple[str, date, date]]:
    first = today.replace(day=1)
    last_month_end = first - timedelta(days=1)
    return [
        (_("This month"), first, today),
        (_("Last month"), last_month_end.replace(day=1), last_month_end),
        (_("Last 7 days"), today - timedelta(days=6), today),
    ]


@login_required
def report(request):
    team_ids = reports.report_team_ids(request.user)
    if team_ids == ():
        raise PermissionDenied(_("Reports are for finance, operators and team leads."))
    form = ReportForm(request.GET, team_ids=team_ids)
    context = {"form": form, "report": None}
    if form.is_valid():
        if form.cleaned_data["format"] in ("csv", "xlsx"):
            return report_response(form)
        f = form.report_filter()
        form.show_effective()
        report_data = reports.usage_report(f)
        statements = f.group_by == "team" and f.period == "month"
        if statements:
            slugs = dict(
                Team.objects.filter(pk__in={r["key"] for r in report_data["rows"]}).values_list(
                    "pk", "slug"
                )
            )
            for row in report_data["rows"]:
                row["slug"] = slugs.get(row["key"], "")
        query = form.data.copy()
        query.pop("format", None)
        query.pop("detail", None)
        context |= {
            "report": report_data,
            "group_label": reports.GROUPS[f.group_by][1],
            "filter": f,
            "query": query.urlencode(),
            "team_chart": charts.team_days(f, report_data["pieces"]),
            "users_chart": charts.top_users(f, report_data["pieces"]),
            "statements": statements,
        }
    teams = Team.objects.order_by("name")
    if team_ids is not None:
        teams = teams.filter(pk__in=team_ids)
    context["teams"] = teams
    context["ranges"] = _quick_ranges(this_month_so_far()[1])
    return render(request, "leasing/reports.html", context)


@login_required
def statement(request, slug: str, year: int, month: int):
    team_ids = reports.report_team_ids(request.user)
    team = Team.objects.filter(slug=slug).first()
    if team is None or (team_ids is not None and team.pk not in team_ids):
        raise Http404
    try:
        first = date(year, month, 1)
        validate_date(first)  # year 9999 (or 1) has no next (or previous) month
    except (ValueError, OverflowError, ValidationError) as exc:  # OverflowError: year 10**20
        raise Http404 from exc
    st = reports.statement(team, first)
    if request.GET.get("format") == "xlsx":
        return exports.statement_xlsx(st)
    prev_month = (first - timedelta(days=1)).replace(day=1)
    next_month = (first + timedelta(days=32)).replace(day=1)
    return render(
        request,
        "leasing/statement.html",
        {**st, "prev_month": prev_month, "next_month": next_month},
    )
