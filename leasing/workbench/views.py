"""Session pages: open and stop from the lease page, the proxy's per-request question, and
the portal's own answer at a session URL the proxy does not pass on (starting, ended, 404).

Each session is served from its own origin, ``s<id>.<session domain>`` (portal/session_hosts):
the portal's cookies never reach it. "Open JupyterLab" hands the browser a one-time ticket
for that origin (``session_go``); the origin trades it for a pass cookie of its own
(``session_login``), which is what the proxy's question (``session_auth``) reads there.
"""

from __future__ import annotations

import hmac
import re
import secrets
from urllib.parse import quote

from django.conf import settings
from django.contrib import messages
from django.contrib.auth import get_user_model
from django.contrib.auth.decorators import login_required
from django.contrib.auth.views import redirect_to_login
from django.core import signing
from django.core.cache import cache
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import Http404, HttpResponse, HttpResponseForbidden
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils.crypto import constant_time_compare, salted_hmac
from django.utils.translation import gettext as _
from django.views.decorators.http import require_POST

from leasing.models import Environment, Lease, Session, SshKey
from leasing.workbench import environments, keys, sessions
from portal.session_hosts import pass_cookie_name, session_host_id, session_origin

SESSION_URI = re.compile(r"^/sessions/(\d+)/(desktop/)?")
TICKET_SALT = "cardpool.session-ticket"
PASS_SALT = "cardpool.session-pass"
# A ticket is used at once, by the redirect that carries it; a pass lasts a working day
# (every request is still asked of the gate: only the holder, only while it runs).
TICKET_SECONDS = 60
PASS_SECONDS = 12 * 3600


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


def _pass_data(request, session_id: int) -> dict | None:
    """What this session origin's pass cookie says, when the portal signed it for this
    session and it has not expired; else None."""
    try:
        data = signing.loads(
            request.COOKIES.get(pass_cookie_name(), ""), salt=PASS_SALT, max_age=PASS_SECONDS
        )
    except signing.BadSignature:
        return None
    if not isinstance(data, dict) or data.get("s") != session_id:
        return None
    return data


def _pass_user(request, session_id: int):
    """The holder named by this session origin's pass cookie, or None (no pass, forged,
    expired, for another session, or signed before a password change)."""
    data = _pass_data(request, session_id)
    if data is None:
        return None
    user = get_user_model()._default_manager.filter(pk=data.get("u"), is_active=True).first()
    if user is None or not constant_time_compare(
        str(data.get("h", "")), user.get_session_auth_hash()
    ):
        return None
    return user


def session_auth(request):
    """nginx ``auth_request`` on a session's origin: may this request (its pass cookie, the
    original URI) reach the session? 200 with the upstream and Jupyter's token in headers,
    else 403 (the proxy then hands the request to the portal, which answers 404, "starting"
    or "ended"). Only ``/sessions/<id>/…`` on ``s<id>.…`` — nothing else of the origin."""
    given = request.headers.get("X-Cardpool-Proxy", "")
    if not hmac.compare_digest(given.encode(), proxy_secret().encode()):
        raise Http404
    host_id = session_host_id(request.META.get("HTTP_HOST", ""))
    match = SESSION_URI.match(request.headers.get("X-Original-URI", ""))
    if host_id is None or match is None or int(match.group(1)) != host_id:
        return HttpResponse(status=403)
    user = _pass_user(request, host_id)
    gate = sessions.session_gate(user=user, session_id=host_id)
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


def session_login(request):
    """On a session's origin: trade the one-time ticket from ``session_go`` for this
    origin's pass cookie, then go on to the session."""
    host_id = session_host_id(request.META.get("HTTP_HOST", ""))
    if host_id is None:
        raise Http404
    try:
        data = signing.loads(
            request.GET.get("ticket", ""), salt=TICKET_SALT, max_age=TICKET_SECONDS
        )
    except signing.BadSignature:
        data = None
    if not isinstance(data, dict) or data.get("s") != host_id:
        return HttpResponseForbidden(
            _("This link is not valid; open the session from its lease page.")
        )
    if not cache.add(f"cardpool:session-ticket:{data.get('n')}", 1, TICKET_SECONDS * 2):
        return HttpResponseForbidden(
            _("This link was used already; open the session from its lease page.")
        )
    user = get_user_model()._default_manager.filter(pk=data.get("u"), is_active=True).first()
    gate = sessions.session_gate(user=user, session_id=host_id)
    if gate.session is None:
        raise Http404
    target = request.GET.get("next", "")
    if not target.startswith(gate.session.base_url):
        target = gate.session.base_url + sessions.JUPYTERLAB_PATH
    response = redirect(target)
    value = {"s": host_id, "u": user.pk, "h": user.get_session_auth_hash()}
    response.set_cookie(
        pass_cookie_name(),
        signing.dumps(value, salt=PASS_SALT),
        secure=settings.SESSION_COOKIE_SECURE,
        httponly=True,
        samesite="Lax",
        path="/",
    )
    return response


def _ticket_url(request, session: Session, path: str) -> str:
    """Where the browser goes to reach *session*: its own origin, with a one-time ticket."""
    ticket = signing.dumps(
        {"s": session.pk, "u": request.user.pk, "n": secrets.token_hex(16)}, salt=TICKET_SALT
    )
    return (
        f"{session_origin(request, session.pk)}{reverse('session_login')}"
        f"?ticket={quote(ticket)}&next={quote(path)}"
    )


def session_page(request, pk: int, rest: str = ""):
    """A session URL the proxy did not pass on: only its holder learns its state. On the
    portal's origin, a running session is opened on its own origin; on that origin without a
    pass, the browser is sent to the portal (which has the login)."""
    on_session_host = session_host_id(request.META.get("HTTP_HOST", "")) is not None
    if on_session_host:
        if session_host_id(request.META["HTTP_HOST"]) != pk:
            raise Http404
        user = _pass_user(request, pk)
        if user is None:
            # A pass the portal signed for this very session, whose person has since left
            # or signed out everywhere: the session is closed, and this browser held it.
            data = _pass_data(request, pk)
            held = get_user_model()._default_manager.filter(pk=(data or {}).get("u")).first()
            gate = sessions.session_gate(user=held, session_id=pk)
            if held is not None and gate.state == "ended":
                context = {"session": gate.session, "lease": gate.session.lease}
                context |= {"state": "ended", "portal_url": settings.SITE_URL}
                return render(request, "leasing/session_state.html", context, status=410)
            return redirect(f"{settings.SITE_URL}{request.path}")
    else:
        if not request.user.is_authenticated:
            return redirect_to_login(request.get_full_path())
        user = request.user
    gate = sessions.session_gate(user=user, session_id=pk)
    if gate.session is None:
        raise Http404
    if gate.allow and not on_session_host:
        return redirect(_ticket_url(request, gate.session, request.path))
    context = {
        "session": gate.session,
        "lease": gate.session.lease,
        "state": gate.state,
        "portal_url": settings.SITE_URL if on_session_host else "",
    }
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
            return redirect(
                _ticket_url(request, session, f"{session.base_url}{sessions.desktop_path(session)}")
            )
        if request.GET.get("target") == "terminal":
            try:
                where = sessions.session_terminal_new(session)
            except ValidationError as exc:
                messages.error(request, exc.messages[0])
                return redirect("leasing:detail", lease.pk)
            return redirect(_ticket_url(request, session, f"{session.base_url}{where}"))
        return redirect(
            _ticket_url(request, session, f"{session.base_url}{sessions.JUPYTERLAB_PATH}")
        )
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
