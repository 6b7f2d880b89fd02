"""GET /api/v1/reports/usage/: usage and cost by period × group, as JSON, CSV or XLSX."""

from __future__ import annotations

from django.urls import path
from django.utils.translation import gettext as _
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.exceptions import PermissionDenied
from rest_framework.renderers import JSONRenderer
from rest_framework.response import Response
from rest_framework.views import APIView

from leasing.billing import exports, reports
from leasing.billing.forms import FORMATS, ReportForm


def _teams_label(f: reports.ReportFilter) -> str:
    if f.team_ids is None:
        return _("all")
    return ", ".join(  # names, as everywhere a reader sees a team (not slugs)
        reports.Team.objects.filter(pk__in=f.team_ids)
        .order_by("name")
        .values_list("name", flat=True)
    )


def report_response(form: ReportForm):
    """The file for a valid form's csv/xlsx format (shared with the /reports/ page)."""
    f = form.report_filter()
    detail = form.cleaned_data["detail"]
    if form.cleaned_data["format"] == "csv":
        return exports.report_csv(f, detail=detail)
    return exports.report_xlsx(f, teams=_teams_label(f), detail=detail)


class UsageReportView(APIView):
    """Card-hours, cost, leases and average queue wait by period × group × usage.

    Each row's ``usage`` is ``recorded`` (usage records: ended leases, closed months) or
    ``accrued`` (held up to ``as_of`` by leases still running, not recorded yet); the totals
    give both and their sum. Finance and operators see every team; a lead sees the teams
    they lead; others get 403.
    ``start``/``end`` are dates (site time zone, both included; default: this month so far).
    """

    def perform_content_negotiation(self, request, force=False):
        # ?format= picks the file type here, not a DRF renderer; answers and errors are JSON.
        return JSONRenderer(), JSONRenderer.media_type

    @extend_schema(
        parameters=[
            OpenApiParameter("start", OpenApiTypes.DATE),
            OpenApiParameter("end", OpenApiTypes.DATE),
            OpenApiParameter("group_by", str, enum=list(reports.GROUPS)),
            OpenApiParameter("period", str, enum=list(reports.PERIODS)),
            OpenApiParameter("team", str, description="a team slug"),
            OpenApiParameter("format", str, enum=list(FORMATS)),
            OpenApiParameter("detail", bool, description="every usage record (csv, xlsx)"),
        ],
        responses={200: OpenApiTypes.OBJECT},
        operation_id="reports_usage",
    )
    def get(self, request):
        team_ids = reports.report_team_ids(request.user)
        if team_ids == ():
            raise PermissionDenied(_("Reports are for finance, operators and team leads."))
        form = ReportForm(request.query_params, team_ids=team_ids)
        if not form.is_valid():
            return Response(form.errors, status=400)
        if form.cleaned_data["format"] != "json":
            return report_response(form)
        return Response(report_json(reports.usage_report(form.report_filter())))


def _figures(summary: dict) -> dict:
    return {
        "card_hours": summary["card_hours"],
        "cost": summary["cost"],
        "leases": summary["leases"],
        "average_wait_minutes": summary["wait_minutes"],
    }


def report_json(report: dict) -> dict:
    """The report as the API answers it: the same figures as the page, row by row."""
    f, totals = report["filter"], report["totals"]
    return {
        "start": f.start,
        "end": f.end,
        "group_by": f.group_by,
        "period": f.period,
        "as_of": report["as_of"],
        "open": report["open"],
        "rows": [
            {
                "period": row["period"],
                "key": row["key"],
                "label": row["label"],
                "usage": row["usage"],
                **_figures(row),
            }
            for row in report["rows"]
        ],
        "totals": {
            **_figures(totals),
            "recorded": _figures(totals["recorded"]),
            "accrued": _figures(totals["accrued"]),
        },
    }


urlpatterns = [
    path("reports/usage/", UsageReportView.as_view(), name="api-reports-usage"),
]
