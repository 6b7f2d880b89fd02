"""Session pages: open and stop from the lease page, the proxy's per-request question, and
the portal's own answer at a session URL the proxy does not pass on (starting, ended, 404).
"""

from __future__ import annotations

import hmac
import re

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import Http404, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils.crypto import salted_hmac
from django.utils.translation import gettext as _
from django.views.decorators.http import require_POST

from leasing.models import Environment, Lease, Session, SshKey
from leasing.workbench import environments, keys, sessions

SESSION_URI = re.compile(r"^/sessions/(\d+)/(desktop/)?")


def proxy_secret() -> str:
    """What the session proxy sends with each question (``X-Cardpool-Proxy``), so only it may
    ask: from ``CARDPOOL_SESSION_PROXY_SECRET``, else derived from the secret key."""
    return (
        settings.CARDPOOL_SESSIONS.get("PROXY_SECRET")
        or salted_hmac("cardpool.session-proxy", "v1", secret=settings.SECRET_KEY).hexdigest()
    )


def visible_lease(request, pk: int) -> Lease:
    """A lease the person may work inside (``Lease.objects.visible_to``); 404 otherwise."""
    leases = Lease.objects.visible_to(request.user, to_work_on=True).select_related("user")
    return get_object_or_404(leases, pk=pk)


def session_auth(request):
    """nginx ``auth_request``: may this request (its cookies, the original URI) reach the
    session? 200 with the upstream and Jupyter's token in headers, else 403 (the proxy then
    hands the request to the portal, which answers 404, "starting" or "ended")."""
    given = request.headers.get("X-Cardpool-Proxy", "")
    if not hmac.compare_digest(given.encode(), proxy_secret().encode()):
        raise Http404
    match = SESSION_URI.match(request.headers.get("X-Original-URI", ""))
    gate = sessions.session_gate(user=request.user, session_id=int(match.group(1)) if match else 0)
    if not gate.allow:
        return HttpResponse(status=403)
    response = HttpResponse(status=200)
    session = gate.session
    # The desktop's websockify listens beside JupyterLab, on the next port.
    port = session.port + (1 if match and match.group(2) else 0)
    response["X-Session-Upstream"] = f"{session.address or session.host}:{port}"
    response["X-Session-Token"] = session.token
    response["Cache-Control"] = "no-store"
    return response


def session_page(request, pk: int, rest: str = ""):
    """A session URL the proxy did not pass on: only its holder learns its state."""
    if not request.user.is_authenticated:
        return redirect_to_login(request.get_full_path())
    gate = sessions.session_gate(user=request.user, session_id=pk)
    if gate.session is None:
        raise Http404
    context = {"session": gate.session, "lease": gate.session.lease, "state": gate.state}
    status = {"starting": 200, "ended": 410, "running": 503}[gate.state]
    return render(request, "leasing/session_state.html", context, status=status)


@login_required
@require_POST
def session_open(request, pk: int):
    """The lease page's "Open JupyterLab" / "Open terminal": start the session if none
    runs, then go where it opens (``session_go``)."""
    lease = visible_lease(request, pk)
    target = request.POST.get("target")
    target = target if target in ("terminal", "desktop") else "lab"
    try:
        sessions.session_open(lease=lease, user=request.user, want=target)
    except (ValidationError, PermissionDenied) as exc:
        for message in getattr(exc, "messages", [str(exc)]):
            messages.error(request, message)
        return redirect("leasing:detail", lease.pk)
    return redirect(f"{reverse('session_go', args=[lease.pk])}?target={target}")


@login_required
def session_go(request, pk: int):
    """While the session starts, a page that reloads itself; once it runs, JupyterLab — or,
    for a terminal, a new terminal of it."""
    lease = visible_lease(request, pk)
    session = Session.objects.filter(lease=lease).order_by("-pk").first()
    if session is None:
        return redirect("leasing:detail", lease.pk)
    gate = sessions.session_gate(user=request.user, session_id=session.pk)
    if gate.session is None:
        raise Http404
    if gate.allow:
        if request.GET.get("target") == "desktop":
            return redirect(f"{session.base_url}{sessions.desktop_path(session)}")
        if request.GET.get("target") == "terminal":
            try:
                where = sessions.session_terminal_new(session)
            except ValidationError as exc:
                messages.error(request, exc.messages[0])
                return redirect("leasing:detail", lease.pk)
            return redirect(f"{session.base_url}{where}")
        return redirect(f"{session.base_url}{sessions.JUPYTERLAB_PATH}")
    context = {"session": session, "lease": lease, "state": gate.state}
    status = 410 if gate.state == "ended" else 200
    return render(request, "leasing/session_state.html", context, status=status)


@login_required
@require_POST
def session_stop(request, pk: int, session_pk: int):
    lease = visible_lease(request, pk)
    session = get_object_or_404(Session, pk=session_pk, lease=lease)
    try:
        sessions.session_stop(session=session, user=request.user)
    except PermissionDenied as exc:
        messages.error(request, str(exc))
    return redirect("leasing:detail", lease.pk)


@login_required
@require_POST
def lease_environment(request, pk: int):
    """Choose the lease's environment on the lease page."""
    lease = visible_lease(request, pk)
    slug = request.POST.get("environment", "")
    environment = Environment.objects.filter(slug=slug).first() if slug else None
    if slug and environment is None:
        messages.error(request, _("Unknown environment."))
        return redirect("leasing:detail", lease.pk)
    try:
        environments.lease_set_environment(lease=lease, user=request.user, environment=environment)
    except (ValidationError, PermissionDenied) as exc:
        for message in getattr(exc, "messages", [str(exc)]):
            messages.error(request, message)
    return redirect("leasing:detail", lease.pk)


@login_required
@require_POST
def ssh_key_add(request):
    try:
        keys.ssh_key_add(
            user=request.user,
            public_key=request.POST.get("public_key", ""),
            name=request.POST.get("name", "").strip(),
        )
    except ValidationError as exc:
        for message in exc.messages:
            messages.error(request, message)
    return redirect("profile:index")


@login_required
@require_POST
def ssh_key_remove(request, pk: int):
    key = get_object_or_404(SshKey, pk=pk, user=request.user)
    keys.ssh_key_remove(user=request.user, key=key)
    return redirect("profile:index")
