"""Asking for cards: validate, choose a model by requirements, admit (quotas, member limits),
place at once or queue, and the live preview of what a request would get.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal

from django.conf import settings
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import IntegrityError, transaction
from django.db.models import Count, Max, Sum
from django.utils import timezone
from django.utils.translation import gettext as _

from inventory.filters import CardModelFilterSet
from inventory.models import Card, CardModel
from leasing.advisor.estimator import Task, TaskProfile
from leasing.advisor.recommend import PURPOSE_FOR_TASK, recommend
from leasing.choices import (
    PRIORITY_RANK,
    LeaseStatus,
    Priority,
    Purpose,
)
from leasing.locking import lock_card_models, lock_team
from leasing.models import (
    Allocation,
    Lease,
    LeaseEvent,
)
from leasing.scheduler import fastpath
from leasing.scheduler.availability import card_models_with_counts
from leasing.scheduler.preview import lease_preview
from leasing.scheduler.run import (
    replan,
)
from leasing.teams import quotas
from leasing.transitions import event_record, hand_over, notify_after_commit
from portal.models import Membership, Team
from portal.permissions import is_operator

logger = logging.getLogger(__name__)

# Requests that start within this much of "now" count as "start now": clocks of
# browsers and scripts drift, and a form takes a while to submit.
START_NOW_TOLERANCE = timedelta(seconds=60)


# --- request ---------------------------------------------------------------------------


def _pool_capacity(card_model: CardModel) -> tuple[int, int]:
    """Cards of the model in service (not retired), and the most on any one node."""
    per_node = (
        Card.objects.filter(card_model=card_model)
        .exclude(status=Card.Status.RETIRED)
        .values("node_id")
        .annotate(n=Count("pk"))
    )
    agg = per_node.order_by().aggregate(most=Max("n"), total=Sum("n"))
    return agg["total"] or 0, agg["most"] or 0


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
) -> None:
    """Raise ValidationError (or PermissionDenied) with a message a person can act on.

    ``check_capacity=False`` leaves out whether the pool could ever hold the request (a
    query over the model's cards): ``lease_request`` asks that only when the request is not
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
    elif priority in (Priority.CRITICAL, Priority.HIGH):
        is_lead = membership is not None and membership.role == Membership.Role.LEAD
        if priority == Priority.CRITICAL and not is_operator(user):
            raise PermissionDenied(_("Only operators may ask for critical priority."))
        if priority == Priority.HIGH and not (is_lead or is_operator(user)):
            raise PermissionDenied(_("Only team leads and operators may ask for high priority."))
    if purpose not in Purpose.values:
        errors.setdefault("purpose", []).append(
            _("Unknown purpose; choose one of: %(choices)s.")
            % {"choices": ", ".join(Purpose.values)}
        )
    if count >= 1 and card_model is not None and check_capacity:
        _capacity_errors(errors, card_model=card_model, count=count, same_node=same_node)
    if errors:
        raise ValidationError(errors)


def _capacity_errors(
    errors: dict[str, list[str]], *, card_model: CardModel, count: int, same_node: bool
) -> dict[str, list[str]]:
    """Add why the pool can never hold *count* cards of the model (in this shape) to *errors*."""
    total, most_on_node = _pool_capacity(card_model)
    if total == 0:
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


@dataclass
class Verdict:
    """What admission decided for a request."""

    status: str = LeaseStatus.QUEUED
    borrowed: bool = False
    member_breaches: list = field(default_factory=list)
    overridden: list = field(default_factory=list)


def _admit(
    *,
    team: Team,
    user,
    card_model: CardModel,
    count: int,
    start: datetime,
    duration: timedelta,
    priority: str,
    override_reason: str,
) -> Verdict:
    """Check the team's quota and the member's limits (inside the team lock).

    Team quota broken: refused (unless an operator overrides with a reason, or the team may
    borrow idle cards as preemptible). Member limit broken: waits for the lead's approval.
    """
    breaches = quotas.admission_breaches(
        team=team, user=user, card_model=card_model, count=count, start=start, duration=duration
    )
    team_breaches = [b for b in breaches if b.scope == "team"]
    member_breaches = [b for b in breaches if b.scope == "member"]
    if override_reason:
        return Verdict(overridden=breaches)
    verdict = Verdict()
    if team_breaches:
        only_concurrency = all(b.limit == "max_concurrent_cards" for b in team_breaches)
        if only_concurrency and team.allow_borrowing and priority == Priority.PREEMPTIBLE:
            verdict.borrowed = True
        else:
            raise ValidationError({"count": [b.message for b in team_breaches]})
    if member_breaches:
        verdict.status = LeaseStatus.PENDING_APPROVAL
        verdict.member_breaches = member_breaches
    return verdict


def _replay(*, user, request_key: str, team: Team, card_model, count: int) -> Lease | None:
    """The lease an earlier request with *request_key* made (``replayed`` set), or None.

    The same key for a different request is refused: that is a client's bug, not a retry.
    """
    lease = (
        Lease.objects.select_related("user", "team", "card_model")
        .filter(user=user, request_key=request_key)
        .first()
    )
    if lease is None:
        return None
    if (
        lease.team_id != team.pk
        or lease.count != count
        or (card_model is not None and lease.card_model_id != card_model.pk)
    ):
        raise ValidationError(
            {
                "request_key": [
                    _(
                        "This request was already sent, with other values, and made lease "
                        "%(id)s; to ask for something else, start a new request (reload the "
                        "form, or send a new Idempotency-Key)."
                    )
                    % {"id": lease.pk}
                ]
            }
        )
    lease.replayed = True
    return lease


REQUIREMENT_KEYS = {"vendor", "min_memory_gb", "precision", "interconnect"}


def lease_choose_model(
    *,
    requirements: dict,
    count: int,
    duration: timedelta,
    start_at: datetime | None = None,
    same_node: bool = True,
    priority: str = Priority.NORMAL,
    now: datetime | None = None,
) -> CardModel:
    """The card model meeting *requirements* that would start soonest (then the cheapest).

    *requirements* may hold ``vendor``, ``min_memory_gb``, ``precision`` (the model must list a
    figure for it) and ``interconnect``.
    """
    now = now or timezone.now()
    unknown = set(requirements) - REQUIREMENT_KEYS
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
            f"{key}: {' '.join(str(m) for m in messages)}" for key, messages in meeting.errors.items()
        )
        raise ValidationError({"requirements": [_("Bad requirement: %(error)s.") % {"error": problems}]})
    candidates = list(meeting.qs.filter(total__gte=count))
    best: tuple | None = None
    for model in candidates:
        start = lease_preview(
            card_model=model,
            count=count,
            duration=duration,
            start_at=start_at,
            same_node=same_node,
            priority=priority,
            now=now,
        )
        if start is None:
            continue
        key = (start, model.price_per_hour, -model.memory_gb, model.pk)
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


def lease_request(
    *,
    user,
    team: Team,
    card_model: CardModel | None = None,
    requirements: dict | None = None,
    count: int,
    duration: timedelta,
    start_at: datetime | None = None,
    priority: str = Priority.NORMAL,
    purpose: str = Purpose.DEVELOPMENT,
    same_node: bool = True,
    description: str = "",
    override_reason: str = "",
    request_key: str = "",
    now: datetime | None = None,
) -> Lease:
    """Ask for *count* cards of *card_model* (or of the best model meeting *requirements*)
    for *duration*, now or from *start_at*.

    Admission and placement happen in this transaction: the lease comes back
    ``provisioning`` (cards held, a worker hands them over), ``scheduled`` (an advance
    reservation, cards booked), or ``queued`` with an ``estimated_start``.

    With a *request_key* (an API client's Idempotency-Key, the request form's own), the same
    request sent again — a retry after a timeout or a 503, a double click — returns the lease
    the first one made, with ``replayed = True``, instead of booking twice.
    """
    now = now or timezone.now()
    if request_key:
        previous = _replay(
            user=user, request_key=request_key, team=team, card_model=card_model, count=count
        )
        if previous is not None:
            return previous
    start = start_at if start_at is not None and start_at > now else now
    requirements = {
        k: float(v) if isinstance(v, Decimal) else v
        for k, v in (requirements or {}).items()
        if v not in (None, "")
    }
    if card_model is None:
        if not requirements:
            raise ValidationError(
                {"card_model": [_("Name a card model, or give requirements a model must meet.")]}
            )
        # Who may ask, and for what shape, before looking for a model.
        lease_validate_request(
            user=user,
            team=team,
            card_model=None,
            count=count,
            duration=duration,
            start_at=start_at or now,
            priority=priority,
            purpose=purpose,
            same_node=same_node,
            now=now,
        )
        card_model = lease_choose_model(
            requirements=requirements,
            count=count,
            duration=duration,
            start_at=start_at,
            same_node=same_node,
            priority=priority,
            now=now,
        )
    lease_validate_request(
        user=user,
        team=team,
        card_model=card_model,
        count=count,
        duration=duration,
        start_at=start_at or now,
        priority=priority,
        purpose=purpose,
        same_node=same_node,
        now=now,
        check_capacity=False,  # below, unless the request is placed at once
    )
    if override_reason and not is_operator(user):
        raise PermissionDenied(_("Only operators may override quotas."))
    with transaction.atomic():
        # The team lock serializes quota checks; a team without rules for this request has
        # nothing to check, so its members' requests do not queue behind each other.
        has_rules = quotas.rules_apply(team=team, user=user, card_model=card_model)
        if has_rules:
            lock_team(team.pk)
        lock_card_models([card_model.pk])
        # Nobody waits for the model and the request is for now: place it in SQL, written as
        # `provisioning` with its cards at once (scheduler/fastpath.py); else the full pass.
        placed = None
        if start == now and fastpath.queue_is_empty(card_model.pk):
            placed = fastpath.place_now(card_model.pk, count=count, start=now, end=now + duration)
        if not placed and (
            errors := _capacity_errors({}, card_model=card_model, count=count, same_node=same_node)
        ):
            raise ValidationError(errors)
        verdict = (
            _admit(
                team=team,
                user=user,
                card_model=card_model,
                count=count,
                start=start,
                duration=duration,
                priority=priority,
                override_reason=override_reason,
            )
            if has_rules
            else Verdict()
        )
        if verdict.status != LeaseStatus.QUEUED:
            placed = None  # waits for the lead's approval first
        new = Lease(
            user=user,
            team=team,
            card_model=card_model,
            requirements=requirements,
            count=count,
            duration=duration,
            start_at=start,
            end_at=start + duration,
            status=LeaseStatus.PROVISIONING if placed else verdict.status,
            status_changed_at=now,
            priority=priority,
            priority_rank=PRIORITY_RANK[priority],
            purpose=purpose,
            same_node=same_node,
            description=description,
            submitted_at=now,
            borrowed=verdict.borrowed,
            approval_reason="\n".join(b.message for b in verdict.member_breaches),
            request_key=request_key,
        )
        if request_key:
            # Two copies of one request at the same moment: the second waits on the unique
            # key until the first commits, then gets that lease (nothing of its own written).
            try:
                with transaction.atomic():
                    new.save(force_insert=True)
            except IntegrityError:
                previous = _replay(
                    user=user,
                    request_key=request_key,
                    team=team,
                    card_model=card_model,
                    count=count,
                )
                if previous is None:
                    raise
                return previous
        else:
            new.save(force_insert=True)
        lease = new
        events = [
            LeaseEvent(
                lease=lease,
                kind="requested",
                at=now,
                actor=user,
                data={"count": count, "minutes": duration // timedelta(minutes=1)},
            )
        ]
        if override_reason:
            events.append(
                LeaseEvent(
                    lease=lease,
                    kind="quota_override",
                    at=now,
                    actor=user,
                    message=override_reason,
                    data={"breaches": [b.message for b in verdict.overridden]},
                )
            )
        if placed:
            # The same record the queue pass's transition leaves (queued → provisioning).
            events.append(
                LeaseEvent(
                    lease=lease,
                    kind="placed",
                    at=now,
                    from_status=LeaseStatus.QUEUED,
                    to_status=LeaseStatus.PROVISIONING,
                )
            )
        LeaseEvent.objects.bulk_create(events)
        if placed:
            Allocation.objects.bulk_create(
                Allocation(card_id=c, lease=lease, start_at=now, end_at=lease.end_at)
                for c in placed
            )
            hand_over([lease.pk])
        elif verdict.status == LeaseStatus.PENDING_APPROVAL:
            event_record(lease.pk, kind="needs_approval", at=now, message=lease.approval_reason)
            notify_after_commit(lease.pk, "approval_requested")
        else:
            replan(card_model.pk, now=now)
            if (
                verdict.borrowed
                and Lease.objects.filter(pk=lease.pk, status=LeaseStatus.QUEUED).exists()
            ):
                # Borrowing is for idle cards only: a borrowed lease never waits in the queue.
                raise ValidationError(
                    {
                        "priority": [
                            _(
                                "Your team's concurrent quota is used up and no idle %(model)s cards are free now to "
                                "borrow; try again later or ask for fewer cards."
                            )
                            % {"model": card_model.name}
                        ]
                    }
                )
        if has_rules and verdict.status != LeaseStatus.PENDING_APPROVAL:
            transaction.on_commit(
                lambda: quotas.budget_alerts(team=team, card_model_id=card_model.pk, now=now)
            )
    if placed:
        return lease  # written as it stands: nothing to read back
    lease.refresh_from_db()
    if lease.status == LeaseStatus.QUEUED:
        notify_after_commit(lease.pk, "lease_queued")
        event_record(
            lease.pk,
            kind="queued",
            at=now,
            data={"estimated_start": lease.estimated_start and lease.estimated_start.isoformat()},
        )
    return lease


# --- by task ---------------------------------------------------------------------------


def lease_request_by_profile(
    *,
    user,
    team: Team,
    profile: TaskProfile,
    duration: timedelta,
    start_at: datetime | None = None,
    priority: str = Priority.NORMAL,
    purpose: str | None = None,
    description: str = "",
    now: datetime | None = None,
) -> Lease:
    """Ask for cards by task: the top-ranked option's model and count, through lease_request.

    The lease is placed or queued like any other; its description names the task when the
    user gave none. Raises ValidationError (on ``profile``) when no option fits.
    """
    now = now or timezone.now()
    purpose = purpose or PURPOSE_FOR_TASK[Task(profile.task)]
    # Who may ask, and for how long, before looking for cards (as lease_request does).
    lease_validate_request(
        user=user,
        team=team,
        card_model=None,
        count=1,
        duration=duration,
        start_at=start_at or now,
        priority=priority,
        purpose=purpose,
        same_node=True,
        now=now,
    )
    rec = recommend(
        profile=profile, duration=duration, start_at=start_at, priority=priority, now=now, limit=1
    )
    if not rec.options:
        raise ValidationError({"profile": [rec.message]})
    top = rec.options[0]
    return lease_request(
        user=user,
        team=team,
        card_model=top.card_model,
        count=top.count,
        duration=duration,
        start_at=start_at,
        priority=priority,
        purpose=purpose,
        same_node=True,
        description=description or profile.summary()[:200],
        now=now,
    )
