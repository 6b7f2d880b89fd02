"""Resize a running lease: more or fewer cards, or another model of the same family (同规格族升降配).

Placed as one change: new cards are held before old ones go. Same model: the lease keeps
its cards and gains or drops some. Another model: a new lease is placed now for the rest
of the window; the old one is released when the new one is active (``provisioning.
lease_activate``), so the holder is never without cards.
"""

from __future__ import annotations

from datetime import datetime

from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from inventory.models import CardModel
from leasing import transitions
from leasing.choices import RESIZABLE_STATES, LeaseStatus
from leasing.lifecycle.change_requests import change_ask
from leasing.lifecycle.provisioning import backend_change_after_commit
from leasing.locking import lock_card_models, lock_team
from leasing.models import Allocation, Lease
from leasing.scheduler import planner
from leasing.scheduler.preview import waiting_delayed
from leasing.scheduler.run import replan
from leasing.scheduler.snapshot import lease_card_slots, timeline_for
from leasing.teams import quotas
from leasing.teams.admission import Ask, admit
from leasing.teams.approvals import may_decide
from leasing.transitions import hand_over
from portal.permissions import can_manage_lease


def _admit(
    lease: Lease,
    user,
    *,
    card_model: CardModel,
    count: int,
    now: datetime,
    approved: bool,
    moving: bool,
):
    """More cards (or a move to another model) go through admission like a request."""
    return admit(
        Ask(
            team=lease.team,
            user=lease.user,
            card_model=card_model,
            count=count,
            start=now,
            end=lease.end_at,
            # A move continues the holding: the rule measures from when it began.
            length=(lease.end_at - quotas.holding_start(lease)) if moving else None,
            priority=lease.priority,
            kind="resize",
            lease_id=lease.pk,
            borrowed=lease.borrowed,
            replaces=lease.pk if moving else None,
        ),
        member_approved=approved or may_decide(user, lease),
        field="card_model" if moving else "count",
    )


def _alert_budgets(team, card_model_id: int, now: datetime) -> None:
    transaction.on_commit(
        lambda: quotas.budget_alerts(team=team, card_model_id=card_model_id, now=now)
    )


def _no_delay(card_model: CardModel, chosen: list[int], now: datetime, end: datetime, field: str):
    """Nobody waiting for the model may start later because of the cards taken now."""
    delayed = waiting_delayed(card_model.pk, [(c, now, end) for c in chosen], now=now)
    if delayed:
        raise ValidationError(
            {
                field: [
                    _(
                        "%(n)s waiting request(s) for %(model)s would start later if you took these cards now; "
                        "they are promised to the queue. Ask for a new lease instead: it queues behind them."
                    )
                    % {"n": delayed, "model": card_model.name}
                ]
            }
        )


def lease_resize(
    *,
    lease: Lease,
    user,
    count: int | None = None,
    card_model: CardModel | None = None,
    now: datetime | None = None,
    approved: bool = False,
) -> Lease:
    """Change an active lease's card count, or move it to another model of its family.

    Returns the lease that now carries the work: the same one (count change) or the new
    one (model change, provisioning until its cards are handed over). More cards go through
    admission: a member limit broken leaves the lease as it is with a pending change on
    ``lease.pending_change`` (*approved*: the lead already decided, change_decisions).
    """
    now = now or timezone.now()
    if not can_manage_lease(user, lease):
        raise PermissionDenied(_("You may not resize this lease."))
    count = count if count is not None else lease.count
    target = card_model or lease.card_model
    if count < 1:
        raise ValidationError(
            {"count": [_("A lease holds at least one card; release it instead.")]}
        )
    if target.pk != lease.card_model_id:
        family = lease.card_model.family
        if not family or target.family != family:
            raise ValidationError(
                {
                    "card_model": [
                        _(
                            "%(to)s is not in the same family as %(from)s; request a new lease instead."
                        )
                        % {"to": target.name, "from": lease.card_model.name}
                    ]
                }
            )
    elif count == lease.count:
        raise ValidationError(
            {"count": [_("Nothing to change: the lease already holds %(n)s cards.") % {"n": count}]}
        )
    with transaction.atomic():
        lock_team(lease.team_id)
        lock_card_models({lease.card_model_id, target.pk})
        lease.refresh_from_db()
        if lease.status not in RESIZABLE_STATES or lease.end_at <= now:
            raise ValidationError(
                _("Only an active lease can be resized; this one is %(status)s.")
                % {"status": lease.get_status_display()}
            )
        if lease.preempt_at is not None:
            raise ValidationError(
                _(
                    "Cards of this lease are being taken back for a higher-priority request at %(at)s; "
                    "resize after that."
                )
                % {"at": timezone.localtime(lease.preempt_at).strftime("%Y-%m-%d %H:%M")}
            )
        if target.pk == lease.card_model_id:
            return _resize_in_place(lease, count, now, user, approved)
        return _move(lease, target, count, now, user, approved)


def _resize_in_place(lease: Lease, count: int, now: datetime, user, approved: bool) -> Lease:
    held = list(
        lease.allocations.filter(end_at__gt=now).select_related("card").order_by("-card__index")
    )
    if count < lease.count:
        for allocation in held[: lease.count - count]:
            if allocation.start_at < now:
                Allocation.objects.filter(pk=allocation.pk).update(end_at=now)
            else:
                Allocation.objects.filter(pk=allocation.pk).delete()
    else:
        extra = count - lease.count
        verdict = _admit(
            lease,
            user,
            card_model=lease.card_model,
            count=extra,
            now=now,
            approved=approved,
            moving=False,
        )
        if verdict.needs_approval:
            lease.pending_change = change_ask(
                lease=lease, user=user, verdict=verdict, now=now, count=count
            )
            return lease
        nodes = {a.card.node_id for a in held}
        slots = lease_card_slots(lease.card_model_id, now=now, requirements=lease.requirements)
        timeline = timeline_for(lease.card_model_id, now=now)
        near = [s for s in slots if s.node_id in nodes]
        chosen = planner.place(near, timeline, extra, now, lease.end_at, same_node=True)
        if chosen is None and not lease.same_node:
            chosen = planner.place(slots, timeline, extra, now, lease.end_at, same_node=False)
        if chosen is None:
            raise ValidationError(
                {
                    "count": [
                        _(
                            "%(n)s more %(model)s cards are not free until the lease ends%(where)s; try fewer or later."
                        )
                        % {
                            "n": extra,
                            "model": lease.card_model.name,
                            "where": _(" on the same node") if lease.same_node else "",
                        }
                    ]
                }
            )
        _no_delay(lease.card_model, chosen, now, lease.end_at, "count")
        Allocation.objects.bulk_create(
            Allocation(card_id=c, lease=lease, start_at=now, end_at=lease.end_at) for c in chosen
        )
        _alert_budgets(lease.team, lease.card_model_id, now)
    Lease.objects.filter(pk=lease.pk).update(count=count)
    # The backend changes what it holds (Slurm: the job's GRES) and answers the new access.
    backend_change_after_commit(lease, now=now)
    transitions.event_record(
        lease.pk, kind="resized", at=now, actor=user, data={"from": lease.count, "to": count}
    )
    replan(lease.card_model_id, now=now)
    lease.refresh_from_db()
    return lease


def _move(lease: Lease, target: CardModel, count: int, now: datetime, user, approved) -> Lease:
    verdict = _admit(
        lease, user, card_model=target, count=count, now=now, approved=approved, moving=True
    )
    if verdict.needs_approval:
        lease.pending_change = change_ask(
            lease=lease, user=user, verdict=verdict, now=now, count=count, card_model=target
        )
        return lease
    chosen = planner.place(
        lease_card_slots(target.pk, now=now, requirements=lease.requirements),
        timeline_for(target.pk, now=now),
        count,
        now,
        lease.end_at,
        same_node=lease.same_node,
    )
    if chosen is None:
        raise ValidationError(
            {
                "card_model": [
                    _(
                        "%(n)s × %(model)s are not free now for the rest of the lease; try later or another model."
                    )
                    % {"n": count, "model": target.name}
                ]
            }
        )
    _no_delay(target, chosen, now, lease.end_at, "card_model")
    _alert_budgets(lease.team, target.pk, now)
    new = Lease.objects.create(
        user=lease.user,
        team=lease.team,
        card_model=target,
        count=count,
        duration=lease.end_at - now,
        start_at=now,
        end_at=lease.end_at,
        status=LeaseStatus.PROVISIONING,
        status_changed_at=now,
        priority=lease.priority,
        priority_rank=lease.priority_rank,
        borrowed=lease.borrowed or verdict.borrowed,
        purpose=lease.purpose,
        same_node=lease.same_node,
        description=lease.description,
        submitted_at=now,
        replaces=lease,
        warning_offsets=lease.warning_offsets,
    )
    Allocation.objects.bulk_create(
        Allocation(card_id=c, lease=new, start_at=now, end_at=new.end_at) for c in chosen
    )
    transitions.event_record(
        new.pk, kind="resized_from", at=now, actor=user, data={"lease": lease.pk}
    )
    transitions.event_record(lease.pk, kind="resizing", at=now, actor=user, data={"lease": new.pk})
    hand_over([new.pk])
    return new
