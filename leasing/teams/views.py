"""The team page: quota use, who holds what, pending approvals, member limits, daily chart."""

from __future__ import annotations

from datetime import date, datetime, time, timedelta

from django.contrib import messages
from django.contrib.auth import get_user_model
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import Http404
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.translation import gettext as _
from django.views.decorators.http import require_POST

from inventory.charts import model_colours_by_name
from leasing import periods
from leasing.teams import approvals, fairshare, selectors, services
from leasing.teams.forms import (
    ChartRangeForm,
    DecisionForm,
    IdlePolicyForm,
    MemberAddForm,
    MemberLimitForm,
    QuotaForm,
)
from portal import charts
from portal.input import form_error_lines
from portal.permissions import is_finance, is_operator, lead_memberships, leads_team


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
    led = set(lead_memberships(request.user).values_list("team_id", flat=True))
    return render(request, "leasing/team_list.html", {"teams": teams, "led": led})


def _chart_range(request, now) -> tuple[ChartRangeForm, date, date]:
    """The chart's days from the query (?start=&end=), else the last 30 days (not this month
    so far: on the 1st that is a single bar)."""
    today = periods.local_date(now)
    form = ChartRangeForm(request.GET or None)
    start, end = today - timedelta(days=29), today
    if form.is_bound and form.is_valid():
        start = form.cleaned_data.get("start") or start
        end = form.cleaned_data.get("end") or end
        if end < start:  # only one of them given
            start, end = end, start
        start = max(start, end - timedelta(days=selectors.CHART_DAYS_MAX - 1))
    return form, start, end


def _chart_ranges(today: date) -> list[tuple[str, date, date]]:
    first = today.replace(day=1)
    last_month_end = first - timedelta(days=1)
    return [
        (_("This month"), first, today),
        (_("Last month"), last_month_end.replace(day=1), last_month_end),
        (_("Last 30 days"), today - timedelta(days=29), today),
        (_("Last 90 days"), today - timedelta(days=89), today),
    ]


@login_required
def team_detail(request, slug: str):
    team = selectors.team_for_viewer(request.user, slug)
    if team is None:
        raise Http404
    now = timezone.now()
    range_form, start, end = _chart_range(request, now)
    tz = periods.site_tz()
    overview, daily = selectors.team_page(
        team,
        now=now,
        since=datetime.combine(start, time.min, tzinfo=tz),
        until=datetime.combine(end + timedelta(days=1), time.min, tzinfo=tz),
    )
    days = [start + timedelta(days=i) for i in range((end - start).days + 1)]
    can_lead = is_operator(request.user) or leads_team(request.user, team.pk)
    manager = can_lead or is_finance(request.user)
    context = {
        "team": team,
        **overview,
        "chart": charts.daily_card_hours(daily, days, model_colours_by_name()) if daily else "",
        "chart_form": range_form,
        "chart_start": start,
        "chart_end": end,
        "chart_ranges": _chart_ranges(periods.local_date(now)),
        "can_lead": can_lead,
        "manager": manager,
        "can_set_quota": is_operator(request.user),
        "fair": fairshare.team_standing(team),
        "limit_form": MemberLimitForm(team=team, prefix="limit"),
        "quota_form": QuotaForm(prefix="quota"),
        "decision_form": DecisionForm(),
        "member_form": MemberAddForm(prefix="member"),
        "idle_form": IdlePolicyForm(
            prefix="idle",
            initial={
                "idle_threshold_pct": team.idle_threshold_pct,
                "idle_minutes": team.idle_minutes,
                "idle_reclaim": team.idle_reclaim,
            },
        ),
    }
    if not manager:  # a member sees the team's use, who holds what, and her own limits
        context["pending"] = context["pending_changes"] = []
        context["limits"] = [
            limit for limit in overview["limits"] if limit.membership.user_id == request.user.pk
        ]
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
            request,
            _("Check the member limit: %(errors)s") % {"errors": "; ".join(form_error_lines(form))},
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
            request,
            _("Check the quota: %(errors)s") % {"errors": "; ".join(form_error_lines(form))},
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


@login_required
@require_POST
def team_member_add(request, slug: str):
    team = _team(request, slug)
    form = MemberAddForm(request.POST, prefix="member")
    if not form.is_valid():
        messages.error(request, _("Give the username of an existing account."))
        return redirect("team_detail", slug)
    name = form.cleaned_data["username"].strip()
    member = get_user_model().objects.filter(username__iexact=name).first()
    if member is None:
        messages.error(
            request,
            _("No account is called %(user)s; invite them below instead.") % {"user": name},
        )
        return redirect("team_detail", slug)

    def add():
        services.membership_add(user=request.user, team=team, member=member)
        messages.success(request, _("%(user)s joined the team.") % {"user": member.username})

    _run(request, team, add)
    return redirect(f"{team_url(slug)}#members")


@login_required
@require_POST
def team_member_remove(request, slug: str, pk: int):
    team = _team(request, slug)
    membership = team.memberships.select_related("user", "team").filter(pk=pk).first()
    if membership is None:
        raise Http404

    def remove():
        services.membership_remove(user=request.user, membership=membership)
        messages.success(request, _("%(user)s left the team.") % {"user": membership.user.username})

    _run(request, team, remove)
    return redirect(f"{team_url(slug)}#members")


@login_required
@require_POST
def team_set_idle_policy(request, slug: str):
    team = _team(request, slug)
    form = IdlePolicyForm(request.POST, prefix="idle")
    if not form.is_valid():
        messages.error(
            request,
            _("Check the idle policy: %(errors)s") % {"errors": "; ".join(form_error_lines(form))},
        )
        return redirect(f"{team_url(slug)}#idle-policy")

    def save():
        services.team_idle_policy_set(user=request.user, team=team, **form.cleaned_data)
        messages.success(request, _("Idle policy saved."))

    _run(request, team, save)
    return redirect(f"{team_url(slug)}#idle-policy")


def team_url(slug: str) -> str:
    return reverse("team_detail", args=[slug])
