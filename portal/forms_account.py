"""Forms of the profile page."""

from __future__ import annotations

import zoneinfo
from functools import cache

from django import forms
from django.conf import settings
from django.utils.translation import gettext_lazy as _

from inventory.choices import StackFamily


@cache
def _timezone_choices() -> list[tuple[str, str]]:
    return [(name, name) for name in sorted(zoneinfo.available_timezones())]


class PreferencesForm(forms.Form):
    timezone = forms.ChoiceField(label=_("Time zone"), required=False)
    language = forms.ChoiceField(label=_("Language"), choices=settings.LANGUAGES)
    stack = forms.ChoiceField(
        label=_("Software stack"),
        required=False,
        choices=[("", _("Any (the stack of my last lease)")), *StackFamily.choices],
        help_text=_("Requests and the task advisor start with it; you can change it each time."),
    )

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        site_default = _("Site default (%(zone)s)") % {"zone": settings.TIME_ZONE}
        self.fields["timezone"].choices = [("", site_default), *_timezone_choices()]


class TokenForm(forms.Form):
    EXPIRY_CHOICES = [
        ("30", _("30 days")),
        ("90", _("90 days")),
        ("365", _("1 year")),
        ("", _("Never")),
    ]

    name = forms.CharField(
        label=_("Name"),
        max_length=100,
        widget=forms.TextInput(attrs={"placeholder": _("e.g. laptop scripts")}),
    )
    expires_in_days = forms.TypedChoiceField(
        label=_("Expires after"),
        choices=EXPIRY_CHOICES,
        coerce=int,
        empty_value=None,
        required=False,
        initial="90",
    )


class InviteForm(forms.Form):
    username = forms.CharField(label=_("Username"), max_length=150)
    email = forms.EmailField(label=_("Email"))
