"""Browser page for asking by task: the profile form, the memory breakdown, the ranked options.

/leases/estimate/ is the step before the card choice: each option links to the request
form pre-filled with its model, count, duration and purpose. The form is a GET (nothing is
written), so a profile is a link that can be shared; htmx refreshes the result as you type.
"""

from __future__ import annotations

from datetime import timedelta

from django import forms
from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.shortcuts import render
from django.utils.translation import gettext_lazy as _

from inventory.requirements import BY_NAME, form_field, requirement_errors, stored
from leasing.advisor.estimator import (
    LIMITS,
    EstimateError,
    ModelPrecision,
    Optimizer,
    Task,
    TaskProfile,
)
from leasing.advisor.recommend import default_stack, priced_team_id, recommend
from leasing.advisor.serializers import request_url
from leasing.choices import StartPolicy

# The requirements the estimate page asks for (the request form has them all).
PROFILE_REQUIREMENTS = ("stack", "min_stack_version", "region", "vendor")

# What the page shows before the user has said anything.
INITIAL = {
    "task": Task.LORA,
    "params_b": "7",
    "precision": "",
    "optimizer": Optimizer.ADAM,
    "checkpointing": "on",
    "lora_rank": "16",
    "duration": "4",
}


class EstimateForm(forms.Form):
    """A task profile and how long it runs. Shape only; ``advisor.estimator`` says what is valid."""

    task = forms.ChoiceField(label=_("Task"), choices=Task.choices)
    params_b = forms.DecimalField(
        label=_("Model size (billions of parameters)"),
        required=False,
        min_value=LIMITS["params_b"][0],
        max_value=LIMITS["params_b"][1],
        decimal_places=3,
    )
    precision = forms.ChoiceField(
        label=_("Precision"),
        required=False,
        choices=[("", _("Default for the task")), *ModelPrecision.choices],
    )
    seq_len = forms.IntegerField(
        label=_("Sequence length (tokens)"),
        required=False,
        min_value=LIMITS["seq_len"][0],
        max_value=LIMITS["seq_len"][1],
        widget=forms.NumberInput(attrs={"placeholder": "2048 / 4096"}),
    )
    batch = forms.IntegerField(
        label=_("Batch (sequences at once)"),
        required=False,
        min_value=LIMITS["batch"][0],
        max_value=LIMITS["batch"][1],
        widget=forms.NumberInput(attrs={"placeholder": "4 / 2"}),
    )
    optimizer = forms.ChoiceField(label=_("Optimizer"), choices=Optimizer.choices, required=False)
    checkpointing = forms.BooleanField(label=_("Gradient checkpointing"), required=False)
    lora_rank = forms.IntegerField(
        label=_("LoRA rank"),
        required=False,
        min_value=LIMITS["lora_rank"][0],
        max_value=LIMITS["lora_rank"][1],
    )
    scene_gb = forms.DecimalField(
        label=_("Scene size (GB)"),
        required=False,
        min_value=LIMITS["scene_gb"][0],
        max_value=LIMITS["scene_gb"][1],
        decimal_places=2,
    )
    duration = forms.IntegerField(
        label=_("Duration (hours)"),
        min_value=1,
        max_value=settings.CARDPOOL["MAX_LEASE_MINUTES"] // 60,
    )
    # What the cards must have: the same declaration as the request form's.
    locals().update({name: form_field(BY_NAME[name]) for name in PROFILE_REQUIREMENTS})
    start_policy = forms.ChoiceField(
        label=_("When"),
        required=False,
        choices=[
            ("", _("As soon as possible")),
            (StartPolicy.NEXT_OFF_PEAK, _("In the next off-peak window (cheaper)")),
            (StartPolicy.OFF_PEAK_ONLY, _("Only inside an off-peak window (start and end)")),
        ],
    )

    def clean(self):
        data = super().clean()
        data["requirements"] = stored({name: data.get(name) for name in PROFILE_REQUIREMENTS})
        for name, message in requirement_errors(data["requirements"]).items():
            self.add_error(name, message)
        if self.errors:
            return data
        try:
            data["profile"] = TaskProfile(
                task=data["task"],
                params_b=data.get("params_b"),
                precision=data.get("precision") or None,
                seq_len=data.get("seq_len"),
                batch=data.get("batch"),
                optimizer=data.get("optimizer") or Optimizer.ADAM,
                checkpointing=bool(data.get("checkpointing")),
                lora_rank=data.get("lora_rank") or 16,
                scene_gb=data.get("scene_gb"),
            )
        except EstimateError as exc:
            for name, message in exc.errors.items():
                self.add_error(name if name in self.fields else None, message)
        return data


@login_required
def estimate(request):
    """GET: the profile form; with a profile, the breakdown and the ranked options."""
    initial = INITIAL | {"stack": default_stack(request.user)}
    form = EstimateForm(request.GET if "task" in request.GET else initial)
    context: dict = {"form": form, "default_stack": initial["stack"]}
    rec = None
    if form.is_valid():
        try:
            rec = recommend(
                profile=form.cleaned_data["profile"],
                duration=timedelta(hours=form.cleaned_data["duration"]),
                team_id=priced_team_id(request.user),
                requirements=form.cleaned_data["requirements"],
                start_policy=form.cleaned_data.get("start_policy") or "",
            )
        except ValidationError as exc:
            context["problems"] = exc.messages
    if rec is not None:
        context.update(
            rec=rec,
            options=[(option, request_url(rec, option)) for option in rec.options],
            alternatives=[(alt, request_url(alt.rec, alt.option)) for alt in rec.alternatives],
        )
    elif not form.is_valid():
        context["problems"] = [
            f"{form.fields[name].label}: {error}" if name in form.fields else error
            for name, errors in form.errors.items()
            for error in errors
        ]
    template = "leasing/_estimate_result.html" if request.htmx else "leasing/estimate.html"
    return render(request, template, context)
