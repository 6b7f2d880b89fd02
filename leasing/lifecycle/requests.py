"""Asking for cards: validate, choose a model by requirements, admit (quotas, member limits),
place at once or queue, and the live preview of what a request would get.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.core.exceptions import PermissionDenied, ValidationError
from django.db import IntegrityError, transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from inventory.models import CardModel
from leasing.advisor.estimator import Task, TaskProfile
from leasing.advisor.recommend import PURPOSE_FOR_TASK, recommend
from leasing.choices import (
    LeaseStatus,
    Priority,
    Purpose,
    StartPolicy,
    queue_rank,
)
from leasing.lifecycle import handover
from leasing.lifecycle.request_steps import (
    Asked,
    Shape,
    admission_of,
    borrow_refusal,
    capacity_check,
    request_shape,
)
from leasing.lifecycle.validation import (
    Checkpoint,
    checkpoint_validate,
    lease_validate_request,
)
from leasing.locking import lock_card_models, lock_team
from leasing.models import (
    Allocation,
    Environment,
    Lease,
    LeaseEvent,
)
from leasing.scheduler import fastpath, plancache, shares
from leasing.scheduler.eta import lease_told_basis, lease_told_start
from leasing.scheduler.run import (
    replan,
)
from leasing.scheduler.snapshot import team_work_ahead
from leasing.teams import quotas
from leasing.teams.admission import Verdict
from leasing.transitions import event_record, notify_after_commit
from portal.models import Team
from portal.permissions import is_operator

logger = logging.getLogger(__name__)

# --- request ---------------------------------------------------------------------------


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
    checkpoint: Checkpoint | None = None,
    start_policy: str = StartPolicy.AS_ASKED,
    resumes: Lease | None = None,
    environment: Environment | None = None,
    now: datetime | None = None,
) -> Lease:
    """Ask for *count* cards of *card_model* (or of the best model meeting *requirements*)
    for *duration*, now or from *start_at*.

    A *checkpoint* says how the job saves its state when preempted (a signal or a command,
    the seconds it needs) and whether a new lease should resume it (``requeue``); *resumes*
    links such a new lease to the preempted one. A *start_policy* asks for the next off-peak
    window (or only off-peak time): the start moves to it (``scheduler.offpeak``).

    Admission and placement happen in this transaction: the lease comes back
    ``provisioning`` (cards held, a worker hands them over), ``scheduled`` (an advance
    reservation, cards booked), or ``queued`` with an ``estimated_start``.

    With a *request_key* (an API client's Idempotency-Key, the request form's own), the same
    request sent again — a retry after a timeout or a 503, a double click — returns the lease
    the first one made, with ``replayed = True``, instead of booking twice.

    The steps, in order: ``_replay``, ``request_shape`` (the preview's own first steps),
    ``_admit`` (locks, the fast path or the capacity check, quotas), ``_lease_new``,
    ``_save_once``, ``_events_record``, ``_placed_or_queued``, ``_queued_tell``.
    """
    asked = Asked(
        user=user,
        team=team,
        card_model=card_model,
        requirements=requirements,
        count=count,
        duration=duration,
        start_at=start_at,
        now=now or timezone.now(),
        priority=priority,
        purpose=purpose,
        same_node=same_node,
        start_policy=start_policy,
        environment=environment,
    )
    extra = Extra(description, override_reason, request_key, resumes)
    if request_key and (previous := _replay(asked, request_key)) is not None:
        return previous
    checkpoint = checkpoint_validate(checkpoint)
    shape = request_shape(asked)  # the same first steps as the form's preview
    if override_reason and not is_operator(user):
        raise PermissionDenied(_("Only operators may override quotas."))
    with transaction.atomic():
        admitted = _admit(asked, shape, override_reason)
        new = _lease_new(asked, shape, admitted, extra, checkpoint)
        lease = _save_once(new, asked, request_key)
        if lease is not new:
            return lease  # the same request, already made by its twin
        _events_record(lease, asked, admitted, override_reason)
        _placed_or_queued(lease, asked, shape, admitted)
    if admitted.placed:
        return lease  # as it stands (active if handed over here): nothing to read back
    lease.refresh_from_db()
    _queued_tell(lease, asked.now)
    return lease


@dataclass(frozen=True)
class Extra:
    """What a request carries besides its shape: kept on the lease, not checked."""

    description: str
    override_reason: str
    request_key: str
    resumes: Lease | None


@dataclass
class Admitted:
    """What admission decided inside the transaction."""

    verdict: Verdict
    has_rules: bool
    placed: list[int] | None  # the cards placed at once (the fast path), or None
    seen: int | None  # the plan version read before the lease was written (queued only)


def _replay(asked: Asked, request_key: str) -> Lease | None:
    """The lease an earlier request with *request_key* made (``replayed`` set), or None.

    The same key for a different request is refused: that is a client's bug, not a retry.
    """
    lease = (
        Lease.objects.select_related("user", "team", "card_model")
        .filter(user=asked.user, request_key=request_key)
        .first()
    )
    if lease is None:
        return None
    if (
        lease.team_id != asked.team.pk
        or lease.count != asked.count
        or (asked.card_model is not None and lease.card_model_id != asked.card_model.pk)
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


def _admit(asked: Asked, shape: Shape, override_reason: str) -> Admitted:
    """Lock what the decision reads, place at once when nobody waits and the request is for
    now (``fastpath``), else check the pool's capacity; then the quotas and member limits."""
    card_model, now = shape.card_model, asked.now
    # The team lock serializes quota checks; a team without rules for this request has
    # nothing to check, so its members' requests do not queue behind each other.
    has_rules = quotas.rules_apply(team=asked.team, user=asked.user, card_model=card_model)
    if has_rules:
        lock_team(asked.team.pk)
    lock_card_models([card_model.pk])
    # Nobody waits for the model and the request is for now: place it in SQL, written as
    # `provisioning` with its cards at once (scheduler/fastpath.py); else the full pass.
    placed = None
    if shape.start == now:
        placed = fastpath.place_now(
            card_model.pk,
            count=asked.count,
            start=now,
            end=now + asked.duration,
            nodes=shape.nodes,
            unless_queued=True,
        )
    if not placed:
        capacity_check(asked, shape)
    verdict = admission_of(asked, shape, has_rules=has_rules, override_reason=override_reason)
    if verdict.status != LeaseStatus.QUEUED:
        placed = None  # waits for the lead's approval first
    seen = None
    if not placed and verdict.status == LeaseStatus.QUEUED:
        # the queue pass may use its picture of the model from the last pass: the
        # version is read before this lease is written (scheduler/plancache.py)
        seen = plancache.hold(card_model.pk)
    return Admitted(verdict=verdict, has_rules=has_rules, placed=placed or None, seen=seen)


def _lease_new(
    asked: Asked, shape: Shape, admitted: Admitted, extra: Extra, checkpoint: Checkpoint | None
) -> Lease:
    """The lease row to write (not saved)."""
    placed, verdict, card_model, now = (
        admitted.placed,
        admitted.verdict,
        shape.card_model,
        asked.now,
    )
    return Lease(
        user=asked.user,
        team=asked.team,
        card_model=card_model,
        requirements=shape.requirements,
        count=asked.count,
        duration=asked.duration,
        start_at=shape.start,
        end_at=shape.start + asked.duration,
        status=LeaseStatus.PROVISIONING if placed else verdict.status,
        status_changed_at=now,
        priority=asked.priority,
        priority_rank=queue_rank(asked.priority, asked.purpose),
        purpose=asked.purpose,
        same_node=asked.same_node,
        description=extra.description,
        submitted_at=now,
        borrowed=verdict.borrowed,
        lent=bool(placed)
        and shares.lent_after_placement(
            team_id=asked.team.pk,
            card_model_id=card_model.pk,
            now=now,
            placing=len(placed),
            family=card_model.family,
        ),
        approval_breaches=[b.stored() for b in verdict.member_breaches],  # worded per reader
        request_key=extra.request_key,
        checkpoint_signal=checkpoint.signal if checkpoint else "",
        checkpoint_command=checkpoint.command if checkpoint else "",
        checkpoint_seconds=checkpoint.seconds if checkpoint else None,
        requeue=bool(checkpoint and checkpoint.requeue),
        resumes=extra.resumes,
        start_policy=asked.start_policy,
        environment=asked.environment,
    )


def _save_once(new: Lease, asked: Asked, request_key: str) -> Lease:
    """Write *new*; with a request key, two copies of one request at the same moment: the
    second waits on the unique key until the first commits, then gets that lease (nothing
    of its own written)."""
    if not request_key:
        new.save(force_insert=True)
        return new
    try:
        with transaction.atomic():
            new.save(force_insert=True)
    except IntegrityError:
        previous = _replay(asked, request_key)
        if previous is None:
            raise
        return previous
    return new


def _events_record(lease: Lease, asked: Asked, admitted: Admitted, override_reason: str) -> None:
    """The timeline's first rows: requested, an operator's quota override, placed."""
    now, user = asked.now, asked.user
    events = [
        LeaseEvent(
            lease=lease,
            kind="requested",
            at=now,
            actor=user,
            data={"count": asked.count, "minutes": asked.duration // timedelta(minutes=1)},
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
                data={"breaches": [b.stored() for b in admitted.verdict.overridden]},
            )
        )
    if admitted.placed:
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


def _placed_or_queued(lease: Lease, asked: Asked, shape: Shape, admitted: Admitted) -> None:
    """Hold the cards placed at once (and hand them over after the commit), or ask the lead,
    or let the queue pass place or book it; then the team's budget alerts."""
    now, card_model, verdict = asked.now, shape.card_model, admitted.verdict
    if admitted.placed:
        Allocation.objects.bulk_create(
            Allocation(card_id=c, lease=lease, start_at=now, end_at=lease.end_at)
            for c in admitted.placed
        )
        # Once this commits: here when the backend only keeps books, else by a worker.
        handover.hand_over_placed(lease)
    elif verdict.status == LeaseStatus.PENDING_APPROVAL:
        # The limits as parameters, worded for whoever reads the timeline.
        event_record(
            lease.pk, kind="needs_approval", at=now, data={"breaches": lease.approval_breaches}
        )
        notify_after_commit(lease.pk, "approval_requested")
    else:
        replan(card_model.pk, now=now, joined=lease.pk, seen=admitted.seen)
        if (
            verdict.borrowed
            and Lease.objects.filter(pk=lease.pk, status=LeaseStatus.QUEUED).exists()
        ):
            # Borrowing is for idle cards only: a borrowed lease never waits in the queue.
            raise ValidationError(borrow_refusal(card_model))
    if admitted.has_rules and verdict.status != LeaseStatus.PENDING_APPROVAL:
        team = asked.team
        transaction.on_commit(
            lambda: quotas.budget_alerts(team=team, card_model_id=card_model.pk, now=now)
        )


def _queued_tell(lease: Lease, now: datetime) -> None:
    """A lease left waiting in the queue: the holder hears when it should start."""
    if lease.status != LeaseStatus.QUEUED:
        return
    notify_after_commit(lease.pk, "lease_queued")
    # the start told (the lease page's; moves are measured from it): scheduler.eta
    ahead = team_work_ahead(lease.team_id)
    told = lease_told_start(lease, now=now, ahead=ahead)
    basis = lease_told_basis(lease, ahead=ahead)  # what it is made of: scheduler.moves
    event_record(
        lease.pk,
        kind="queued",
        at=now,
        data={"estimated_start": told and told.isoformat(), **({"basis": basis} if basis else {})},
    )


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
    requirements: dict | None = None,
    now: datetime | None = None,
) -> Lease:
    """Ask for cards by task: the top-ranked option's model and count, through lease_request.

    The lease is placed or queued like any other, with the *requirements* (stack, region…)
    and, for a plan across nodes, the network of the plan's nodes; its description names
    the task when the user gave none. Raises ValidationError (on ``profile``) when no option
    fits.
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
        requirements=requirements,
    )
    if not rec.options:
        raise ValidationError({"profile": [rec.message]})
    top = rec.options[0]
    return lease_request(
        user=user,
        team=team,
        card_model=top.card_model,
        requirements=rec.lease_requirements(top),
        count=top.count,
        duration=duration,
        start_at=start_at,
        priority=priority,
        purpose=purpose,
        same_node=not top.across_nodes,
        description=description or profile.summary()[:200],
        now=now,
    )
