"""Whether a request can be asked at all: who may ask, for how long, how many, and whether
the pool could ever hold it. Every path that asks for cards checks this first."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.core.exceptions import PermissionDenied, ValidationError
from django.db.models import Count, Max, Sum
from django.utils.translation import gettext as _

from inventory.models import Card, CardModel
from inventory.requirements import NODE_KEYS, nodes_meeting
from leasing import statements
from leasing.choices import (
    Priority,
    Purpose,
)
from portal.input import validate_lease_minutes
from portal.models import Membership, Team
from portal.permissions import is_operator, lead_memberships

logger = logging.getLogger(__name__)

# Requests that start within this much of "now" count as "start now": clocks of
# browsers and scripts drift, and a form takes a while to submit.
START_NOW_TOLERANCE = timedelta(seconds=60)

# A length given with its unit (the request form's duration, an extension).
UNITS = {"minutes": 1, "hours": 60, "days": 24 * 60}


def pool_capacity(card_model: CardModel, nodes: frozenset[int] | None = None) -> tuple[int, int]:
    """Cards of the model in service (not retired), and the most on any one node (of
    *nodes* only, when given)."""
    per_node = _in_service(card_model, nodes).values("node_id").annotate(n=Count("pk"))
    agg = per_node.order_by().aggregate(most=Max("n"), total=Sum("n"))
    return agg["total"] or 0, agg["most"] or 0


def _any_card(model: int):
    return Card.objects.in_service().filter(card_model_id=model).values_list("pk")[:1]


def _in_service(card_model: CardModel, nodes: frozenset[int] | None):
    cards = Card.objects.in_service().filter(card_model=card_model)
    return cards if nodes is None else cards.filter(node_id__in=sorted(nodes))


def priorities_for(user, *, membership: Membership | None = None, team: Team | None = None):
    """The priority classes *user* may ask for, for *team* (its membership if known; with
    neither, in any of their teams): critical for operators, high for leads too. The request
    form offers only these; ``lease_validate_request`` refuses the others."""
    if is_operator(user):
        return list(Priority.values)
    if membership is not None:
        is_lead = membership.role == Membership.Role.LEAD
    else:
        memberships = lead_memberships(user)
        is_lead = (memberships.filter(team=team) if team else memberships).exists()
    return [
        p for p in Priority.values if p != Priority.CRITICAL and (is_lead or p != Priority.HIGH)
    ]


def lease_validate_request(
    *,
    user,
    team: Team,
    card_model: CardModel | None,
    count: int,
    duration: timedelta,
    start_at: datetime,
    priority: str,
    purpose: str,
    same_node: bool,
    now: datetime,
    check_capacity: bool = True,
    requirements: dict | None = None,
) -> None:
    """Raise ValidationError (or PermissionDenied) with a message a person can act on.

    ``check_capacity=False`` leaves out whether the pool could ever hold the request (a
    query over the model's cards, on the nodes its *requirements* allow): ``lease_request`` asks that only when the request is not
    placed at once, since cards that were just found free answer it already.
    """
    membership = Membership.objects.filter(user=user, team=team).first()
    if membership is None and not is_operator(user):
        raise PermissionDenied(
            _("You are not a member of team “%(team)s”; ask its lead to add you.")
            % {"team": team.slug}
        )
    errors: dict[str, list[str]] = {}
    if count < 1:
        errors.setdefault("count", []).append(_("Ask for at least one card."))
    if duration <= timedelta(0):
        errors.setdefault("duration_minutes", []).append(
            _("The duration must be longer than zero.")
        )
    max_minutes = settings.CARDPOOL["MAX_LEASE_MINUTES"]
    if duration > timedelta(minutes=max_minutes):
        errors.setdefault("duration_minutes", []).append(
            _("The longest lease is %(hours)s hours; ask for less and extend later.")
            % {"hours": max_minutes // 60}
        )
    if start_at < now - START_NOW_TOLERANCE:
        errors.setdefault("start_at", []).append(
            _("The start time is in the past; leave it empty to start now.")
        )
    if start_at > now + timedelta(days=settings.CARDPOOL["MAX_ADVANCE_DAYS"]):
        errors.setdefault("start_at", []).append(
            _("Reservations can start at most %(days)s days ahead.")
            % {"days": settings.CARDPOOL["MAX_ADVANCE_DAYS"]}
        )
    if priority not in Priority.values:
        errors.setdefault("priority", []).append(
            _("Unknown priority; choose one of: %(choices)s.")
            % {"choices": ", ".join(Priority.values)}
        )
    elif priority not in priorities_for(user, membership=membership):
        if priority == Priority.CRITICAL:
            raise PermissionDenied(_("Only operators may ask for critical priority."))
        raise PermissionDenied(_("Only team leads and operators may ask for high priority."))
    if purpose not in Purpose.values:
        errors.setdefault("purpose", []).append(
            _("Unknown purpose; choose one of: %(choices)s.")
            % {"choices": ", ".join(Purpose.values)}
        )
    if count >= 1 and card_model is not None and check_capacity:
        capacity_errors(
            errors,
            card_model=card_model,
            count=count,
            same_node=same_node,
            nodes=nodes_meeting(requirements),
            requirements=requirements,
        )
    if errors:
        raise ValidationError(errors)


def capacity_errors(
    errors: dict[str, list[str]],
    *,
    card_model: CardModel,
    count: int,
    same_node: bool,
    nodes: frozenset[int] | None = None,
    requirements: dict | None = None,
) -> dict[str, list[str]]:
    """Add why the pool can never hold *count* cards of the model (in this shape) to *errors*.

    *nodes*: the nodes the request's *requirements* allow (region, network, stack version).
    """
    if count == 1 and nodes is None:
        if statements.rows("validation.any_card", _any_card, model=card_model.pk):
            return errors  # one card in service is enough (one statement, built once)
    total, most_on_node = pool_capacity(card_model, nodes)
    if nodes is not None and total < count:
        wanted = ", ".join(
            f"{k}={v}" for k, v in sorted((requirements or {}).items()) if k in NODE_KEYS
        )
        errors.setdefault("requirements", []).append(
            _(
                "Only %(total)s %(model)s cards are on nodes meeting %(wanted)s; ask for "
                "%(total)s or fewer, or loosen the requirements."
            )
            % {"total": total, "model": card_model.name, "wanted": wanted}
            if total
            else _(
                "No %(model)s cards are on nodes meeting %(wanted)s; choose another region, "
                "network or stack version, or another card model."
            )
            % {"model": card_model.name, "wanted": wanted}
        )
    elif total == 0:
        errors.setdefault("card_model", []).append(
            _("The pool has no %(model)s cards yet; choose another card model.")
            % {"model": card_model.name}
        )
    elif count > total:
        errors.setdefault("count", []).append(
            _("The pool has only %(total)s %(model)s cards; ask for %(total)s or fewer.")
            % {"total": total, "model": card_model.name}
        )
    elif same_node and count > most_on_node:
        errors.setdefault("count", []).append(
            _(
                "No node has %(count)s %(model)s cards (at most %(most)s on one node); ask for fewer "
                "or allow the cards to span nodes."
            )
            % {"count": count, "model": card_model.name, "most": most_on_node}
        )
    return errors


# --- checkpoints and off-peak starts --------------------------------------------------------

# Signals a job may ask for when preempted: the ones jobs trap to save their state.
CHECKPOINT_SIGNALS = ("USR1", "USR2", "TERM", "INT", "HUP", "QUIT", "CONT")


@dataclass(frozen=True)
class Checkpoint:
    """How a preemptible job saves its state when preempted: a *signal* (a name such as
    ``USR1``) and/or a *command* run on its node, the *seconds* saving takes (the grace is at
    least this long), and whether a new lease resumes it (*requeue*)."""

    signal: str = ""
    command: str = ""
    seconds: int | None = None
    requeue: bool = False


def checkpoint_validate(checkpoint: Checkpoint | None) -> Checkpoint | None:
    """The checkpoint as stored (signal upper case, no ``SIG`` prefix), or a ValidationError
    naming the field. None or an empty one: nothing declared."""
    if checkpoint is None or checkpoint == Checkpoint():
        return None
    signal = checkpoint.signal.strip().upper().removeprefix("SIG")
    command = checkpoint.command.strip()
    errors: dict[str, list[str]] = {}
    if signal and signal not in CHECKPOINT_SIGNALS:
        errors["checkpoint_signal"] = [
            _("Unknown signal %(signal)s; use one of %(known)s.")
            % {"signal": checkpoint.signal, "known": ", ".join(CHECKPOINT_SIGNALS)}
        ]
    if "\x00" in command or len(command) > 500:
        errors["checkpoint_command"] = [_("The command must be at most 500 characters.")]
    most = settings.CARDPOOL["CHECKPOINT_MAX_SECONDS"]
    if checkpoint.seconds is not None and not 0 < checkpoint.seconds <= most:
        errors["checkpoint_seconds"] = [
            _("Checkpoint time must be between 1 and %(most)s seconds.") % {"most": most}
        ]
    if (checkpoint.seconds or checkpoint.requeue) and not (signal or command):
        errors["checkpoint_signal"] = [_("Say how the job saves its state: a signal or a command.")]
    if errors:
        raise ValidationError(errors)
    return Checkpoint(signal, command, checkpoint.seconds, checkpoint.requeue)


def extension_minutes(
    *, minutes: int | None, duration: int | None, unit: str | None
) -> tuple[int | None, dict]:
    """An extension's length in minutes from ``minutes``, or ``duration`` in ``unit``
    (minutes, hours or days); with the errors, by field, of what was given wrong. The page's
    extend box and the API's read it the same way."""
    if minutes is not None and duration is not None:
        return None, {"duration": [_("Give minutes, or a duration with its unit, not both.")]}
    if minutes is None and duration is None:
        return None, {"duration": [_("Say how long to extend by (minutes, hours or days).")]}
    if duration is not None:
        if unit not in UNITS:
            return None, {"unit": [_("Choose minutes, hours or days.")]}
        minutes = duration * UNITS[unit]
    try:
        validate_lease_minutes(minutes)  # no extension is longer than the longest lease
    except ValidationError as exc:
        return None, {"duration" if duration is not None else "minutes": exc.messages}
    return minutes, {}
