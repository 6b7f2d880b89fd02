import logging
import sys
import zoneinfo

from django.core.signals import got_request_exception
from django.db import InterfaceError, OperationalError
from django.http import HttpResponse, JsonResponse
from django.template.loader import render_to_string
from django.utils import timezone
from django.utils.translation import gettext as _

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
