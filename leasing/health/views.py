"""The operators' alerts page (/alerts/): lasting and past alerts, filterable, with
acknowledge and silence; the rules in force beside them."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied, ValidationError
from django.core.paginator import Paginator
from django.http import Http404
from django.shortcuts import redirect, render
from django.utils.translation import gettext as _
from django.views.decorators.http import require_POST

from leasing.health import rules as health_rules
from leasing.health import selectors, services
from leasing.models import Alert
from leasing.notify.messages import render_params
from portal.input import local_next
from portal.permissions import is_operator

PAGE_SIZE = 50
SILENCE_CHOICES = (60, 240, 1440)


def _operator_only(request) -> None:
    if not is_operator(request.user):
        raise PermissionDenied(_("Only operators see pool alerts."))


@login_required
def alert_list(request):
    _operator_only(request)
    filters = selectors.AlertFilterSet(request.GET or None, queryset=selectors.alerts_list())
    alerts = filters.qs if filters.is_bound and filters.is_valid() else selectors.alerts_list()
    page = Paginator(alerts, PAGE_SIZE).get_page(request.GET.get("page"))
    for alert in page:
        params = {**alert.params, "id": alert.pk, "value": alert.value, "at": alert.opened_at}
        alert.title, alert.body = render_params("alert_opened", params)
    query = request.GET.copy()
    query.pop("page", None)
    return render(
        request,
        "leasing/alerts.html",
        {
            "filters": filters,
            "page": page,
            "query": query.urlencode(),
            "rules": health_rules.rules_in_force().values(),
            "silence_choices": SILENCE_CHOICES,
        },
    )


def _alert(pk: int) -> Alert:
    try:
        return Alert.objects.get(pk=pk)
    except Alert.DoesNotExist:
        raise Http404 from None


@login_required
@require_POST
def alert_acknowledge(request, pk: int):
    _operator_only(request)
    try:
        services.alert_acknowledge(alert=_alert(pk), user=request.user)
        messages.success(request, _("Alert %(id)s acknowledged.") % {"id": pk})
    except ValidationError as exc:
        messages.error(request, " ".join(exc.messages))
    return redirect(local_next(request) or "/alerts/")


@login_required
@require_POST
def alert_silence(request, pk: int):
    _operator_only(request)
    try:
        minutes = int(request.POST.get("minutes", ""))
    except ValueError:
        minutes = -1
    try:
        services.alert_silence(alert=_alert(pk), user=request.user, minutes=minutes)
        if minutes:
            messages.success(
                request, _("Alert %(id)s silenced for %(m)s minutes.") % {"id": pk, "m": minutes}
            )
        else:
            messages.success(request, _("Alert %(id)s no longer silenced.") % {"id": pk})
    except ValidationError as exc:
        messages.error(request, " ".join(exc.messages))
    return redirect(local_next(request) or "/alerts/")
