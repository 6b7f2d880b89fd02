"""Browser forms for leases: shape and choices only; the rules are in the services (requests, changes, validation)."""

from __future__ import annotations

import uuid
from datetime import timedelta

from django import forms
from django.core.exceptions import ValidationError
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from inventory.models import CardModel
from inventory.requirements import REQUIREMENTS, form_field, requirement_errors, stored
from leasing.advisor.recommend import default_stack
from leasing.choices import Priority, Purpose, StartPolicy
from leasing.lifecycle.validation import (
    CHECKPOINT_SIGNALS,
    UNITS,
    Checkpoint,
    extension_minutes,
    priorities_for,
)
from leasing.models import REQUEST_KEY_MAX, Environment, OffPeakWindow
from portal.input import MAX_CARDS, validate_date, validate_lease_minutes
from portal.models import Team

UNIT_CHOICES = [("minutes", _("minutes")), ("hours", _("hours")), ("days", _("days"))]


class ModelSelect(forms.Select):
    """The card model list, each option with its stack (``data-stack``): the page clears a
    pre-filled stack when a model of another stack is chosen (static/js/site.js)."""

    def create_option(self, name, value, *args, **kwargs):
        option = super().create_option(name, value, *args, **kwargs)
        model = getattr(value, "instance", None)
        if model is not None:
            option["attrs"]["data-stack"] = model.stack_family
        return option


class LeaseRequestForm(forms.Form):
    card_model = forms.ModelChoiceField(
        widget=ModelSelect,
        label=_("Card model"),
        queryset=CardModel.objects.filter(cards__isnull=False)
        .distinct()
        .order_by("vendor", "-memory_gb", "name"),
        to_field_name="slug",
        required=False,
        empty_label=_("Any model meeting the requirements below"),
    )
    # The requirements, one field each, from the one declaration (inventory.requirements).
    locals().update({req.name: form_field(req) for req in REQUIREMENTS})
    count = forms.IntegerField(label=_("Cards"), min_value=1, max_value=MAX_CARDS, initial=1)
    duration = forms.IntegerField(label=_("Duration"), min_value=1, initial=4)
    unit = forms.ChoiceField(
        label=_("Unit"),
        initial="hours",
        choices=UNIT_CHOICES,
    )
    start = forms.ChoiceField(
        label=_("Start"),
        initial="now",
        widget=forms.RadioSelect,
        choices=[
            ("now", _("As soon as possible")),
            ("later", _("At a set time (reservation)")),
            (StartPolicy.NEXT_OFF_PEAK, _("In the next off-peak window (cheaper)")),
            (StartPolicy.OFF_PEAK_ONLY, _("Only inside an off-peak window (start and end)")),
        ],
    )
    start_at = forms.DateTimeField(
        label=_("Start at"),
        required=False,
        widget=forms.DateTimeInput(attrs={"type": "datetime-local"}, format="%Y-%m-%dT%H:%M"),
        input_formats=["%Y-%m-%dT%H:%M", "%Y-%m-%d %H:%M", "%Y-%m-%dT%H:%M:%S"],
        validators=[validate_date],
    )
    team = forms.ModelChoiceField(
        label=_("Charge to team"),
        queryset=Team.objects.none(),
        to_field_name="slug",
        empty_label=None,
    )
    priority = forms.ChoiceField(
        label=_("Priority"), choices=Priority.choices, initial=Priority.NORMAL
    )
    purpose = forms.ChoiceField(
        label=_("Purpose"), choices=Purpose.choices, initial=Purpose.DEVELOPMENT
    )
    same_node = forms.BooleanField(label=_("All cards on one node"), required=False, initial=True)
    description = forms.CharField(
        label=_("What is it for? (optional)"), max_length=200, required=False
    )
    checkpoint_signal = forms.ChoiceField(
        label=_("When preempted, send the signal"),
        required=False,
        choices=[("", "—"), *((s, f"SIG{s}") for s in CHECKPOINT_SIGNALS)],
        help_text=_("Your job saves its state when it gets this signal (preemptible leases)."),
    )
    checkpoint_seconds = forms.IntegerField(
        label=_("Saving takes (seconds)"), required=False, min_value=1
    )
    requeue = forms.BooleanField(
        label=_("Requeue when preempted (a new lease resumes the work)"), required=False
    )
    environment = forms.ModelChoiceField(
        label=_("Environment (optional)"),
        queryset=Environment.objects.filter(active=True).order_by("name"),
        to_field_name="slug",
        required=False,
        empty_label=_("None: the node's own software"),
    )
    # A fresh key per form shown: a double click or a resubmitted page books once.
    request_key = forms.CharField(
        widget=forms.HiddenInput, required=False, max_length=REQUEST_KEY_MAX
    )

    def __init__(self, *args, user, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["team"].queryset = Team.objects.filter(memberships__user=user).order_by("slug")
        # Only the classes this person may ask for (the service refuses the others).
        allowed = priorities_for(user)
        self.fields["priority"].choices = [c for c in Priority.choices if c[0] in allowed]
        # Off-peak starts only where an off-peak window is set (else the page says why).
        self.offpeak_offered = OffPeakWindow.objects.exists()
        if not self.offpeak_offered:
            start = self.fields["start"]
            start.choices = [c for c in start.choices if c[0] not in StartPolicy.values]
            start.error_messages["invalid_choice"] = _(
                "No off-peak window is set, so a start in one cannot be asked for; start as soon "
                "as possible or at a set time."
            )

    def clean(self):
        data = super().clean()
        # With a model named, the model requirements must hold for it (the service says
        # so) and the node requirements choose its cards; without, they choose the model.
        data["requirements"] = stored({r.name: data.get(r.name) for r in REQUIREMENTS})
        for name, message in requirement_errors(data["requirements"]).items():
            self.add_error(name, message)
        if (
            not data.get("card_model")
            and not data["requirements"]
            and "card_model" not in self.errors
        ):
            self.add_error(
                "card_model",
                _("Pick a card model, or give what the cards must have (memory, stack…)."),
            )
        if data.get("duration") and data.get("unit") in UNITS:
            minutes = data["duration"] * UNITS[data["unit"]]
            try:
                validate_lease_minutes(minutes)  # before any date arithmetic can overflow
            except ValidationError as exc:
                self.add_error("duration", exc)
            else:
                data["duration_td"] = timedelta(minutes=minutes)
        if data.get("start") == "later":
            if not data.get("start_at"):
                self.add_error("start_at", _("Pick the start time of the reservation."))
        else:
            data["start_at"] = None
        data["start_policy"] = data.get("start") if data.get("start") in StartPolicy.values else ""
        data["checkpoint"] = Checkpoint(
            signal=data.get("checkpoint_signal") or "",
            seconds=data.get("checkpoint_seconds"),
            requeue=bool(data.get("requeue")),
        )
        return data


class ExtendForm(forms.Form):
    """The extend box on the lease page: a number and its unit (minutes, hours or days);
    ``minutes`` alone is still read (older links and scripts)."""

    duration = forms.IntegerField(
        label=_("Extend by"), min_value=1, max_value=10**9, initial=1, required=False
    )
    unit = forms.ChoiceField(label=_("Unit"), choices=UNIT_CHOICES, initial="hours", required=False)
    minutes = forms.IntegerField(
        label=_("Extend by (minutes)"),
        min_value=1,
        max_value=10**9,
        required=False,
        widget=forms.HiddenInput,
    )

    def clean(self):
        data = super().clean()
        if self.errors:
            return data
        minutes, errors = extension_minutes(
            minutes=data.get("minutes"),
            duration=data.get("duration"),
            unit=data.get("unit") or "hours",
        )
        for field, messages in errors.items():
            for message in messages:
                self.add_error(field, message)
        data["minutes"] = minutes
        return data


# A number a link pre-fills: parsed as the form parses it (so "²" or "10**20" is ignored).
PREFILL_NUMBER = forms.IntegerField(min_value=1, max_value=MAX_CARDS * 1000, required=False)


class ResizeForm(forms.Form):
    """The resize box on the lease page: a card count, and a card model to move to."""

    count = forms.IntegerField(label=_("Cards"), min_value=1, max_value=MAX_CARDS)
    card_model = forms.ModelChoiceField(
        label=_("Card model"),
        queryset=CardModel.objects.all(),
        to_field_name="slug",
        required=False,
    )


def prefilled_stack(user, card_model_slug: str | None) -> str:
    """The stack the request form starts with: the user's default (``default_stack``), unless
    the card model named is of another stack ("" then: a model asked for by name is not
    refused for a stack the person never chose)."""
    stack = default_stack(user)
    if stack and card_model_slug:
        family = (
            CardModel.objects.filter(slug=card_model_slug)
            .values_list("stack_family", flat=True)
            .first()
        )
        if family is not None and family != stack:
            return ""
    return stack


def lease_request_initial(request) -> dict:
    initial = {
        "start_at": (timezone.localtime() + timedelta(hours=1)).replace(
            minute=0, second=0, microsecond=0
        ),
        "request_key": uuid.uuid4().hex,
    }
    # Links (from the catalogue, the calendar, the task estimator) may pre-fill the form;
    # anything malformed is ignored here and the form validates what is submitted.
    if slug := request.GET.get("card_model"):
        initial["card_model"] = slug
    for name in ("count", "duration"):
        try:
            value = PREFILL_NUMBER.clean(request.GET.get(name))
        except ValidationError:
            continue
        if value is not None:
            initial[name] = value
    if request.GET.get("start") == "later":  # a slot picked on the calendar or the timeline
        try:
            at = LeaseRequestForm.base_fields["start_at"].clean(request.GET.get("start_at"))
        except ValidationError:
            at = None
        if at is not None:
            initial.update(start="later", start_at=at)
    if request.GET.get("unit") in UNITS:
        initial["unit"] = request.GET["unit"]
    if request.GET.get("purpose") in Purpose.values:
        initial["purpose"] = request.GET["purpose"]
    if request.GET.get("same_node") == "0":
        initial["same_node"] = False  # a plan across nodes
    # The stack the user last leased (or set on their profile), unless the link says, and
    # only where it fits the model the link names (no CUDA pre-filled for an Ascend card).
    if stack := prefilled_stack(request.user, initial.get("card_model")):
        initial["stack"] = stack
    for req in REQUIREMENTS:
        value = request.GET.get(req.name)
        if value is not None and len(value) <= 60:
            initial[req.name] = value  # shown as given (empty clears the default)
    return initial
