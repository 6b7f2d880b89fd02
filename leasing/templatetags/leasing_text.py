"""Template filters that word stored parameters for the reader (the active language and zone)."""

from django import template
from django.utils import timezone
from django.utils.dateparse import parse_datetime
from django.utils.translation import gettext as _

from leasing.notify.messages import approvers_text, breaches_text, duration_text, estimate_why
from leasing.teams.approvals import approvers as team_approvers

register = template.Library()


@register.filter
def approvers(team) -> str:
    """Who a change of *team* waits for, by name (its leads)."""
    return approvers_text(team_approvers(team))


@register.filter
def minutes_text(minutes) -> str:
    """A length in minutes as a person says it (2 hours, 3 days, 45 minutes)."""
    return duration_text(int(minutes or 0))


@register.filter
def breaches(stored, fallback: str = "") -> str:
    """Limits broken, stored as parameters (``Breach.stored``), one per line; *fallback*: the
    text kept before they were (older rows)."""
    return breaches_text(stored) or fallback


@register.filter
def event_note(event) -> str:
    """A timeline line's note for the reader: the limits it broke (stored as parameters, so a
    lead reading in English sees English), else the text a person wrote (a lead's note, an
    operator's reason)."""
    data = event.data or {}
    return "\n".join(
        t
        for t in (_facts(event.kind, data), event.message, breaches_text(data.get("breaches")))
        if t
    )


def _local(value: str) -> str:
    moment = parse_datetime(value)
    return f"{timezone.localtime(moment):%m-%d %H:%M}" if moment else value


def _facts(kind: str, data: dict) -> str:
    """What a resize or a swap changed, from its parameters."""
    try:
        if kind == "resized" and "to" in data:
            text = _("%(from)s → %(to)s cards") % {"from": data["from"], "to": data["to"]}
            if data.get("reason") == "preempted":
                text += " · " + _("taken back for a higher-priority request")
            return text
        if kind == "ended" and data.get("by_hand"):
            return _("Released by hand by an operator.")
        if kind == "checkpoint_failed" and data.get("why") == "no_ack":
            return _("The node's agent did not confirm delivery within %(s)s s.") % {
                "s": data["seconds"]
            }
        if kind == "estimate_moved" and "to" in data:
            return _("estimated start %(from)s → %(to)s, because %(why)s") % {
                "from": _local(data["from"]),
                "to": _local(data["to"]),
                "why": estimate_why(data.get("why", ""), data),
            }
        if kind == "passed_to_lead" and "to" in data:
            return _("%(from)s → %(to)s") % {"from": data["from"], "to": data["to"]}
        if kind == "card_replaced" and "to_card" in data:
            return _("card %(old)s → %(new)s") % {"old": data["from_card"], "new": data["to_card"]}
    except (KeyError, TypeError):
        pass
    return ""
