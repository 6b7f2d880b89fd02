"""Forms of the team page: quota rules, member limits, a decision on a request."""

from __future__ import annotations

from django import forms
from django.utils.translation import gettext_lazy as _

from inventory.models import CardModel
from leasing.billing.prices import currency
from leasing.teams.selectors import CHART_DAYS_MAX
from portal.input import MAX_LIMIT_CARDS, validate_lease_hours

UNITS = {"minutes": 1, "hours": 60, "days": 24 * 60}


class LimitsForm(forms.Form):
    """Limits for a team rule or a member; empty fields mean no limit."""

    card_model = forms.ModelChoiceField(
        label=_("Card model"),
        queryset=CardModel.objects.order_by("vendor", "name"),
        to_field_name="slug",
        required=False,
        empty_label=_("All models together"),
    )
    max_concurrent_cards = forms.IntegerField(
        label=_("Concurrent cards"), min_value=0, max_value=MAX_LIMIT_CARDS, required=False
    )
    card_hours_per_month = forms.DecimalField(
        label=_("Card-hours per month"),
        min_value=0,
        max_digits=12,
        decimal_places=1,
        required=False,
    )
    max_lease_hours = forms.IntegerField(
        label=_("Longest lease (hours)"),
        min_value=1,
        required=False,
        validators=[validate_lease_hours],
    )


class QuotaForm(LimitsForm):
    money_per_month = forms.DecimalField(
        label=_("Money per month"),
        min_value=0,
        max_digits=14,
        decimal_places=2,
        required=False,
    )

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # The configured currency, not a hard-coded one.
        self.fields["money_per_month"].label = _("Money per month (%(currency)s)") % {
            "currency": currency()
        }


class MemberLimitForm(LimitsForm):
    member = forms.ChoiceField(label=_("Member"))

    def __init__(self, *args, team, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["member"].choices = [
            (m.pk, m.user.get_username())
            for m in team.memberships.select_related("user").order_by("user__username")
        ]
        self.order_fields(["member"])


class DecisionForm(forms.Form):
    reason = forms.CharField(label=_("Reason / note"), max_length=500, required=False)


class MemberAddForm(forms.Form):
    username = forms.CharField(label=_("Username"), max_length=150)


class IdlePolicyForm(forms.Form):
    """The team's idle policy, as its leads edit it on the team page."""

    idle_threshold_pct = forms.IntegerField(
        label=_("Idle below (percent utilisation)"), min_value=0, max_value=100
    )
    idle_minutes = forms.IntegerField(label=_("Idle for (minutes)"), min_value=5)
    idle_reclaim = forms.BooleanField(label=_("End idle leases after the warning"), required=False)


class ChartRangeForm(forms.Form):
    """The team chart's range: whole days, both included (site time zone)."""

    start = forms.DateField(label=_("From"), required=False)
    end = forms.DateField(label=_("To (inclusive)"), required=False)

    def clean(self):
        data = super().clean()
        start, end = data.get("start"), data.get("end")
        if start and end and end < start:
            raise forms.ValidationError(_("The end comes before the start."))
        if start and end and (end - start).days >= CHART_DAYS_MAX:
            raise forms.ValidationError(
                _("At most %(days)s days at a time.") % {"days": CHART_DAYS_MAX}
            )
        return data
