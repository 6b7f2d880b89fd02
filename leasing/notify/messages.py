"""Notices kept as a message id and its parameters, rendered for whoever reads them.

A notice sent with ``notice_send`` stores ``data["message"]`` and ``data["params"]`` (times as
ISO strings in UTC). Its title and body are rendered once for the holder, in the holder's
time zone and language, for email and webhooks; the portal renders them again for whoever
reads them (``notice_text``), in the reader's language and time zone. Nothing here decides
when to tell anyone: the services that change a lease do, through ``warning_with_notice`` or a
notice key, so each event is told once.

Long (about 600 lines) because it is the catalogue: every kind's wording sits in one table,
so adding a kind, or checking that every kind reads well in both languages, is one file.
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
from django.utils.translation import ngettext

from leasing.choices import AlertKind, AlertSeverity, EndReason, PreemptWhy, StallReason
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
    # "minutes" is the warning's offset (10 for the 10-minute warning, even if the sweep ran
    # a few seconds after it), rounded up from what was left for warnings sent late.
    title = _("Lease %(id)s ends in %(minutes)s minutes") % {"id": p["id"], "minutes": p["minutes"]}
    body = _(
        "%(n)s × %(model)s end at %(end)s. Extend it from the lease page if you still need the cards."
    ) % {"n": p["n"], "model": p["model"], "end": _at(p["end"])}
    return title, body


def _by_why(why: str | None, *, priority: str, share: str, fair_share: str) -> str:
    """The wording for a preemption's reason (``PreemptWhy``); a notice from before the
    reason was kept is a higher class's."""
    return {PreemptWhy.FAIR_SHARE: fair_share, PreemptWhy.SHARE: share}.get(why, priority)


def _preemption(p: Mapping) -> tuple[str, str]:
    title = _("Lease %(id)s will be preempted at %(at)s") % {"id": p["id"], "at": _at(p["at"])}
    body = _by_why(
        p.get("why"),
        priority=_(
            "A higher-priority request needs these cards. Save a checkpoint now; the lease ends at %(at)s."
        ),
        share=_(
            "A team's guaranteed share needs these cards back. Save a checkpoint now; the lease ends at %(at)s."
        ),
        fair_share=_(
            "Another team is below its fair share of these cards and waiting for them. This lease agreed to be requeued: its work resumes in a new lease for the time it had left. Save a checkpoint now; the lease ends at %(at)s."
        ),
    )
    return title, body % {"at": _at(p["at"])}


def _preemption_partial(p: Mapping) -> tuple[str, str]:
    title = _("Lease %(id)s: %(n)s of its %(count)s cards are taken back at %(at)s") % {
        "id": p["id"],
        "n": p["n"],
        "count": p["count"],
        "at": _at(p["at"]),
    }
    body = _by_why(
        p.get("why"),
        priority=_(
            "A higher-priority request needs %(n)s cards (%(cards)s). Save what runs on them before %(at)s; the lease keeps its other %(left)s cards until its end."
        ),
        share=_(
            "A team's guaranteed share needs %(n)s cards (%(cards)s) back. Save what runs on them before %(at)s; the lease keeps its other %(left)s cards until its end."
        ),
        fair_share=_(
            "A team below its fair share needs %(n)s cards (%(cards)s). Save what runs on them before %(at)s; the lease keeps its other %(left)s cards until its end."
        ),
    )
    body = body % {
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
    elif reason == StallReason.REQUIREMENTS:
        todo = _(
            "Cancel it and ask again with another region, network or stack version, or fewer cards."
        )
    elif reason == StallReason.NO_NODE_BIG_ENOUGH:
        todo = _("Cancel it, ask for fewer cards, or allow the cards to be spread across nodes.")
    elif reason == StallReason.UNHEALTHY:
        todo = _(
            "It starts on its own when the cards cool down or their node reports again; the operators have been alerted. Or cancel it and ask for another model."
        )
    elif same_node:
        todo = _(
            "It starts on its own when cards come back into service; or cancel it, ask for fewer cards, or allow the cards to be spread across nodes."
        )
    else:
        todo = _(
            "It starts on its own when cards come back into service; or cancel it, or ask for fewer cards."
        )
    return why, todo


def estimate_why(why: str, p: Mapping) -> str:
    """Why a waiting lease's estimated start moved (``scheduler.moves.WHY``), for its reader."""
    if why == "higher_priority":
        return _("a request of higher priority joined the queue ahead of it")
    if why == "request_ahead":
        return _("a request joined the queue ahead of it")
    if why == "released":
        return _("a lease was released early")
    if why == "drain":
        return _("node %(node)s is being drained") % {"node": p.get("node", "")}
    if why == "card_failed":
        return _("a card failed")
    if why == "extended":
        return _("a lease was extended")
    if why == "fair_share":
        return _("the teams' fair shares were recomputed")
    if why == "team_passed":
        return _(
            "a later request of its team started on cards that were free until the first in the queue starts"
        )
    return _("the queue's plan changed")


def _estimate_moved(p: Mapping) -> tuple[str, str]:
    title = _("Lease %(id)s: estimated start moved to %(to)s") % {"id": p["id"], "to": _at(p["to"])}
    body = _("%(n)s × %(model)s: estimated start %(from)s → %(to)s, because %(why)s.") % {
        "n": p["n"],
        "model": p["model"],
        "from": _at(p["from"]),
        "to": _at(p["to"]),
        "why": estimate_why(p.get("why", ""), p),
    }
    return title, body


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
    "slurm_down": lambda p: _("node %(nodes)s is down in Slurm") % {"nodes": p.get("nodes", "")},
    "slurm_cancelled": lambda p: _("its Slurm allocation was cancelled outside Cardpool"),
    "kube_node_down": lambda p: (
        _("node %(nodes)s is not ready in Kubernetes") % {"nodes": p.get("nodes", "")}
    ),
    "kube_pod_failed": lambda p: _("its Kubernetes pod failed"),
    "kube_pod_gone": lambda p: _("its Kubernetes pod was deleted outside Cardpool"),
    "faulty": lambda p: _("a card failed and no spare was free"),
    "preempted": lambda p: _("preempted for a higher-priority request"),
    "idle": lambda p: _("reclaimed: the cards stayed idle"),
    "leaver": lambda p: _("its holder no longer has access to the site"),
}


def _ended(p: Mapping) -> tuple[str, str]:
    why = ENDED_WHY.get(p.get("why", ""), lambda p: p.get("why", ""))(p)
    body = ""
    if p.get("why", "").startswith("slurm_"):
        body = _(
            "Slurm no longer holds the cards of this lease, so they are back in the pool. "
            "Ask for new cards if you still need them."
        )
    elif p.get("why", "").startswith("kube_"):
        body = _(
            "Kubernetes no longer runs the pod of this lease, so its cards are back in the pool. "
            "Ask for new cards if you still need them."
        )
    return _("Lease %(id)s ended: %(why)s") % {"id": p["id"], "why": why}, body


def _idle(p: Mapping) -> tuple[str, str]:
    policy = (
        _("It will be reclaimed in %(minutes)s minutes unless the cards get busy.")
        % {"minutes": p["grace"]}
        if p.get("reclaim")
        else _("Release it if you no longer need the cards.")
    )
    body = _("The cards stayed under %(pct)s%% utilisation for %(minutes)s minutes. %(policy)s") % {
        "pct": p["pct"],
        "minutes": p["minutes"],
        "policy": policy,
    }
    return _("Lease %(id)s: cards idle") % {"id": p["id"]}, body


def _budget(p: Mapping) -> tuple[str, str]:
    """A team's monthly budget reached a level (to the leads)."""
    scope = p.get("model") or _("all models")
    title = _("%(team)s: %(pct)s%% of the %(month)s budget for %(scope)s is used") % {
        "team": p["team"],
        "pct": p["pct"],
        "month": p["month"],
        "scope": scope,
    }
    body = _("%(used)s of %(limit)s %(unit)s used or booked this month.") % {
        "used": p["used"],
        "limit": p["limit"],
        "unit": p["unit"],
    }
    return title, body


def _hours_text(hours) -> str:
    return f"{float(hours):.1f}".removesuffix(".0")


def _end_reason(reason: str) -> str:
    return str(EndReason(reason).label) if reason in EndReason.values else (reason or "—")


def _lease(p: Mapping) -> tuple[str, str]:
    """A lease's own event (``p["event"]``: a ``Kind``), worded for the reader."""
    event = p["event"]
    what = {"id": p["id"], "n": p["n"], "model": p["model"]}
    if event == "approval_requested":
        body = _("%(n)s × %(model)s for %(hours)s h, charged to %(team)s.") % {
            **what,
            "hours": _hours_text(p["hours"]),
            "team": p["team"],
        }
        reason = breaches_text(p.get("breaches")) or p.get("reason", "")
        if reason:
            body += "\n" + reason
        title = _("%(user)s asks for approval: lease %(id)s") % {**what, "user": p["user"]}
        return title, body
    if event == "approval_decided":
        if p.get("decision") == "rejected":
            return _("Lease %(id)s rejected") % what, p.get("note", "")
        return _("Lease %(id)s approved") % what, p.get("note", "")
    if event == "lease_failed":
        return _("Lease %(id)s failed") % what, p.get("failure", "")
    if event == "lease_active":
        body = _("%(n)s × %(model)s are yours until %(end)s.") % {**what, "end": _at(p["end"])}
        return _("Lease %(id)s is active") % what, body
    if event == "lease_started_from_queue":
        body = _("Your wait is over: %(n)s × %(model)s are yours until %(end)s.") % {
            **what,
            "end": _at(p["end"]),
        }
        return _("Lease %(id)s has started") % what, body
    if event == "lease_queued":
        if p.get("estimated_start"):
            body = _("Estimated start: %(at)s.") % {"at": _at(p["estimated_start"])}
        else:
            body = _("No estimated start yet: the cards it waits for have no known end.")
        return _("Lease %(id)s is queued") % what, body
    if event == "lease_ended":
        body = _("Reason: %(reason)s.") % {"reason": _end_reason(p.get("reason", ""))}
        return _("Lease %(id)s has ended") % what, body
    if event == "release_failed":
        body = _(
            "The backend could not take the cards back: %(why)s. They stay out of the pool "
            "until you retry the release or mark it done by hand on the lease page."
        ) % {"why": p.get("failure") or "—"}
        return _("Lease %(id)s: the release failed") % what, body
    raise KeyError(event)


def _restarting(p: Mapping) -> tuple[str, str]:
    title = _("Lease %(id)s: its pod restarts now") % {"id": p["id"]}
    body = _(
        "Your lease's cards change to %(n)s, so its Kubernetes pod is replaced: what runs in it "
        "stops, and sessions start again in the new pod. Save your work; see the lease page "
        "for the new access details."
    ) % {"n": p["n"]}
    return title, body


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
        what = _("extend lease %(id)s by %(duration)s") % {
            "id": p["id"],
            "duration": duration_text(p["minutes"]),
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
    active language and time zone): the limit, what is left and when it frees or renews.
    What was asked (``p["ask"]``: a request, an extension, a resize) counts only what it adds
    — an extension no cards, a resize the cards it adds; advice on what to ask instead only
    where the team's rule refuses (a member's limit waits for the lead)."""
    who = _("Team “%(team)s”") % {"team": p["team"]} if p.get("team") else p.get("user", "")
    scope = p.get("model") or _("all models")
    base = {"who": who, "scope": scope}
    if limit == "max_lease_hours" and p.get("hours") is not None:
        text = _(
            "%(who)s may lease %(scope)s for at most %(max)s hours at a time; this extension would "
            "make the lease %(hours)s hours long."
        ) % {**base, "max": p["max"], "hours": p["hours"]}
        if p.get("team"):
            text += " " + _("Extend by less, or release and ask again.")
        return text
    if limit == "max_lease_hours":
        return _(
            "%(who)s may lease %(scope)s for at most %(max)s hours at a time; ask for %(max)s hours or less "
            "(and extend later if the cards are still free)."
        ) % {**base, "max": p["max"]}
    if limit == "max_concurrent_cards":
        return _concurrent_text(p, base)
    if limit == "card_hours_per_month":
        return CARD_HOURS_TEXT.get(p.get("ask"), CARD_HOURS_TEXT["request"])() % {
            **base,
            **{k: p[k] for k in ("left", "limit", "month", "need", "renew")},
        }
    # The amounts in the configured currency (billing.prices.money's form; notify reads the
    # setting itself, as billing is its sibling).
    code = settings.CARDPOOL_CURRENCY
    return MONEY_TEXT.get(p.get("ask"), MONEY_TEXT["request"])() % {
        **base,
        **{k: f"{code} {p[k]}" for k in ("left", "limit", "cost")},
        **{k: p[k] for k in ("month", "renew")},
    }


def _concurrent_text(p: Mapping, base: dict) -> str:
    values = {**base, **{k: p[k] for k in ("limit", "used", "left", "count")}}
    if p.get("ask") == "extend" and p.get("kept") is not None:
        text = _(
            "%(who)s may hold at most %(limit)s cards of %(scope)s at once. This extension adds no "
            "cards, but keeps this lease's %(kept)s cards longer while %(used)s others are held "
            "or waiting: %(total)s in all."
        ) % {**values, "kept": p["kept"], "total": p["used"] + p["kept"]}
    elif p.get("ask") == "resize":
        text = (
            _(
                "%(who)s may hold at most %(limit)s cards of %(scope)s at once; %(used)s are held or "
                "waiting, so %(left)s are left and this resize adds %(count)s."
            )
            % values
        )
    else:
        text = (
            _(
                "%(who)s may hold at most %(limit)s cards of %(scope)s at once; %(used)s are held or waiting, "
                "so %(left)s are left and this request needs %(count)s."
            )
            % values
        )
    if p.get("frees"):
        when = parse_datetime(p["frees"])
        local = f"{timezone.localtime(when):%Y-%m-%d %H:%M}" if when else p["frees"]
        text += " " + _("The next ones free up at %(when)s.") % {"when": local}
    return text


# A monthly budget broken, by what was asked (older rows, without ``ask``: a request).
CARD_HOURS_TEXT = {
    "request": lambda: _(
        "%(who)s has %(left)s of %(limit)s card-hours of %(scope)s left in %(month)s; this request "
        "needs %(need)s there. The budget renews on %(renew)s."
    ),
    "extend": lambda: _(
        "%(who)s has %(left)s of %(limit)s card-hours of %(scope)s left in %(month)s; this "
        "extension needs %(need)s there. The budget renews on %(renew)s."
    ),
    "resize": lambda: _(
        "%(who)s has %(left)s of %(limit)s card-hours of %(scope)s left in %(month)s; the cards "
        "this resize adds need %(need)s there. The budget renews on %(renew)s."
    ),
}
MONEY_TEXT = {
    "request": lambda: _(
        "%(who)s has %(left)s of %(limit)s left in %(month)s; this request costs %(cost)s "
        "there. The budget renews on %(renew)s."
    ),
    "extend": lambda: _(
        "%(who)s has %(left)s of %(limit)s left in %(month)s; this extension costs %(cost)s "
        "there. The budget renews on %(renew)s."
    ),
    "resize": lambda: _(
        "%(who)s has %(left)s of %(limit)s left in %(month)s; the cards this resize adds cost "
        "%(cost)s there. The budget renews on %(renew)s."
    ),
}


def duration_text(minutes: int) -> str:
    """A length in minutes as a person says it: whole days, else whole hours, else minutes."""
    if minutes and minutes % (24 * 60) == 0:
        n = minutes // (24 * 60)
        return ngettext("%(n)s day", "%(n)s days", n) % {"n": n}
    if minutes and minutes % 60 == 0:
        n = minutes // 60
        return ngettext("%(n)s hour", "%(n)s hours", n) % {"n": n}
    return ngettext("%(n)s minute", "%(n)s minutes", minutes) % {"n": minutes}


def approvers_text(names: list[str]) -> str:
    """Who a change or request waits for, by name (the team's leads; an operator if none)."""
    if not names:
        return _("an operator")
    return _(" or ").join(names)


def breaches_text(breaches) -> str:
    """Stored breaches (``[{"limit": …, "params": …}]``), one line each, for the reader."""
    lines = []
    for b in breaches or ():
        try:
            lines.append(breach_text(b["limit"], b["params"]))
        except (KeyError, TypeError, ValueError):
            logger.warning("cannot word breach %r", b)
    return "\n".join(lines)


# --- pool health (leasing.health): to operators and to holders on the card -----------------


def _subject(p: Mapping) -> str:
    """What an alert is about, for the reader: a card, a node, a leased card, the pool."""
    if p.get("card"):
        return _("card %(card)s (%(model)s)") % {"card": p["card"], "model": p.get("model", "")}
    if p.get("node"):
        return _("node %(node)s") % {"node": p["node"]}
    return _("the pool")


def _reading(p: Mapping, key: str = "value") -> str:
    """An alert's reading in its rule's unit."""
    value = p.get(key)
    if value is None:
        return "—"
    unit = {
        "card_hot": " °C",
        "power_limit": " W",
        "memory_full": " MiB",
        "failure_rate": " %",
        "card_idle": " %",
    }.get(p.get("rule", ""), "")
    if p.get("rule") == "node_silent":
        return _("silent for %(m)s minutes") % {"m": value}
    return f"{value:g}{unit}" if isinstance(value, int | float) else f"{value}{unit}"


def _rule_label(p: Mapping) -> str:
    rule = p.get("rule", "")
    return str(AlertKind(rule).label) if rule in AlertKind.values else rule


def _alert_opened(p: Mapping) -> tuple[str, str]:
    severity = p.get("severity", "")
    label = str(AlertSeverity(severity).label) if severity in AlertSeverity.values else severity
    title = _("%(severity)s: %(rule)s on %(subject)s") % {
        "severity": label,
        "rule": _rule_label(p),
        "subject": _subject(p),
    }
    body = _("%(rule)s since %(at)s: %(reading)s (threshold %(threshold)s). %(advice)s") % {
        "rule": _rule_label(p),
        "at": _at(p.get("at")),
        "reading": _reading(p),
        "threshold": p.get("threshold_text", "—"),
        "advice": ALERT_ADVICE.get(p.get("rule", ""), lambda: "")(),
    }
    return title, body


def _statement(p: Mapping) -> tuple[str, str]:
    title = _("Statement %(number)s: %(team)s, %(month)s") % {
        "number": p["number"],
        "team": p["team"],
        "month": p["month"],
    }
    body = _(
        "%(team)s's statement for %(month)s is closed and issued as %(number)s: %(hours)s card-hours, %(cost)s %(currency)s. Open it on the reports page to print it or download it as XLSX."
    ) % {
        "team": p["team"],
        "month": p["month"],
        "number": p["number"],
        "hours": p["hours"],
        "cost": p["cost"],
        "currency": p["currency"],
    }
    return title, body


ALERT_ADVICE = {
    "card_hot": lambda: _(
        "The card is kept out of new placements until it cools down; check the cooling, or mark it faulty to move its lease."
    ),
    "power_limit": lambda: _("The card may be throttling; check its power cap and cooling."),
    "memory_full": lambda: _("The job on it may run out of memory."),
    "node_silent": lambda: _(
        "Its cards are marked unknown and take no new lease; check the node, then drain it or mark a card faulty to move its leases."
    ),
    "failure_rate": lambda: _("Look at the failed leases' reasons on the leases page."),
    "card_idle": lambda: _("The holder may have forgotten the lease."),
}


def _alert_resolved(p: Mapping) -> tuple[str, str]:
    title = _("Resolved: %(rule)s on %(subject)s") % {
        "rule": _rule_label(p),
        "subject": _subject(p),
    }
    return title, _("Back to normal at %(at)s.") % {"at": _at(p.get("resolved_at"))}


def _holder_card_health(p: Mapping) -> tuple[str, str]:
    rule = p.get("rule", "")
    title = _("Lease %(id)s: %(rule)s on %(subject)s") % {
        "id": p["id"],
        "rule": _rule_label(p),
        "subject": _subject(p),
    }
    if rule == "card_hot":
        body = _(
            "A card of your lease runs at %(reading)s. Hot cards slow themselves down to protect the hardware, so your job may run slower or unevenly. The operators have been alerted; save a checkpoint if you can."
        ) % {"reading": _reading(p)}
    elif rule == "power_limit":
        body = _(
            "A card of your lease is at its power limit (%(reading)s) and may be throttling: your job may run slower. The operators have been alerted."
        ) % {"reading": _reading(p)}
    else:
        body = _(
            "The node of your lease stopped reporting: its cards' state is unknown and your job may have stopped. The operators have been alerted and decide whether to move your lease or drain the node; save your work if you can."
        )
    return title, body


def _workspace(p: Mapping) -> tuple[str, str]:
    title = _("Workspace %(path)s is %(pct)s%% full") % {"path": p["path"], "pct": p["pct"]}
    body = _(
        "It holds %(used)s GiB of its %(limit)s GiB soft limit. Free some space before the limit is reached."
    ) % {"used": p["used"], "limit": p["limit"]}
    return title, body


LEFT_WHY = {
    "removed": lambda: _("removed from the directory"),
    "disabled": lambda: _("disabled in the directory"),
    "deactivated": lambda: _("deactivated by an operator"),
}


def _member_left(p: Mapping) -> tuple[str, str]:
    why = LEFT_WHY.get(p.get("why", ""), lambda: p.get("why", ""))()
    title = _("%(user)s no longer has access (%(why)s)") % {"user": p["user"], "why": why}
    parts = [
        _(
            "Their API tokens, web sign-ins, sessions and SSH keys were removed, and their "
            "waiting requests cancelled."
        )
    ]
    if p.get("passed"):
        parts.append(
            _("Their running leases now belong to you: %(ids)s.")
            % {"ids": ", ".join(str(i) for i in p["passed"])}
        )
    if p.get("ended"):
        parts.append(
            _("Their running leases were ended: %(ids)s.")
            % {"ids": ", ".join(str(i) for i in p["ended"])}
        )
    return title, " ".join(parts)


def _last_lead_kept(p: Mapping) -> tuple[str, str]:
    title = _("Team %(team)s has no lead in the directory") % {"team": p["team"]}
    body = _(
        "The directory no longer makes %(user)s a lead of %(team)s, but they are its last "
        "lead, so they stay one. Name another lead (in the directory or by hand)."
    ) % {"user": p["user"], "team": p["team"]}
    return title, body


MESSAGES: dict[str, Renderer] = {
    "member_left": _member_left,
    "last_lead_kept": _last_lead_kept,
    "lease": _lease,
    "idle": _idle,
    "budget": _budget,
    "alert_opened": _alert_opened,
    "alert_resolved": _alert_resolved,
    "holder_card_health": _holder_card_health,
    "workspace": _workspace,
    "change": _change,
    "card_swapped": _card_swapped,
    "restarting": _restarting,
    "expiring": _expiring,
    "drain": _drain,
    "preemption": _preemption,
    "preemption_partial": _preemption_partial,
    "stalled": _stalled,
    "estimate_moved": _estimate_moved,
    "ended": _ended,
    "statement": _statement,
}


def holder_zone(user) -> ZoneInfo:
    name = getattr(getattr(user, "profile", None), "timezone", "") or settings.TIME_ZONE
    try:
        return ZoneInfo(name)
    except (KeyError, ValueError):
        return ZoneInfo(settings.TIME_ZONE)


def person_language(user) -> str:
    """The one language rule for whatever is sent to or worded for a person (holder, lead,
    operator, finance; every notice kind, email and webhooks alike): the language they chose
    on their profile, else the language of their last signed-in session, else the site's.
    Never the language of whoever's request happens to send it."""
    profile = getattr(user, "profile", None)
    known = {code for code, _name in settings.LANGUAGES}
    for language in (
        getattr(profile, "language", ""),
        getattr(profile, "session_language", ""),
    ):
        if language in known:
            return language
    return settings.LANGUAGE_CODE


def render(message: str, params: Mapping, *, language: str, zone) -> tuple[str, str]:
    with translation.override(language), timezone.override(zone):
        return MESSAGES[message](params)


def render_params(message: str, params: Mapping) -> tuple[str, str]:
    """A stored message worded in the active language and time zone (the reader's)."""
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
    title, body = render(message, params, language=person_language(user), zone=holder_zone(user))
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
    return notice_to(
        lease.user,
        kind=kind,
        message=message,
        params=params,
        key=key,
        url=f"/leases/{lease.pk}/{anchor}",
        lease=lease,
    )


def notice_to(
    user,
    *,
    kind: str,
    message: str,
    params: Mapping,
    key: str,
    url: str = "",
    lease: Lease | None = None,
) -> Notification:
    """Tell *user* (once per *key*): stored as *message* + *params*, rendered in the user's
    language and time zone for email and webhooks, and again for whoever reads it."""
    clean = {k: (v.isoformat() if isinstance(v, datetime) else v) for k, v in params.items()}
    title, body = render(message, clean, language=person_language(user), zone=holder_zone(user))
    return notify(
        user=user,
        kind=kind,
        title=title,
        body=body,
        lease=lease,
        url=url,
        data={"message": message, "params": clean},
        key=key,
    )
