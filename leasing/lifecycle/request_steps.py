"""The steps a request and its live preview share, so they cannot disagree.

``lifecycle.requests.lease_request`` writes; ``lease_request_check`` (the request form's
preview) runs the same steps in the same order — validation, the model chosen by
requirements, capacity, admission (quotas and member limits), the planner's start — and
writes nothing. What the preview says (refused and why, waits for the lead, free now, an
estimated start) is what the submit does.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import cached_property

from django.core.exceptions import ValidationError
from django.utils import timezone
from django.utils.translation import gettext as _

from inventory.filters import CardModelFilterSet
from inventory.models import CardModel
from inventory.requirements import BY_NAME, nodes_meeting, requirement_errors, stored
from leasing.billing import prices
from leasing.choices import Priority, Purpose, StartPolicy
from leasing.lifecycle.validation import capacity_errors, lease_validate_request
from leasing.models import Environment
from leasing.scheduler.availability import card_models_with_counts
from leasing.scheduler.eta import told_start, virtual_submit
from leasing.scheduler.offpeak import offpeak_start_for
from leasing.scheduler.picture import model_picture
from leasing.scheduler.preview import lease_preview
from leasing.scheduler.snapshot import team_work_ahead
from leasing.teams import quotas
from leasing.teams.admission import Ask, Verdict, admit
from leasing.workbench.environments import environment_check
from portal.models import Team

# What a request by requirements may name: the one declaration (inventory.requirements).
REQUIREMENT_KEYS = set(BY_NAME)


def model_meets(card_model: CardModel, requirements: dict) -> None:
    """Raise ValidationError unless *card_model* meets the model requirements (a request
    that names a model and a stack never gets cards of another stack)."""
    for key, value in requirements.items():
        req = BY_NAME.get(key)
        if req is None or req.model_q is None:
            continue
        if not CardModel.objects.filter(req.model_q(value), pk=card_model.pk).exists():
            raise ValidationError(
                {
                    key: [
                        _(
                            "%(model)s does not meet the requirement “%(label)s: %(value)s”; "
                            "choose another card model or drop the requirement."
                        )
                        % {"model": card_model.name, "label": req.label, "value": value}
                    ]
                }
            )


def lease_choose_model(
    *,
    requirements: dict,
    count: int,
    duration: timedelta,
    start_at: datetime | None = None,
    same_node: bool = True,
    priority: str = Priority.NORMAL,
    purpose: str = "",
    now: datetime | None = None,
    team_id: int | None = None,
) -> CardModel:
    """The card model meeting *requirements* that would start soonest (then the cheapest for
    *team_id*: the price in force that its bill would use, ``billing.prices``).

    *requirements* holds keys of ``inventory.requirements.REQUIREMENTS``: the model ones
    choose the models, the node ones (region, network, stack version) the cards.
    """
    now = now or timezone.now()
    unknown = set(requirements) - REQUIREMENT_KEYS
    if not unknown and (errors := requirement_errors(requirements)):
        raise ValidationError(errors)
    if unknown:
        raise ValidationError(
            {
                "requirements": [
                    _("Unknown requirement(s): %(keys)s; use %(known)s.")
                    % {
                        "keys": ", ".join(sorted(unknown)),
                        "known": ", ".join(sorted(REQUIREMENT_KEYS)),
                    }
                ]
            }
        )
    meeting = CardModelFilterSet(
        {key: value for key, value in requirements.items() if value not in (None, "")},
        queryset=card_models_with_counts(now),
    )
    if not meeting.is_valid():
        problems = "; ".join(
            f"{key}: {' '.join(str(m).rstrip('.') for m in messages)}"
            for key, messages in meeting.errors.items()
        )
        raise ValidationError(
            {"requirements": [_("Bad requirement: %(error)s.") % {"error": problems}]}
        )
    candidates = list(meeting.qs.filter(total__gte=count))
    nodes = nodes_meeting(requirements)
    best: tuple | None = None
    for model in candidates:
        start = lease_preview(
            card_model=model,
            count=count,
            duration=duration,
            start_at=start_at,
            same_node=same_node,
            priority=priority,
            purpose=purpose,
            now=now,
            nodes=nodes,
            team_id=team_id,
        )
        if start is None:
            continue
        if best is not None and start > best[0][0]:
            continue
        price = prices.prices_now([model], team_id=team_id, at=start, priority=priority)
        key = (start, price[model.pk], -model.memory_gb, model.pk)
        if best is None or key < best[0]:
            best = (key, model)
    if best is None:
        raise ValidationError(
            {
                "requirements": [
                    _(
                        "No card model in the pool meets these requirements for %(count)s card(s); loosen them or ask for fewer."
                    )
                    % {"count": count}
                ]
            }
        )
    return best[1]


def clean_requirements(requirements: dict | None) -> dict:
    """*requirements* as a lease keeps them (``inventory.requirements.stored``); what is wrong
    with them taken together raises ValidationError."""
    cleaned = stored(requirements or {})
    if problems := requirement_errors(cleaned):
        raise ValidationError(problems)
    return cleaned


def validated_model(asked: Asked, *, requirements: dict, start_at: datetime | None) -> CardModel:
    """Who may ask and for what shape, then the model asked for (or the best one meeting the
    requirements); ValidationError or PermissionDenied with what to change."""
    now, card_model = asked.now, asked.card_model
    shape = {
        "user": asked.user,
        "team": asked.team,
        "count": asked.count,
        "duration": asked.duration,
        "start_at": start_at or now,
        "priority": asked.priority,
        "purpose": asked.purpose,
        "same_node": asked.same_node,
        "now": now,
    }
    if card_model is not None and requirements:
        model_meets(card_model, requirements)
    if card_model is None:
        if not requirements:
            raise ValidationError(
                {"card_model": [_("Name a card model, or give requirements a model must meet.")]}
            )
        # Who may ask, and for what shape, before looking for a model.
        lease_validate_request(card_model=None, **shape)
        card_model = lease_choose_model(
            requirements=requirements,
            count=asked.count,
            duration=asked.duration,
            start_at=start_at,
            same_node=asked.same_node,
            priority=asked.priority,
            purpose=asked.purpose,
            now=now,
            team_id=asked.team.pk,
        )
    # Capacity is asked below, unless the request is placed at once.
    lease_validate_request(card_model=card_model, check_capacity=False, **shape)
    return card_model


@dataclass(frozen=True)
class Asked:
    """A request as it was asked for, before any check: what ``lease_request`` and its
    preview (``lease_request_check``) take, passed between their steps as one value."""

    user: object
    team: Team
    count: int
    duration: timedelta
    now: datetime
    card_model: CardModel | None = None
    requirements: dict | None = None
    start_at: datetime | None = None
    priority: str = Priority.NORMAL
    purpose: str = Purpose.DEVELOPMENT
    same_node: bool = True
    start_policy: str = StartPolicy.AS_ASKED
    environment: Environment | None = None


@dataclass
class Shape:
    """What a request asks for once checked: when it starts (moved by an off-peak policy),
    its requirements as kept, and the card model (asked for, or chosen by requirements)."""

    start: datetime
    start_at: datetime | None
    requirements: dict
    card_model: CardModel

    @cached_property
    def nodes(self) -> frozenset[int] | None:
        """The nodes its requirements allow (None: any)."""
        return nodes_meeting(self.requirements)


def request_shape(asked: Asked) -> Shape:
    """The first steps of a request and of its preview, in one place: the start (an off-peak
    *start_policy* moves it), the requirements, who may ask, the model, and whether the
    chosen environment fits it."""
    now, start_at = asked.now, asked.start_at
    start = start_at if start_at is not None and start_at > now else now
    if asked.start_policy:
        start = offpeak_start_for(asked.start_policy, start=start, duration=asked.duration)
        start_at = start
    cleaned = clean_requirements(asked.requirements)
    model = validated_model(asked, requirements=cleaned, start_at=start_at)
    environment_check(asked.environment, model)
    return Shape(start=start, start_at=start_at, requirements=cleaned, card_model=model)


def capacity_check(asked: Asked, shape: Shape) -> None:
    """Whether the pool has cards enough of the model (on nodes meeting the requirements)."""
    if errors := capacity_errors(
        {},
        card_model=shape.card_model,
        count=asked.count,
        same_node=asked.same_node,
        nodes=shape.nodes,
        requirements=shape.requirements,
    ):
        raise ValidationError(errors)


def admission_of(
    asked: Asked, shape: Shape, *, has_rules: bool, override_reason: str = ""
) -> Verdict:
    """``admission`` for a request's shape."""
    return admission(
        user=asked.user,
        team=asked.team,
        card_model=shape.card_model,
        count=asked.count,
        start=shape.start,
        duration=asked.duration,
        priority=asked.priority,
        has_rules=has_rules,
        override_reason=override_reason,
    )


def admission(
    *,
    user,
    team: Team,
    card_model: CardModel,
    count: int,
    start: datetime,
    duration: timedelta,
    priority: str,
    has_rules: bool,
    override_reason: str = "",
) -> Verdict:
    """The team's quotas and the member's limits for a new request (refused: ValidationError)."""
    if not has_rules:
        return Verdict()
    ask = Ask(
        team=team,
        user=user,
        card_model=card_model,
        count=count,
        start=start,
        end=start + duration,
        length=duration,
        priority=priority,
    )
    return admit(ask, override_reason=override_reason)


def borrow_refusal(card_model: CardModel) -> dict:
    return {
        "priority": [
            _(
                "Your team's concurrent quota is used up and no idle %(model)s cards are free now to "
                "borrow; try again later or ask for fewer cards."
            )
            % {"model": card_model.name}
        ]
    }


# Within this of now the preview says "free now" (the request would be placed at once).
STARTS_NOW = timedelta(seconds=5)


@dataclass
class RequestOutlook:
    """What a request would get if submitted now: its model, admission's verdict (waits for
    the lead, borrowed) and when it would start (None: the pool as it is cannot place it)."""

    card_model: CardModel
    verdict: Verdict
    start: datetime | None
    now: datetime
    # A reservation that cannot start when asked: the start asked, and how many cards each
    # kind (``scheduler.picture.KINDS``: held, reserved, planned for a waiting request,
    # maintenance, unhealthy) keeps busy then, read from the model's one picture.
    asked: datetime | None = None
    in_the_way: dict[str, int] | None = None
    # The start it would be told while it waits (``scheduler.eta``: the plan's start plus
    # room for smaller work that may pass it), as the lease page will say it; *start* is
    # the plan's (where the picture's next free stretch begins).
    told: datetime | None = None

    @property
    def outcome(self) -> str:
        """``approval`` (waits for the lead), ``now``, ``later`` or ``none``."""
        if self.verdict.needs_approval:
            return "approval"
        if self.start is None:
            return "none"
        return "now" if self.start <= self.now + STARTS_NOW else "later"


def lease_request_check(*, now: datetime | None = None, **asked) -> RequestOutlook:
    """What ``lease_request`` would decide for these values (``Asked``'s fields) now, nothing
    written: the same validation, model choice, capacity check and admission, raising what
    it would raise."""
    now = now or timezone.now()
    asked = Asked(now=now, **asked)
    shape = request_shape(asked)
    capacity_check(asked, shape)
    card_model = shape.card_model
    verdict = admission_of(
        asked,
        shape,
        has_rules=quotas.rules_apply(team=asked.team, user=asked.user, card_model=card_model),
    )
    when = lease_preview(
        card_model=card_model,
        count=asked.count,
        duration=asked.duration,
        start_at=shape.start_at,
        same_node=asked.same_node,
        priority=asked.priority,
        purpose=asked.purpose,
        start_policy=asked.start_policy,
        now=now,
        nodes=shape.nodes,
        team_id=asked.team.pk if asked.team else None,
    )
    if verdict.borrowed and (when is None or when > now + STARTS_NOW):
        raise ValidationError(borrow_refusal(card_model))  # borrowing never waits
    start_at, duration = shape.start_at, asked.duration
    outlook = RequestOutlook(card_model=card_model, verdict=verdict, start=when, now=now)
    outlook.told = when
    if when is not None and when > max(start_at or now, now):  # it would wait in the queue
        virtual = virtual_submit(now, duration, asked.count)
        team_id = asked.team.pk if asked.team else None
        ahead = team_work_ahead(team_id)
        outlook.told = told_start(when, virtual_at=virtual, now=now, ahead=ahead)
    if start_at is not None and start_at > now + STARTS_NOW and (when is None or when > start_at):
        picture = model_picture(card_model.pk, start=start_at, end=start_at + duration, now=now)
        outlook.asked = start_at
        outlook.in_the_way = picture.kinds_at(start_at, start_at + duration)
    return outlook
