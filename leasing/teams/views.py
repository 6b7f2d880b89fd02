"""The team page: quota use, who holds what, pending approvals, member limits, daily chart."""

from __future__ import annotations

from datetime import timedelta

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import Http404
from django.shortcuts import redirect, render
from django.utils import timezone
from django.utils.translation import gettext as _
from django.views.decorators.http import require_POST

from leasing.teams import approvals, selectors, services
from leasing.teams.forms import DecisionForm, MemberLimitForm, QuotaForm
from portal import charts
from portal.models import Membership
from portal.permissions import is_operator, leads_team


def _team(request, slug):
    team = selectors.team_for_manager(request.user, slug)
    if team is None:
        raise Http404
    return team


def _limits(data: dict) -> dict:
    return {
        k: data.get(k) for k in ("max_concurrent_cards", "card_hours_per_month", "max_lease_hours")
    }


@login_required
def team_list(request):
    teams = selectors.teams_visible_to(request.user).select_related("department").order_by("slug")
    led = set(
        Membership.objects.filter(user=request.user, role=Membership.Role.LEAD).values_list(
            "team_id", flat=True
        )
    )
    return render(request, "leasing/team_list.html", {"teams": teams, "led": led})


@login_required
def team_detail(request, slug: str):
    team = _team(request, slug)
    now = timezone.now()
    overview = selectors.team_overview(team, now=now)
    start = overview["month"][0]
    days = [(start + timedelta(days=i)).date() for i in range((now - start).days + 1)]
    context = {
        "team": team,
        **overview,
        "chart": charts.daily_card_hours(overview["daily"], days) if overview["daily"] else "",
        "can_lead": is_operator(request.user) or leads_team(request.user, team.pk),
        "can_set_quota": is_operator(request.user),
        "limit_form": MemberLimitForm(team=team, prefix="limit"),
        "quota_form": QuotaForm(prefix="quota"),
        "decision_form": DecisionForm(),
    }
    return render(request, "leasing/team_detail.html", context)


def _run(request, team, action) -> None:
    try:
        action()
    except ValidationError as exc:
        for message in exc.messages:
            messages.error(request, message)
    except PermissionDenied as exc:
        messages.error(request, str(exc) or _("You may not do that."))


@login_required
@require_POST
def team_set_limit(request, slug: str):
    team = _team(request, slug)
    form = MemberLimitForm(request.POST, team=team, prefix="limit")
    if not form.is_valid():
        messages.error(
            request, _("Check the member limit: %(errors)s") % {"errors": form.errors.as_text()}
        )
        return redirect("team_detail", slug)
    membership = team.memberships.get(pk=form.cleaned_data["member"])

    def save():
        services.member_limit_set(
            user=request.user,
            membership=membership,
            card_model=form.cleaned_data["card_model"],
            **_limits(form.cleaned_data),
        )
        messages.success(
            request, _("Limit saved for %(user)s.") % {"user": membership.user.get_username()}
        )

    _run(request, team, save)
    return redirect("team_detail", slug)


@login_required
@require_POST
def team_set_quota(request, slug: str):
    team = _team(request, slug)
    form = QuotaForm(request.POST, prefix="quota")
    if not form.is_valid():
        messages.error(
            request, _("Check the quota: %(errors)s") % {"errors": form.errors.as_text()}
        )
        return redirect("team_detail", slug)

    def save():
        services.quota_set(
            user=request.user,
            team=team,
            card_model=form.cleaned_data["card_model"],
            money_per_month=form.cleaned_data.get("money_per_month"),
            **_limits(form.cleaned_data),
        )
        messages.success(request, _("Team quota saved."))

    _run(request, team, save)
    return redirect("team_detail", slug)


@login_required
@require_POST
def team_decide(request, slug: str, pk: int, decision: str):
    if decision not in ("approve", "reject"):
        raise Http404
    team = _team(request, slug)
    lease = selectors.approvals_for(request.user).filter(team=team, pk=pk).first()
    if lease is None:
        raise Http404
    form = DecisionForm(request.POST)
    reason = form.cleaned_data["reason"] if form.is_valid() else ""

    def decide():
        if decision == "approve":
            approvals.lease_approve(lease=lease, user=request.user, note=reason)
            messages.success(request, _("Approved lease %(id)s.") % {"id": lease.pk})
        else:
            approvals.lease_reject(lease=lease, user=request.user, reason=reason)
            messages.success(request, _("Rejected lease %(id)s.") % {"id": lease.pk})

    _run(request, team, decide)
    return redirect("team_detail", slug)
