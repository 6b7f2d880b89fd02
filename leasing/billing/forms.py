"""The report filter: one form for the /reports/ page and GET /api/v1/reports/usage/."""

from __future__ import annotations

from datetime import timedelta

from django import forms
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from leasing.billing import reports
from leasing.periods import site_tz
from portal.input import validate_date
from portal.models import Team

FORMATS = ("json", "csv", "xlsx")
MAX_DAYS = 3 * 366


def this_month_so_far():
    today = timezone.now().astimezone(site_tz()).date()
    return today.replace(day=1), today


class ReportForm(forms.Form):
    start = forms.DateField(
        label=_("From"),
        required=False,
        widget=forms.DateInput(attrs={"type": "date"}),
        validators=[validate_date],
    )
    end = forms.DateField(
        label=_("To (inclusive)"),
        required=False,
        widget=forms.DateInput(attrs={"type": "date"}),
        validators=[validate_date],
    )
    group_by = forms.ChoiceField(
        label=_("Group by"),
        choices=[(k, label) for k, (_f, label) in reports.GROUPS.items()],
        required=False,
    )
    period = forms.ChoiceField(label=_("Period"), choices=reports.PERIODS.items(), required=False)
    team = forms.SlugField(label=_("Team"), required=False)
    format = forms.ChoiceField(choices=[(f, f) for f in FORMATS], required=False)
    detail = forms.BooleanField(label=_("Every record"), required=False)

    def __init__(self, *args, team_ids=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.team_ids = team_ids  # the teams the user may see; None: all

    def clean(self):
        data = super().clean()
        first, today = this_month_so_far()
        data["start"] = data.get("start") or first
        data["end"] = data.get("end") or today
        data["group_by"] = data.get("group_by") or "team"
        data["period"] = data.get("period") or "month"
        data["format"] = data.get("format") or "json"
        if self.errors:  # a date refused above: nothing to compare
            return data
        if data["end"] < data["start"]:
            self.add_error("end", _("The end is before the start."))
        elif data["end"] - data["start"] > timedelta(days=MAX_DAYS):
            self.add_error("end", _("A report covers at most three years."))
        return data

    def show_effective(self) -> None:
        """After a valid clean: the form shows what the report uses, the defaults spelled
        out (this month so far, by team, by month), not the empty fields it was sent."""
        data = self.data.copy()
        for name in ("start", "end", "group_by", "period"):
            value = self.cleaned_data[name]
            data[name] = value.isoformat() if hasattr(value, "isoformat") else value
        self.data = data

    def clean_team(self):
        slug = self.cleaned_data.get("team")
        if not slug:
            return None
        team = Team.objects.filter(slug=slug).first()
        if team is None or (self.team_ids is not None and team.pk not in self.team_ids):
            raise forms.ValidationError(
                _("No team %(slug)s that you may report on.") % {"slug": slug}
            )
        return team

    def report_filter(self) -> reports.ReportFilter:
        data = self.cleaned_data
        team_ids = self.team_ids
        if data["team"] is not None:
            team_ids = (data["team"].pk,)
        return reports.ReportFilter(
            start=data["start"],
            end=data["end"],
            group_by=data["group_by"],
            period=data["period"],
            team_ids=team_ids,
        )
