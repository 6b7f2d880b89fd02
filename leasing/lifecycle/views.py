"""Browser pages for leases: request (with a live preview), my leases, one lease, the calendar
and the pool timeline."""

from __future__ import annotations

from datetime import timedelta

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import Http404, HttpResponseBadRequest
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.utils.translation import gettext as _
from django.views.decorators.http import require_POST

from inventory.models import CardModel, StackFamily
from leasing.billing import accrued, prices
from leasing.choices import OPEN_STATES, TERMINAL_STATES
from leasing.lifecycle import (
    change_decisions,
    changes,
    pool_timeline,
    releases,
    request_steps,
    requests,
    resize,
    selectors,
    utilisation,
)
from leasing.lifecycle.change_requests import pending_change
from leasing.lifecycle.checkpoints import checkpoint_state
from leasing.lifecycle.filters import LeaseFilterSet
from leasing.lifecycle.forms import (
    ExtendForm,
    LeaseRequestForm,
    ResizeForm,
    lease_request_initial,
    prefilled_stack,
)
from leasing.lifecycle.waiting import waiting_because, waiting_because_many
from leasing.notify.messages import approvers_text, breaches_text
from leasing.teams.approvals import approvers, may_decide
from leasing.workbench.access import access_for
from leasing.workbench.selectors import lease_workbench
from portal.input import form_error_lines, local_next
from portal.permissions import is_finance, is_operator


def _form_errors_from(exc: ValidationError, form) -> None:
    """Put a service's ValidationError onto the form's fields (or the form)."""
    field_map = {"duration_minutes": "duration", "request_key": None, "start_policy": "start"}
    if hasattr(exc, "message_dict"):
        for field, errors in exc.message_dict.items():
            target = field_map.get(field, field)
            for error in errors:
                form.add_error(target if target in form.fields else None, error)
    else:
        for error in exc.messages:
            form.add_error(None, error)


def _form_errors_to_messages(request, form) -> None:
    """A small form posted from the lease page: its errors as messages there."""
    for line in form_error_lines(form):
        messages.error(request, line)


@login_required
def lease_list(request):
    scopes = selectors.list_scopes(request.user)
    filterset = LeaseFilterSet(
        request.GET,
        queryset=selectors.leases_in_scope(request.user, scopes[-1]),
        request=request,
    )
    filterset.is_valid()  # a bad value is left out (and the form says why)
    leases = selectors.with_pending_change(filterset.qs)
    open_leases = selectors.with_truth(leases.filter(status__in=OPEN_STATES))
    because = waiting_because_many(open_leases, user=request.user)
    for lease in open_leases:
        lease.because = because.get(lease.pk, [])
    context = {
        "open_leases": open_leases,
        "past_leases": leases.filter(status__in=TERMINAL_STATES)[:20],
        "scope": filterset.scope_in_effect,
        "scopes": scopes,
        "scope_team_label": _("All leases")
        if is_operator(request.user) or is_finance(request.user)
        else _("My teams' leases"),
    }
    template = "leasing/_lease_rows.html" if request.htmx else "leasing/lease_list.html"
    return render(request, template, context)


@login_required
def lease_new(request):
    if request.method == "POST":
        form = LeaseRequestForm(request.POST, user=request.user)
        if form.is_valid():
            d = form.cleaned_data
            try:
                lease = requests.lease_request(
                    user=request.user,
                    team=d["team"],
                    card_model=d["card_model"],
                    requirements=d["requirements"],
                    count=d["count"],
                    duration=d["duration_td"],
                    start_at=d["start_at"],
                    priority=d["priority"],
                    purpose=d["purpose"],
                    same_node=d["same_node"],
                    description=d["description"],
                    request_key=d["request_key"],
                    checkpoint=d["checkpoint"],
                    start_policy=d["start_policy"],
                    environment=d.get("environment"),
                )
            except ValidationError as exc:
                _form_errors_from(exc, form)
            except PermissionDenied as exc:
                form.add_error(None, str(exc))
            else:
                messages.success(
                    request,
                    _("Lease %(id)s requested: %(status)s.")
                    % {"id": lease.pk, "status": lease.get_status_display()},
                )
                return redirect("leasing:detail", lease.pk)
    else:
        form = LeaseRequestForm(initial=lease_request_initial(request), user=request.user)
    stack = prefilled_stack(
        request.user, request.GET.get("card_model") or request.POST.get("card_model")
    )
    return render(
        request,
        "leasing/lease_new.html",
        {"form": form, "default_stack": stack, "default_stack_label": _stack_label(stack)},
    )


def _stack_label(stack: str) -> str:
    return StackFamily(stack).label if stack in StackFamily.values else stack


@login_required
def lease_preview(request):
    """htmx: what submitting this form would do now (refused and why, waits for the lead,
    free now, or when): ``lease_request_check``, the submit's own steps, nothing written."""
    form = LeaseRequestForm(request.GET or request.POST, user=request.user)
    context = {"form": form}
    if form.is_valid():
        d = form.cleaned_data
        try:
            outlook = request_steps.lease_request_check(
                user=request.user,
                team=d["team"],
                card_model=d["card_model"],
                requirements=d["requirements"],
                count=d["count"],
                duration=d["duration_td"],
                start_at=d["start_at"],
                priority=d["priority"],
                purpose=d["purpose"],
                same_node=d["same_node"],
                start_policy=d["start_policy"],
                environment=d.get("environment"),
            )
        except (ValidationError, PermissionDenied) as exc:
            context["problems"] = exc.messages if isinstance(exc, ValidationError) else [str(exc)]
        else:
            start = outlook.start
            context.update(
                outlook=outlook,
                outcome=outlook.outcome,
                start=start,
                told=outlook.told,
                card_model=outlook.card_model,
                chosen=d["card_model"] is None,
                count=d["count"],
                off_peak=start is not None and prices.tariff_at(start) is not None,
                reasons=[b.message for b in outlook.verdict.member_breaches],
                cost=prices.estimate(
                    card_model=outlook.card_model,
                    team_id=d["team"].pk if d["team"] else None,
                    count=d["count"],
                    start=start or outlook.now,
                    end=(start or outlook.now) + d["duration_td"],
                    priority=d["priority"],
                ),
            )
    else:  # what was typed and cannot be asked, said now (fields not reached yet: not)
        context["problems"] = form_error_lines(form, given_only=True)
    return render(request, "leasing/_preview.html", context)


def _visible_lease(request, pk):
    lease = selectors.lease_detail(pk, request.user)
    if lease is None:
        raise Http404
    return lease


@login_required
def lease_detail(request, pk: int):
    lease = _visible_lease(request, pk)
    lease.truth = selectors.lease_truth(lease)
    context = {
        "lease": lease,
        "pending_change": pending_change(lease.pk),
        "decides": may_decide(request.user, lease),
        "extend_form": ExtendForm(),
        "position": selectors.queue_position(lease),
        "because": waiting_because(lease, user=request.user),
        "is_terminal": lease.status in TERMINAL_STATES,
        "can_resolve_release": is_operator(request.user),
        "cost": accrued.lease_cost(lease, now=timezone.now(), until=lease.truth.end),
        "checkpoint": checkpoint_state(lease),
        "workbench": lease_workbench(lease, request.user),
        "access": access_for(lease),
        "family_models": (
            CardModel.objects.filter(family=lease.card_model.family, cards__isnull=False)
            .distinct()
            .order_by("name")
            if lease.card_model.family
            else []
        ),
    }
    if request.htmx and request.GET.get("part") == "status":
        return render(request, "leasing/_lease_live.html", context)
    return render(request, "leasing/lease_detail.html", context)


def _told(request, action, *args) -> None:
    """Run a service; a refusal becomes the page's error messages (never a 500)."""
    try:
        action(*args)
    except ValidationError as exc:
        for message in exc.messages:
            messages.error(request, message)
    except PermissionDenied as exc:
        messages.error(request, str(exc) or _("You may not do that."))


def _act(request, pk, action):
    lease = _visible_lease(request, pk)
    _told(request, action, lease)
    return redirect("leasing:detail", lease.pk)


@login_required
@require_POST
def lease_release(request, pk: int):
    def release(lease):
        changes.lease_release(lease=lease, user=request.user)
        messages.success(request, _("Released: the cards are back in the pool."))

    return _act(request, pk, release)


@login_required
@require_POST
def lease_cancel(request, pk: int):
    def cancel(lease):
        changes.lease_cancel(lease=lease, user=request.user)
        messages.success(request, _("Cancelled."))

    return _act(request, pk, cancel)


@login_required
@require_POST
def lease_extend(request, pk: int):
    form = ExtendForm(request.POST)
    if not form.is_valid():
        _form_errors_to_messages(request, form)
        return redirect("leasing:detail", pk)

    def extend(lease):
        lease = changes.lease_extend(
            lease=lease, user=request.user, minutes=form.cleaned_data["minutes"]
        )
        if _waits_for_lead(request, lease):
            return
        messages.success(
            request,
            _("Extended until %(end)s.")
            % {"end": timezone.localtime(lease.end_at).strftime("%Y-%m-%d %H:%M")},
        )

    return _act(request, pk, extend)


def _waits_for_lead(request, lease) -> bool:
    change = getattr(lease, "pending_change", None)
    if change is None:
        return False
    messages.info(
        request,
        _(
            "This change is above your limits: it now waits for %(who)s to approve it, and you "
            "are told the decision. %(why)s"
        )
        % {
            "who": approvers_text(approvers(lease.team)),
            "why": breaches_text(change.breaches) or change.reason,
        },
    )
    return True


CHANGE_DECISIONS = ("approve", "reject", "withdraw")


@login_required
@require_POST
def change_decide(request, pk: int, decision: str):
    """A lead approves or rejects a pending lease change; its holder may withdraw it."""
    change = get_object_or_404(selectors.changes_visible_to(request.user), pk=pk)
    if decision not in CHANGE_DECISIONS:
        raise Http404

    def decide():
        if decision == "approve":
            change_decisions.change_approve(
                change=change, user=request.user, note=request.POST.get("reason", "")[:500]
            )
            messages.success(request, _("Approved: the change is made."))
        elif decision == "reject":
            change_decisions.change_reject(
                change=change, user=request.user, reason=request.POST.get("reason", "")[:500]
            )
            messages.success(request, _("Rejected; the holder is told why."))
        else:
            change_decisions.change_withdraw(change=change, user=request.user)
            messages.success(request, _("Withdrawn."))

    _told(request, decide)
    back = local_next(request)
    if back:
        return redirect(back)
    return redirect("leasing:detail", change.lease_id)


@login_required
@require_POST
def lease_release_retry(request, pk: int):
    def retry(lease):
        releases.lease_release_retry(lease=lease, user=request.user)
        messages.success(request, _("The release was sent to the backend again."))

    return _act(request, pk, retry)


@login_required
@require_POST
def lease_release_resolve(request, pk: int):
    def resolve(lease):
        releases.lease_release_resolve(
            lease=lease, user=request.user, note=request.POST.get("note", "")
        )
        messages.success(request, _("Marked released: the cards are back in the pool."))

    return _act(request, pk, resolve)


def _usual_model(request, models):
    """The model of the person's latest lease (what they most likely look for), else the first."""
    latest = selectors.latest_card_model_id(request.user)
    return (models.filter(pk=latest).first() if latest else None) or models.first()


@login_required
def calendar(request, slug: str | None = None):
    models = CardModel.objects.filter(cards__isnull=False).distinct().order_by("vendor", "name")
    card_model = get_object_or_404(CardModel, slug=slug) if slug else _usual_model(request, models)
    try:
        days = max(1, min(14, int(request.GET.get("days", 7))))
    except ValueError:
        return HttpResponseBadRequest(_("days must be a whole number between 1 and 14"))
    context = {"models": models, "card_model": card_model, "days": days}
    if card_model is not None:
        # Every row is one local day from 00:00, so a column is the same three hours in
        # every row (the header's); slots already over are shown as past.
        now = timezone.now()
        start = timezone.localtime(now).replace(hour=0, minute=0, second=0, microsecond=0)
        cal = selectors.availability_calendar(card_model, start=start, days=days)
        rows: dict = {}
        for slot in cal["slots"]:
            local = timezone.localtime(slot["start"])
            past = slot["end"] <= now
            rows.setdefault(local.date(), []).append(
                {
                    **slot,
                    "past": past,
                    "level": "past" if past else _level(slot["free"], cal["usable"]),
                    "book_at": None if past or slot["start"] <= now else local,
                }
            )
        context.update(
            calendar=cal,
            rows=rows,
            hours=[f"{h:02d}:00" for h in range(0, 24, 3)],
        )
    return render(request, "leasing/calendar.html", context)


@login_required
def timeline(request, slug: str | None = None):
    """The pool's timeline (Gantt) of one card model; a free stretch opens the request form."""
    models = CardModel.objects.filter(cards__isnull=False).distinct().order_by("vendor", "name")
    card_model = get_object_or_404(CardModel, slug=slug) if slug else _usual_model(request, models)
    try:
        days = max(1, min(14, int(request.GET.get("days", 3))))
        page = max(1, min(10_000, int(request.GET.get("page", 1))))
    except ValueError:
        return HttpResponseBadRequest(_("days and page must be whole numbers"))
    context = {"models": models, "card_model": card_model, "days": days}
    if card_model is not None:
        now = timezone.now().replace(second=0, microsecond=0)
        data = pool_timeline.pool_timeline(
            card_model, user=request.user, start=now, end=now + timedelta(days=days), page=page
        )
        context.update(
            timeline=data, chart=pool_timeline.timeline_chart(data) if data["rows"] else ""
        )
    return render(request, "leasing/timeline.html", context)


def _level(free: int, usable: int) -> str:
    if usable == 0 or free == 0:
        return "none"
    if free * 4 <= usable:
        return "low"
    if free < usable:
        return "some"
    return "all"


@login_required
@require_POST
def lease_resize(request, pk: int):
    form = ResizeForm(request.POST)
    if not form.is_valid():
        _form_errors_to_messages(request, form)
        return redirect("leasing:detail", pk)
    count, model = form.cleaned_data["count"], form.cleaned_data["card_model"]
    carried = {}

    def do(lease):
        carried["lease"] = resize.lease_resize(
            lease=lease, user=request.user, count=count, card_model=model
        )
        if not _waits_for_lead(request, carried["lease"]):
            messages.success(request, _("Resized."))

    response = _act(request, pk, do)
    if "lease" in carried:
        return redirect("leasing:detail", carried["lease"].pk)
    return response


@login_required
def lease_utilisation(request, pk: int):
    """The utilisation chart of a lease (an htmx partial on the lease page)."""
    lease = _visible_lease(request, pk)
    context = {"lease": lease, "utilisation": utilisation.lease_utilisation_context(lease)}
    return render(request, "leasing/_utilisation.html", context)
