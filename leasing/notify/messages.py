"""Notices kept as a message id and its parameters, rendered for whoever reads them.

A notice sent with ``notice_send`` stores ``data["message"]`` and ``data["params"]`` (times as
ISO strings in UTC). Its title and body are rendered once for the holder, in the holder's
time zone and language, for email and webhooks; the portal renders them again for whoever
reads them (``notice_text``), in the reader's language and time zone. Nothing here decides
when to tell anyone: the services that change a lease do, through ``warning_with_notice`` or a
notice key, so each event is told once.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from datetime import datetime
from zoneinfo import ZoneInfo

from django.conf import settings
from django.utils import timezone, translation
from django.utils.dateparse import parse_datetime
from django.utils.translation import gettext as _

from leasing.choices import StallReason
from leasing.models import Lease, Notification
from leasing.notify.services import notify

logger = logging.getLogger(__name__)

Renderer = Callable[[Mapping], tuple[str, str]]


def _at(value) -> str:
    """A stored time in the active time zone (the reader's), with the zone's name."""
    moment = value if isinstance(value, datetime) else parse_datetime(str(value or ""))
    if moment is None:
        return "—"
    zone = timezone.get_current_timezone()
    return f"{timezone.localtime(moment, zone):%Y-%m-%d %H:%M} ({getattr(zone, 'key', zone)})"


def _drain(p: Mapping) -> tuple[str, str]:
    title = _("Lease %(id)s ends early: node %(node)s goes into maintenance at %(at)s") % {
        "id": p["id"],
        "node": p["node"],
        "at": _at(p["at"]),
    }
    body = _(
        "Lease %(id)s was booked until %(end)s; it now ends at %(at)s, when node %(node)s goes into maintenance. Save your work before then."
    ) % {"id": p["id"], "end": _at(p["end"]), "at": _at(p["at"]), "node": p["node"]}
    return title, body


def _expiring(p: Mapping) -> tuple[str, str]:
    title = _("Lease %(id)s ends in %(minutes)s minutes") % {"id": p["id"], "minutes": p["minutes"]}
    body = _(
        "%(n)s × %(model)s end at %(end)s. Extend it from the lease page if you still need the cards."
    ) % {"n": p["n"], "model": p["model"], "end": _at(p["end"])}
    return title, body


def _preemption(p: Mapping) -> tuple[str, str]:
    title = _("Lease %(id)s will be preempted at %(at)s") % {"id": p["id"], "at": _at(p["at"])}
    body = _(
        "A higher-priority request needs these cards. Save a checkpoint now; the lease ends at %(at)s."
    ) % {"at": _at(p["at"])}
    return title, body


def _preemption_partial(p: Mapping) -> tuple[str, str]:
    title = _("Lease %(id)s: %(n)s of its %(count)s cards are taken back at %(at)s") % {
        "id": p["id"],
        "n": p["n"],
        "count": p["count"],
        "at": _at(p["at"]),
    }
    body = _(
        "A higher-priority request needs %(n)s cards (%(cards)s). Save what runs on them before %(at)s; the lease keeps its other %(left)s cards until its end."
    ) % {
        "n": p["n"],
        "cards": ", ".join(p.get("cards", [])) or "—",
        "at": _at(p["at"]),
        "left": int(p["count"]) - int(p["n"]),
    }
    return title, body


def stall_text(reason: str, *, same_node: bool) -> tuple[str, str]:
    """Why a waiting lease cannot start, and what its holder can do (page, API and notice)."""
    why = str(StallReason(reason).label) if reason in StallReason.values else reason
    if reason == StallReason.TOO_FEW_CARDS:
        todo = _("Cancel it and ask for fewer cards or another model.")
    elif reason == StallReason.NO_NODE_BIG_ENOUGH:
        todo = _("Cancel it, ask for fewer cards, or allow the cards to be spread across nodes.")
    elif same_node:
        todo = _(
            "It starts on its own when cards come back into service; or cancel it, ask for fewer cards, or allow the cards to be spread across nodes."
        )
    else:
        todo = _(
            "It starts on its own when cards come back into service; or cancel it, or ask for fewer cards."
        )
    return why, todo


def _stalled(p: Mapping) -> tuple[str, str]:
    why, todo = stall_text(p["reason"], same_node=bool(p.get("same_node", True)))
    title = _("Lease %(id)s cannot start as asked") % {"id": p["id"]}
    body = _("%(n)s × %(model)s: %(why)s. %(todo)s") % {
        "n": p["n"],
        "model": p["model"],
        "why": why,
        "todo": todo,
    }
    return title, body


ENDED_WHY = {
    "drain": lambda p: _("node %(node)s went into maintenance") % {"node": p.get("node", "")},
    "faulty": lambda p: _("a card failed and no spare was free"),
    "preempted": lambda p: _("preempted for a higher-priority request"),
    "idle": lambda p: _("reclaimed: the cards stayed idle"),
}


def _ended(p: Mapping) -> tuple[str, str]:
    why = ENDED_WHY.get(p.get("why", ""), lambda p: p.get("why", ""))(p)
    return _("Lease %(id)s ended: %(why)s") % {"id": p["id"], "why": why}, ""


def _card_swapped(p: Mapping) -> tuple[str, str]:
    title = _("Lease %(id)s: a faulty card was swapped") % {"id": p["id"]}
    body = _(
        "Card %(old)s failed and was replaced by %(new)s. Your lease still holds %(n)s cards; "
        "see the lease page for the new access details."
    ) % {"old": p["old"], "new": p["new"], "n": p["n"]}
    return title, body


def _change(p: Mapping) -> tuple[str, str]:
    """A change to a lease above a member's limit: asked (to the leads) or decided (holder)."""
    if p["kind"] == "extend":
        what = _("extend lease %(id)s by %(minutes)s minutes") % {
            "id": p["id"],
            "minutes": p["minutes"],
        }
    else:
        what = _("resize lease %(id)s to %(n)s × %(model)s") % {
            "id": p["id"],
            "n": p["count"],
            "model": p["model"],
        }
    titles = {
        "requested": _("%(user)s asks for approval: %(what)s"),
        "approved": _("Approved: %(what)s"),
        "rejected": _("Rejected: %(what)s"),
        "lapsed": _("Lapsed (the lease ended first): %(what)s"),
    }
    # The body is the lead's note, or the limits broken (worded for the reader).
    text = breaches_text(p["breaches"]) if p.get("breaches") else p.get("text", "")
    return titles[p["event"]] % {"what": what, "user": p.get("user", "")}, text


def breach_text(limit: str, p: Mapping) -> str:
    """A quota or member limit a request or change would break, worded for the reader (the
    active language and time zone): the limit, what is left and when it frees or renews."""
    who = _("Team “%(team)s”") % {"team": p["team"]} if p.get("team") else p.get("user", "")
    scope = p.get("model") or _("all models")
    base = {"who": who, "scope": scope}
    if limit == "max_lease_hours" and p.get("hours") is not None:
        return _(
            "%(who)s may lease %(scope)s for at most %(max)s hours at a time; this extension would "
            "make the lease %(hours)s hours long. Extend by less, or release and ask again."
        ) % {**base, "max": p["max"], "hours": p["hours"]}
    if limit == "max_lease_hours":
        return _(
            "%(who)s may lease %(scope)s for at most %(max)s hours at a time; ask for %(max)s hours or less "
            "(and extend later if the cards are still free)."
        ) % {**base, "max": p["max"]}
    if limit == "max_concurrent_cards":
        text = _(
            "%(who)s may hold at most %(limit)s cards of %(scope)s at once; %(used)s are held or waiting, "
            "so %(left)s are left and this request needs %(count)s."
        ) % {**base, **{k: p[k] for k in ("limit", "used", "left", "count")}}
        if p.get("frees"):
            when = parse_datetime(p["frees"])
            local = f"{timezone.localtime(when):%Y-%m-%d %H:%M}" if when else p["frees"]
            text += " " + _("The next ones free up at %(when)s.") % {"when": local}
        return text
    if limit == "card_hours_per_month":
        return _(
            "%(who)s has %(left)s of %(limit)s card-hours of %(scope)s left in %(month)s; this request "
            "needs %(need)s there. The budget renews on %(renew)s."
        ) % {**base, **{k: p[k] for k in ("left", "limit", "month", "need", "renew")}}
    return _(
        "%(who)s has ¥%(left)s of ¥%(limit)s left in %(month)s; this request costs ¥%(cost)s "
        "there. The budget renews on %(renew)s."
    ) % {**base, **{k: p[k] for k in ("left", "limit", "month", "cost", "renew")}}


def breaches_text(breaches) -> str:
    """Stored breaches (``[{"limit": …, "params": …}]``), one line each, for the reader."""
    lines = []
    for b in breaches or ():
        try:
            lines.append(breach_text(b["limit"], b["params"]))
        except (KeyError, TypeError, ValueError):
            logger.warning("cannot word breach %r", b)
    return "\n".join(lines)


def _workspace(p: Mapping) -> tuple[str, str]:
    title = _("Workspace %(path)s is %(pct)s%% full") % {"path": p["path"], "pct": p["pct"]}
    body = _(
        "It holds %(used)s GiB of its %(limit)s GiB soft limit. Free some space before the limit is reached."
    ) % {"used": p["used"], "limit": p["limit"]}
    return title, body


MESSAGES: dict[str, Renderer] = {
    "workspace": _workspace,
    "change": _change,
    "card_swapped": _card_swapped,
    "expiring": _expiring,
    "drain": _drain,
    "preemption": _preemption,
    "preemption_partial": _preemption_partial,
    "stalled": _stalled,
    "ended": _ended,
}


def holder_zone(user) -> ZoneInfo:
    name = getattr(getattr(user, "profile", None), "timezone", "") or settings.TIME_ZONE
    try:
        return ZoneInfo(name)
    except (KeyError, ValueError):
        return ZoneInfo(settings.TIME_ZONE)


def holder_language(user) -> str:
    """The holder's language where their profile keeps one, else the site's."""
    return getattr(getattr(user, "profile", None), "language", "") or settings.LANGUAGE_CODE


def render(message: str, params: Mapping, *, language: str, zone) -> tuple[str, str]:
    with translation.override(language), timezone.override(zone):
        return MESSAGES[message](params)


def notice_text(notification: Notification) -> tuple[str, str]:
    """The notice's title and body for the reader (the active language and time zone)."""
    data = notification.data or {}
    message = data.get("message")
    if message in MESSAGES:
        try:
            return MESSAGES[message](data.get("params") or {})
        except (KeyError, TypeError, ValueError):
            logger.warning("notification %s: cannot render %r", notification.pk, message)
    return notification.title, notification.body


def user_notice_send(
    user, *, kind: str, message: str, params: Mapping, key: str, url: str = ""
) -> Notification:
    """``notice_send`` for a notice about no lease (a workspace): worded for *user*."""
    title, body = render(message, params, language=holder_language(user), zone=holder_zone(user))
    return notify(
        user=user,
        kind=kind,
        title=title,
        body=body,
        url=url,
        data={"message": message, "params": dict(params)},
        key=key,
    )


def notice_send(
    lease: Lease,
    *,
    kind: str,
    message: str,
    params: Mapping,
    key: str,
    anchor: str = "",
) -> Notification:
    """Tell the lease's holder (once per *key*): stored as *message* + *params*, rendered in
    the holder's language and time zone for email and webhooks."""
    clean = {k: (v.isoformat() if isinstance(v, datetime) else v) for k, v in params.items()}
    title, body = render(
        message, clean, language=holder_language(lease.user), zone=holder_zone(lease.user)
    )
    return notify(
        user=lease.user,
        kind=kind,
        title=title,
        body=body,
        lease=lease,
        url=f"/leases/{lease.pk}/{anchor}",
        data={"message": message, "params": clean},
        key=key,
    )
