"""Every session on its own origin: ``s<id>.<session domain>`` (docs/decisions.md).

A JupyterLab session runs code the holder (and any extension of a shared environment) put
there; on the portal's origin that code could read the portal's API with the visitor's
login. On an origin of its own it cannot: the portal's cookies are host-only (``__Host-``
under HTTPS), so no session origin receives them, and the browser keeps a session's scripts
from reading the portal's answers. The session origin carries only its own pass cookie,
which the proxy strips before the node.

The session domain is ``CARDPOOL_SESSION_DOMAIN``, or else the portal's own host name as the
browser used it (``localhost`` for an address: ``*.localhost`` is loopback in browsers).
"""

from __future__ import annotations

import ipaddress
import re

from django.conf import settings
from django.http import HttpResponseNotFound
from django.utils.translation import gettext as _

SESSION_HOST = re.compile(r"^s([0-9]+)\.(.+)$")
# What a session origin may ask of the portal: its login step, the proxy's question, the
# portal's own answer at a session URL (starting, ended, not yours) and static files.
SESSION_HOST_PATHS = re.compile(r"^/(?:_cardpool/|sessions/|static/)")


def cookie_names(*, secure: bool) -> tuple[str, str]:
    """The portal's session and CSRF cookie names: ``__Host-`` prefixed under HTTPS (the
    browser then refuses any such cookie that is not Secure, host-only and for ``/``)."""
    prefix = "__Host-" if secure else ""
    return f"{prefix}cardpool-session", f"{prefix}cardpool-csrf"


def pass_cookie_name() -> str:
    """The cookie a session's origin carries (its holder's pass), host-only on that origin."""
    return "__Host-cardpool-pass" if settings.SESSION_COOKIE_SECURE else "cardpool-pass"


def _split(host: str) -> tuple[str, str]:
    """(name, ":port" or "") of a Host header value."""
    if host.startswith("["):
        name, _, rest = host[1:].partition("]")
        return name, rest
    name, sep, port = host.rpartition(":")
    return (name, f":{port}") if sep and port.isdigit() else (host, "")


def session_domain(portal_host: str) -> str:
    """The domain sessions live under, for a portal reached at *portal_host*."""
    configured = settings.CARDPOOL_SESSIONS["DOMAIN"]
    if configured:
        return configured
    name, _port = _split(portal_host)
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return name.lower()
    return "localhost"


def session_host_id(host: str) -> int | None:
    """The session id when *host* (a Host header) is a session's origin, else None."""
    name, _port = _split(host.lower())
    match = SESSION_HOST.match(name)
    if not match:
        return None
    configured = settings.CARDPOOL_SESSIONS["DOMAIN"]
    if configured and match.group(2) != configured.lower():
        return None
    digits = match.group(1)
    return int(digits) if len(digits) <= 12 else 0  # 0: no such session (and no huge int)


def session_origin(request, session_id: int) -> str:
    """``scheme://s<id>.<domain>[:port]``: where the session is served, seen from *request*
    on the portal (same scheme and port: one proxy serves both)."""
    host = request.get_host()
    _name, port = _split(host)
    return f"{request.scheme}://s{session_id}.{session_domain(host)}{port}"


def session_allowed_hosts(allowed: list[str], configured: str) -> list[str]:
    """ALLOWED_HOSTS plus the sub-domains (``.domain``) sessions are served under: of
    *configured* (CARDPOOL_SESSION_DOMAIN), else of each allowed host (``localhost`` for an
    address). Called from the settings."""
    extra = []
    for host in [configured] if configured else allowed:
        if not host or host == "*" or host.startswith("."):
            continue
        name, _port = _split(host)
        try:
            ipaddress.ip_address(name)
            name = "localhost"
        except ValueError:
            pass
        extra.append(f".{name}")
    return list(dict.fromkeys([*allowed, *extra]))


class SessionHostMiddleware:
    """On a session's origin the portal answers only what a session needs (its login step,
    the proxy's question, its state page): never a portal page or the API, whatever nginx
    passes on; and it sets no cookie there but the pass."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        host = request.META.get("HTTP_HOST", "")
        if session_host_id(host) is None:
            return self.get_response(request)
        if not SESSION_HOST_PATHS.match(request.path_info):
            # A bare 404: the site's 404 page would set a CSRF cookie on this origin.
            return HttpResponseNotFound(
                _("Not found: this address serves a session only."), content_type="text/plain"
            )
        response = self.get_response(request)
        # No portal cookie is ever set for a session's origin (a page of ours rendered there
        # would otherwise leave a CSRF cookie its scripts could read); only the pass.
        for name in [n for n in response.cookies if n != pass_cookie_name()]:
            del response.cookies[name]
        return response
