"""Asking for cards: validate, choose a model by requirements, admit (quotas, member limits),
place at once or queue, and the live preview of what a request would get.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from decimal import Decimal

from django.core.exceptions import PermissionDenied, ValidationError
from django.db import IntegrityError, transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from inventory.filters import CardModelFilterSet
from inventory.models import CardModel
from leasing.advisor.estimator import Task, TaskProfile
from leasing.advisor.recommend import PURPOSE_FOR_TASK, recommend
from leasing.choices import (
    LeaseStatus,
    Priority,
    Purpose,
    queue_rank,
)
from leasing.lifecycle.validation import (
    capacity_errors,
    lease_validate_request,
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
from leasing.teams.admission import Ask, Verdict, admit
from leasing.transitions import event_record, hand_over, notify_after_commit
from portal.models import Team
from portal.permissions import is_operator

logger = logging.getLogger(__name__)

# --- request ---------------------------------------------------------------------------


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


# What a request by requirements may name: the catalogue's filters, the same FilterSet.
REQUIREMENT_KEYS = set(CardModelFilterSet.base_filters)


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
            f"{key}: {' '.join(str(m).rstrip('.') for m in messages)}"
            for key, messages in meeting.errors.items()
        )
        raise ValidationError(
            {"requirements": [_("Bad requirement: %(error)s.") % {"error": problems}]}
        )
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
            errors := capacity_errors({}, card_model=card_model, count=count, same_node=same_node)
        ):
            raise ValidationError(errors)
        verdict = (
            admit(
                Ask(
                    team=team,
                    user=user,
                    card_model=card_model,
                    count=count,
                    start=start,
                    end=start + duration,
                    length=duration,
                    priority=priority,
                ),
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
            priority_rank=queue_rank(priority, purpose),
            purpose=purpose,
            same_node=same_node,
            description=description,
            submitted_at=now,
            borrowed=verdict.borrowed,
            approval_reason=verdict.reason,
            approval_breaches=[b.stored() for b in verdict.member_breaches],
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
            replan(card_model.pk, now=now, joined=lease.pk)
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
        profile=profile,
        duration=duration,
        start_at=start_at,
        priority=priority,
        now=now,
        limit=1,
        team_id=team.pk,
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
