"""Forms of the node page's operator actions: drain at a chosen time, mark a card faulty."""

from __future__ import annotations

from django import forms
from django.utils.translation import gettext_lazy as _


class DrainForm(forms.Form):
    """When the node goes into maintenance, in the operator's time zone (the page's)."""

    drain_at = forms.DateTimeField(
        label=_("Drain at"),
        input_formats=["%Y-%m-%dT%H:%M", "%Y-%m-%d %H:%M"],
        widget=forms.DateTimeInput(attrs={"type": "datetime-local"}, format="%Y-%m-%dT%H:%M"),
    )


class CardFaultyForm(forms.Form):
    note = forms.CharField(label=_("What is wrong"), max_length=200, required=False)
