"""Values every page needs: the unread notification count (the bell), the broker notice."""

from __future__ import annotations

from leasing import enqueue
from leasing.health import selectors as health_selectors
from leasing.notify import selectors as notify_selectors
from portal.permissions import is_operator


def notifications_unread(request) -> dict:
    """``notification_unread``: a callable the template resolves once (one COUNT query, only
    when the header is rendered); absent for anonymous visitors, so the bell renders nothing."""
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return {}
    cache: dict[str, int] = {}

    def unread() -> int:
        if "n" not in cache:
            cache["n"] = notify_selectors.unread_count(user)
        return cache["n"]

    return {"notification_unread": unread}


def broker_status(request) -> dict:
    """``broker_down``: true while the broker is unreachable (checked at most every 10 s per
    process, leasing.enqueue), so pages can say that background work is delayed."""
    return {"broker_down": lambda: not enqueue.broker_up()}


def alerts_open(request) -> dict:
    """``alerts_open``: for operators, a callable giving how many alerts still last (one COUNT
    query, only when the nav is rendered): the badge on the nav's alerts link."""
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated or not is_operator(user):
        return {}
    cache: dict[str, int] = {}

    def count() -> int:
        if "n" not in cache:
            cache["n"] = health_selectors.lasting_count()
        return cache["n"]

    return {"alerts_open": count}
