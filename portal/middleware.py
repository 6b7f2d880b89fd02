import logging
import sys
import zoneinfo

from django.core.signals import got_request_exception
from django.db import InterfaceError, OperationalError
from django.http import HttpResponse, JsonResponse
from django.template.loader import render_to_string
from django.utils import timezone
from django.utils.translation import gettext as _

from portal.permissions import sees_pool

logger = logging.getLogger(__name__)

DB_RETRY_AFTER_SECONDS = 5


class UserTimezoneMiddleware:
    """Show times in the user's own time zone when they set one; the site's otherwise."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        tzname = None
        user = getattr(request, "user", None)
        if user is not None and user.is_authenticated:
            profile = getattr(user, "profile", None)
            tzname = profile.timezone if profile else None
        if tzname:
            try:
                timezone.activate(zoneinfo.ZoneInfo(tzname))
            except (zoneinfo.ZoneInfoNotFoundError, ValueError):
                timezone.deactivate()
        else:
            timezone.deactivate()
        return self.get_response(request)


class DatabaseUnavailableMiddleware:
    """While the database is unreachable, answer 503 with Retry-After instead of a bare 500.

    JSON under /api/, a small page (rendered without the database) elsewhere. Nothing is
    half-written: every service runs in one transaction, which the lost connection rolls back.
    Sits high in MIDDLEWARE so it also covers the session and user lookups of the middleware
    below it: those errors arrive here as 500 responses, flagged by ``_flag_database_error``.
    """

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        response = self.get_response(request)
        if response.status_code == 500 and getattr(request, "_database_unavailable", False):
            return self.unavailable(request)
        return response

    def process_exception(self, request, exception):
        if isinstance(exception, (OperationalError, InterfaceError)):
            logger.warning(
                "database unavailable: %s %s: %s", request.method, request.path, exception
            )
            return self.unavailable(request)
        return None

    @staticmethod
    def unavailable(request) -> HttpResponse:
        message = _("The database is unavailable for a moment. Please try again shortly.")
        if request.path.startswith("/api/"):
            response = JsonResponse({"detail": message, "code": "database_unavailable"}, status=503)
        else:
            page = render_to_string("portal/unavailable.html", {"message": message})
            response = HttpResponse(page, status=503)
        response["Retry-After"] = str(DB_RETRY_AFTER_SECONDS)
        response["Cache-Control"] = "no-store"
        return response


def _flag_database_error(sender, request=None, **kwargs) -> None:
    """Mark the request when the exception Django is turning into a 500 is a lost database."""
    if request is not None and isinstance(sys.exc_info()[1], (OperationalError, InterfaceError)):
        request._database_unavailable = True


got_request_exception.connect(_flag_database_error, dispatch_uid="portal_database_unavailable")


# What a signed-in person outside every team may still reach: their account (profile,
# password, sign-out), the language switch, the admin (its own staff check) and static files.
# The API is gated by portal.api.SeesPool, which also covers token sign-ins.
OPEN_TO_TEAMLESS = ("/accounts/", "/i18n/", "/admin/", "/static/", "/api/")


class TeamlessGateMiddleware:
    """A signed-in person in no team and with no site role sees nothing of the pool: every
    page but their own account answers 403 with what to do (portal.permissions.sees_pool)."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        user = getattr(request, "user", None)
        if (
            user is not None
            and user.is_authenticated
            and not request.path.startswith(OPEN_TO_TEAMLESS)
            and not sees_pool(user)
        ):
            page = render_to_string("portal/no_team.html", request=request)
            return HttpResponse(page, status=403)
        return self.get_response(request)
