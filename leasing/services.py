"""Every write to leases: request, place, start, extend, release, cancel, expire, fail.

Views, the API, admin and tasks call these; they hold no rules themselves. Each state
change is a compare-and-set on the current status (``transition``) and leaves a
LeaseEvent, which is the lease's timeline and the audit trail.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal

from django.conf import settings
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import IntegrityError, transaction
from django.db.models import Count, Max, Sum
from django.utils import timezone
from django.utils.translation import gettext as _

from inventory.models import Card, CardModel
from leasing import quotas
from leasing.enqueue import enqueue, enqueue_after_commit
from leasing.locking import lock_card_models, lock_team
from leasing.models import (
    HOLDING_STATES,
    PRIORITY_RANK,
    Allocation,
    EndReason,
    Lease,
    LeaseEvent,
    LeaseStatus,
    MemberLimit,
    Priority,
    Purpose,
    Quota,
    QuotaLimits,
)
from leasing.scheduler import fastpath, planner
from leasing.scheduler.run import PassResult, schedule_card_model
from leasing.scheduler.snapshot import card_slots, queued_requests, timeline_for
from portal.audit import audit
from portal.models import Membership, Team
from portal.permissions import can_manage_lease, is_operator, leads_team

logger = logging.getLogger(__name__)

# Requests that start within this much of "now" count as "start now": clocks of
# browsers and scripts drift, and a form takes a while to submit.
START_NOW_TOLERANCE = timedelta(seconds=60)


# --- state machine ---------------------------------------------------------------------


def transition(
    lease_id: int,
    *,
    frm: Iterable[str],
    to: str,
    kind: str,
    at: datetime,
    actor=None,
    message: str = "",
    data: dict | None = None,
    **fields,
) -> bool:
    """Compare-and-set the lease's status from one of *frm* to *to*; write the event.

    Returns False when the lease was not in one of *frm* (someone else won the race);
    nothing is written then.
    """
    frm = list(frm)
    if len(frm) == 1:
        current = frm[0]  # the UPDATE below is the compare-and-set; no read needed
    else:
        current = (
            Lease.objects.filter(pk=lease_id, status__in=frm)
            .values_list("status", flat=True)
            .first()
        )
        if current is None:
            return False
    updated = Lease.objects.filter(pk=lease_id, status=current).update(
        status=to, status_changed_at=at, **fields
    )
    if updated != 1:
        return False
    LeaseEvent.objects.create(
        lease_id=lease_id,
        at=at,
        kind=kind,
        from_status=current,
        to_status=to,
        actor=actor,
        message=message,
        data=data or {},
    )
    return True


def _event(
    lease_id: int,
    *,
    kind: str,
    at: datetime,
    actor=None,
    message: str = "",
    data: dict | None = None,
):
    LeaseEvent.objects.create(
        lease_id=lease_id, kind=kind, at=at, actor=actor, message=message, data=data or {}
    )


def _after_pass(result: PassResult) -> None:
    """Hand the leases a queue pass started to the workers, once the transaction commits."""
    from leasing import tasks

    if len(result.started) == 1:
        enqueue_after_commit(tasks.provision_lease, result.started[0])
    else:
        # A queue draining at once (a big release): one message per PROVISION_BATCH leases,
        # so the transaction's caller does not publish a thousand; the workers share them.
        for i in range(0, len(result.started), tasks.PROVISION_BATCH):
            enqueue_after_commit(
                tasks.provision_batch, result.started[i : i + tasks.PROVISION_BATCH]
            )
    # Booked leases (result.booked) are started by the tick (tasks.tick) when their start
    # comes: no ETA task, which Redis would redeliver every visibility timeout.


def queue_advance(*, card_model_ids: Iterable[int], now: datetime | None = None) -> PassResult:
    """Run the queue pass for the given card models (locks them, places what fits)."""
    now = now or timezone.now()
    total = PassResult()
    with transaction.atomic():
        for card_model_id in lock_card_models(card_model_ids):
            result = schedule_card_model(card_model_id, now=now)
            total.started += result.started
            total.booked += result.booked
            total.waiting.update(result.waiting)
        _after_pass(total)
    return total


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


def _notify(lease_id: int, kind: str) -> None:
    """Tell people about *kind* once the transaction commits (inline if the broker is down:
    no sweep would re-find a lost notice)."""
    from leasing import tasks

    enqueue_after_commit(tasks.notify_lease, lease_id, kind, inline_if_down=True)


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


def _notify_here(lease_id: int, kind: str) -> None:
    """Word and write the notice in this process, after the commit: the caller is a worker
    already, and a second task per lease for an in-app notice costs more than the notice
    (email and webhooks still go out as their own tasks). If it fails, it is queued instead."""
    from leasing import notifications, tasks

    try:
        notifications.notify_lease_event(lease_id=lease_id, kind=kind)
    except Exception:
        logger.exception("notice %s for lease %s failed here; queued instead", kind, lease_id)
        enqueue(tasks.notify_lease, lease_id, kind, inline_if_down=False)


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
    from inventory.selectors import card_models_with_counts

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
    try:
        candidates = list(
            card_models_with_counts(
                now,
                vendor=requirements.get("vendor") or None,
                min_memory_gb=requirements.get("min_memory_gb"),
                precision=requirements.get("precision") or None,
                interconnect=requirements.get("interconnect") or None,
            ).filter(total__gte=count)
        )
    except (ValueError, TypeError) as exc:
        raise ValidationError(
            {"requirements": [_("Bad requirement: %(error)s.") % {"error": exc}]}
        ) from exc
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
            _after_pass(PassResult(started=[lease.pk]))
        elif verdict.status == LeaseStatus.PENDING_APPROVAL:
            _event(lease.pk, kind="needs_approval", at=now, message=lease.approval_reason)
            _notify(lease.pk, "approval_requested")
        else:
            _after_pass(schedule_card_model(card_model.pk, now=now))
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
        _notify(lease.pk, "lease_queued")
        _event(
            lease.pk,
            kind="queued",
            at=now,
            data={"estimated_start": lease.estimated_start and lease.estimated_start.isoformat()},
        )
    return lease


def lease_preview(
    *,
    card_model: CardModel,
    count: int,
    duration: timedelta,
    start_at: datetime | None = None,
    same_node: bool = True,
    priority: str = Priority.NORMAL,
    now: datetime | None = None,
) -> datetime | None:
    """When a request like this would start if made now: its place in the queue, no writes."""
    now = now or timezone.now()
    not_before = start_at if start_at and start_at > now else now
    cards = card_slots(card_model.pk, now=now)
    timeline = timeline_for(card_model.pk, now=now)
    rank = PRIORITY_RANK.get(priority, PRIORITY_RANK[Priority.NORMAL])
    ahead = queued_requests(card_model.pk, now=now, min_rank=rank)
    planner.plan_queue(cards, timeline, ahead)
    decision = planner.earliest(
        cards, timeline, planner.Request(0, count, duration, not_before, same_node)
    )
    return decision.start


# --- start, activate, fail ---------------------------------------------------------------


def lease_start(*, lease_id: int, now: datetime | None = None) -> bool:
    """A scheduled lease's start time has come: hand its cards over."""
    from leasing import tasks

    now = now or timezone.now()
    with transaction.atomic():
        lease = Lease.objects.filter(
            pk=lease_id, status=LeaseStatus.SCHEDULED, start_at__lte=now
        ).first()
        if lease is None:
            return False
        if not transition(
            lease_id,
            frm=[LeaseStatus.SCHEDULED],
            to=LeaseStatus.PROVISIONING,
            kind="starting",
            at=now,
        ):
            return False
        enqueue_after_commit(tasks.provision_lease, lease_id)
    return True


def lease_activate(*, lease_id: int, access: dict, now: datetime | None = None) -> bool:
    """The backend has handed the cards over: the lease is active until its end."""

    now = now or timezone.now()
    with transaction.atomic():
        ok = transition(
            lease_id,
            frm=[LeaseStatus.PROVISIONING],
            to=LeaseStatus.ACTIVE,
            kind="active",
            at=now,
            access=access,
            activated_at=now,
        )
        if ok:
            # The tick (tasks.tick) expires it at its end.
            replaces_id = Lease.objects.values_list("replaces_id", flat=True).get(pk=lease_id)
            waited = LeaseEvent.objects.filter(lease_id=lease_id, kind="queued").exists()
            kind = "lease_started_from_queue" if waited else "lease_active"
            transaction.on_commit(lambda: _notify_here(lease_id, kind), robust=True)
            if replaces_id:
                # A resize to another model: the old cards go only now that the new ones are held.
                old = Lease.objects.filter(pk=replaces_id).first()
                if old is not None:
                    lock_card_models([old.card_model_id])
                    _begin_release(old, reason=EndReason.RELEASED, now=now, kind="resized")
    return ok


def _free_cards(lease: Lease, now: datetime) -> None:
    """Cut the lease's periods at *now*: cards are free at once; future bookings vanish."""
    Allocation.objects.filter(lease=lease, start_at__gte=now).delete()
    Allocation.objects.filter(lease=lease, end_at__gt=now).update(end_at=now)


def lease_fail(*, lease_id: int, reason: str, now: datetime | None = None) -> bool:
    """Provisioning failed for good: the lease is failed, its cards free, the user told why."""

    now = now or timezone.now()
    with transaction.atomic():
        lease = Lease.objects.select_related("card_model").filter(pk=lease_id).first()
        if lease is None:
            return False
        lock_card_models([lease.card_model_id])
        if not transition(
            lease_id,
            frm=[LeaseStatus.SCHEDULED, LeaseStatus.PROVISIONING, LeaseStatus.ACTIVE],
            to=LeaseStatus.FAILED,
            kind="failed",
            at=now,
            message=reason,
            failure_reason=reason,
            ended_at=now,
        ):
            return False
        _free_cards(lease, now)
        _after_pass(schedule_card_model(lease.card_model_id, now=now))
        _notify(lease_id, "failed")
    return True


# --- ending ------------------------------------------------------------------------------


def _begin_release(
    lease: Lease,
    *,
    reason: str,
    now: datetime,
    kind: str,
    actor=None,
    cut_at: datetime | None = None,
) -> bool:
    """active/provisioning → releasing: cards free from *cut_at* (default now); backend told after commit."""
    from leasing import tasks

    cut_at = cut_at or now
    if not transition(
        lease.pk,
        frm=[LeaseStatus.PROVISIONING, LeaseStatus.ACTIVE],
        to=LeaseStatus.RELEASING,
        kind=kind,
        at=now,
        actor=actor,
        data={"reason": reason},
        ended_at=cut_at,
    ):
        return False
    _free_cards(lease, cut_at)
    _after_pass(schedule_card_model(lease.card_model_id, now=now))
    enqueue_after_commit(tasks.release_lease, lease.pk, reason)
    return True


def lease_release(*, lease: Lease, user, now: datetime | None = None) -> Lease:
    """End a lease early at the holder's (or lead's, or operator's) request; usage stops now."""
    now = now or timezone.now()
    if not can_manage_lease(user, lease):
        raise PermissionDenied(_("You may not release this lease."))
    with transaction.atomic():
        lock_card_models([lease.card_model_id])
        lease.refresh_from_db()
        if lease.status == LeaseStatus.SCHEDULED:
            raise ValidationError(_("This lease has not started yet; cancel it instead."))
        if not _begin_release(
            lease, reason=EndReason.RELEASED, now=now, actor=user, kind="release"
        ):
            raise ValidationError(
                _("Only a provisioning or active lease can be released; this one is %(status)s.")
                % {"status": lease.get_status_display()}
            )
    lease.refresh_from_db()
    return lease


def lease_expire(*, lease_id: int, now: datetime | None = None) -> bool:
    """Reclaim a lease whose end time has come. Safe to call twice or concurrently."""
    now = now or timezone.now()
    with transaction.atomic():
        lease = Lease.objects.filter(
            pk=lease_id, status__in=[LeaseStatus.PROVISIONING, LeaseStatus.ACTIVE]
        ).first()
        if lease is None or lease.end_at > now:
            return False
        lock_card_models([lease.card_model_id])
        # Usage stops at the booked end, however late the reclaim runs.
        return _begin_release(
            lease, reason=EndReason.EXPIRED, now=now, cut_at=lease.end_at, kind="expire"
        )


def lease_finish_release(*, lease_id: int, reason: str, now: datetime | None = None) -> bool:
    """The backend has taken the cards back: releasing → ended."""
    now = now or timezone.now()
    if reason not in EndReason.values:
        reason = EndReason.ADMIN
    with transaction.atomic():
        ended = transition(
            lease_id,
            frm=[LeaseStatus.RELEASING],
            to=LeaseStatus.ENDED,
            kind="ended",
            at=now,
            end_reason=reason,
        )
        if ended and reason != EndReason.RELEASED:  # the holder released it: no need to say so
            _notify(lease_id, "lease_ended")
    return ended


def lease_cancel(*, lease: Lease, user, now: datetime | None = None) -> Lease:
    """Withdraw a request that has not started (waiting or scheduled)."""
    now = now or timezone.now()
    if not can_manage_lease(user, lease):
        raise PermissionDenied(_("You may not cancel this lease."))
    with transaction.atomic():
        lock_card_models([lease.card_model_id])
        if not transition(
            lease.pk,
            frm=[LeaseStatus.PENDING_APPROVAL, LeaseStatus.QUEUED, LeaseStatus.SCHEDULED],
            to=LeaseStatus.CANCELLED,
            kind="cancel",
            at=now,
            actor=user,
            ended_at=now,
            estimated_start=None,
        ):
            lease.refresh_from_db()
            raise ValidationError(
                _(
                    "Only a waiting or scheduled lease can be cancelled; this one is %(status)s. Release it instead."
                )
                % {"status": lease.get_status_display()}
            )
        Allocation.objects.filter(lease=lease).delete()
        _after_pass(schedule_card_model(lease.card_model_id, now=now))
    lease.refresh_from_db()
    return lease


def lease_extend(*, lease: Lease, user, minutes: int, now: datetime | None = None) -> Lease:
    """Push the end of a lease later, on the same cards, if they are free and nobody waiting is delayed."""
    from leasing import tasks

    now = now or timezone.now()
    if not can_manage_lease(user, lease):
        raise PermissionDenied(_("You may not extend this lease."))
    if minutes < 1:
        raise ValidationError({"minutes": [_("Extend by at least one minute.")]})
    with transaction.atomic():
        lock_card_models([lease.card_model_id])
        lease.refresh_from_db()
        if lease.status not in HOLDING_STATES or lease.status == LeaseStatus.RELEASING:
            raise ValidationError(
                _(
                    "Only a scheduled, provisioning or active lease can be extended; this one is %(status)s."
                )
                % {"status": lease.get_status_display()}
            )
        new_end = lease.end_at + timedelta(minutes=minutes)
        max_minutes = settings.CARDPOOL["MAX_LEASE_MINUTES"]
        if new_end - lease.start_at > timedelta(minutes=max_minutes):
            raise ValidationError(
                {
                    "minutes": [
                        _("A lease may last at most %(hours)s hours in all.")
                        % {"hours": max_minutes // 60}
                    ]
                }
            )
        card_ids = list(lease.allocations.values_list("card_id", flat=True))
        timeline = timeline_for(lease.card_model_id, now=now)
        busy = [c for c in card_ids if not timeline.is_free(c, lease.end_at, new_end)]
        if busy:
            raise ValidationError(
                {
                    "minutes": [
                        _(
                            "These cards are booked by someone else after your lease ends; release and ask again instead."
                        )
                    ]
                }
            )
        # Nobody waiting may start later because of the extension.
        cards = card_slots(lease.card_model_id, now=now)
        queue = queued_requests(lease.card_model_id, now=now)
        if queue:
            before = planner.plan_queue(cards, timeline_for(lease.card_model_id, now=now), queue)
            extended = timeline_for(lease.card_model_id, now=now)
            for c in card_ids:
                extended.add(c, lease.end_at, new_end)
            after = planner.plan_queue(cards, extended, queue)
            delayed = [
                a
                for a, b in zip(after, before, strict=True)
                if b.start is not None and (a.start is None or a.start > b.start)
            ]
            if delayed:
                raise ValidationError(
                    {
                        "minutes": [
                            _(
                                "%(n)s waiting request(s) would start later if you extended; release when done instead."
                            )
                            % {"n": len(delayed)}
                        ]
                    }
                )
        Allocation.objects.filter(lease=lease, end_at=lease.end_at).update(end_at=new_end)
        old_end = lease.end_at
        Lease.objects.filter(pk=lease.pk).update(end_at=new_end, duration=new_end - lease.start_at)
        _event(
            lease.pk,
            kind="extended",
            at=now,
            actor=user,
            data={"from": old_end.isoformat(), "to": new_end.isoformat()},
        )
        if lease.status == LeaseStatus.ACTIVE:
            enqueue_after_commit(tasks.extend_lease_backend, lease.pk)
    lease.refresh_from_db()
    return lease


# --- approvals ---------------------------------------------------------------------------


def _may_decide(user, lease: Lease) -> bool:
    return is_operator(user) or leads_team(user, lease.team_id)


def lease_approve(*, lease: Lease, user, note: str = "", now: datetime | None = None) -> Lease:
    """A lead lets a request above a member's limit through; the team's quota must still hold."""
    now = now or timezone.now()
    if not _may_decide(user, lease):
        raise PermissionDenied(_("Only a lead of the lease's team or an operator may approve it."))
    with transaction.atomic():
        lock_team(lease.team_id)
        lock_card_models([lease.card_model_id])
        lease.refresh_from_db()
        if lease.status != LeaseStatus.PENDING_APPROVAL:
            raise ValidationError(
                _("This request is %(status)s, not waiting for approval.")
                % {"status": lease.get_status_display()}
            )
        quotas.require_team_quota(
            lease=lease,
            card_model=lease.card_model,
            count=lease.count,
            start=max(lease.start_at, now),
            duration=lease.duration,
        )
        start = max(lease.start_at, now)
        transition(
            lease.pk,
            frm=[LeaseStatus.PENDING_APPROVAL],
            to=LeaseStatus.QUEUED,
            kind="approved",
            at=now,
            actor=user,
            message=note,
            start_at=start,
            end_at=start + lease.duration,
        )
        _after_pass(schedule_card_model(lease.card_model_id, now=now))
        _notify(lease.pk, "approved")
    lease.refresh_from_db()
    return lease


def lease_reject(*, lease: Lease, user, reason: str, now: datetime | None = None) -> Lease:
    """A lead turns a request down, saying why (the requester reads it)."""
    now = now or timezone.now()
    if not _may_decide(user, lease):
        raise PermissionDenied(_("Only a lead of the lease's team or an operator may reject it."))
    if not reason.strip():
        raise ValidationError({"reason": [_("Say why, so the requester knows what to change.")]})
    with transaction.atomic():
        if not transition(
            lease.pk,
            frm=[LeaseStatus.PENDING_APPROVAL],
            to=LeaseStatus.REJECTED,
            kind="rejected",
            at=now,
            actor=user,
            message=reason.strip(),
            ended_at=now,
        ):
            lease.refresh_from_db()
            raise ValidationError(
                _("This request is %(status)s, not waiting for approval.")
                % {"status": lease.get_status_display()}
            )
        _notify(lease.pk, "rejected")
    lease.refresh_from_db()
    return lease


# --- quotas ------------------------------------------------------------------------------


def _limits(values: dict) -> dict:
    unknown = set(values) - set(QuotaLimits.LIMIT_FIELDS) - {"money_per_month"}
    if unknown:
        raise ValidationError(
            _("Unknown limit(s): %(keys)s.") % {"keys": ", ".join(sorted(unknown))}
        )
    for key, value in values.items():
        if value is not None and value < 0:
            raise ValidationError(
                {key: [_("A limit cannot be negative; leave it empty for no limit.")]}
            )
    return values


def quota_set(*, user, team: Team, card_model: CardModel | None, **limits) -> Quota:
    """Set a team's limits for one card model (or all models); operators only."""
    if not is_operator(user):
        raise PermissionDenied(_("Only operators set team quotas."))
    values = _limits(limits)
    with transaction.atomic():
        lock_team(team.pk)
        quota, _created = Quota.objects.update_or_create(
            team=team, card_model=card_model, defaults=values
        )
        audit(actor=user, action="quota_set", target=str(quota), **values)
    return quota


def member_limit_set(
    *, user, membership: Membership, card_model: CardModel | None, **limits
) -> MemberLimit:
    """A lead sets a member's limits, each inside the team's own limit for the same scope."""
    if not (is_operator(user) or leads_team(user, membership.team_id)):
        raise PermissionDenied(_("Only a lead of the team or an operator sets members' limits."))
    values = _limits(limits)
    values.pop("money_per_month", None)
    team_rule = Quota.objects.filter(team_id=membership.team_id, card_model=card_model).first()
    errors = {}
    for key, value in values.items():
        ceiling = getattr(team_rule, key, None) if team_rule else None
        if value is not None and ceiling is not None and value > ceiling:
            errors[key] = [
                _("The team's own limit is %(ceiling)s; a member's limit must not be higher.")
                % {"ceiling": ceiling}
            ]
    if errors:
        raise ValidationError(errors)
    with transaction.atomic():
        lock_team(membership.team_id)
        limit, _created = MemberLimit.objects.update_or_create(
            membership=membership, card_model=card_model, defaults=values
        )
        audit(actor=user, action="member_limit_set", target=str(limit), **values)
    return limit


def quota_replace(*, user, team: Team, rules: list[dict]) -> list[Quota]:
    """Replace all of a team's quota rules at once (the API's PUT); operators only.

    Each rule is ``{"card_model": CardModel | None, <limits>}``; rules not given are removed.
    """
    if not is_operator(user):
        raise PermissionDenied(_("Only operators set team quotas."))
    seen: set[int | None] = set()
    for rule in rules:
        key = rule["card_model"].pk if rule.get("card_model") else None
        if key in seen:
            raise ValidationError(_("Two rules for the same card model; give each model once."))
        seen.add(key)
    with transaction.atomic():
        lock_team(team.pk)
        kept = []
        for rule in rules:
            limits = _limits({k: v for k, v in rule.items() if k != "card_model"})
            quota, _created = Quota.objects.update_or_create(
                team=team, card_model=rule.get("card_model"), defaults=limits
            )
            kept.append(quota)
        Quota.objects.filter(team=team).exclude(pk__in=[q.pk for q in kept]).delete()
        audit(
            actor=user,
            action="quota_replace",
            target=team.slug,
            rules=[{k: str(v) if v is not None else None for k, v in r.items()} for r in rules],
        )
    return kept
