"""Apply the planner's decisions to the database: the queue pass for one card model."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from django.db import transaction

from leasing.models import Allocation, Lease, LeaseStatus
from leasing.scheduler import planner
from leasing.scheduler.snapshot import card_slots, queued_requests, timeline_for


@dataclass
class PassResult:
    started: list[int] = field(default_factory=list)  # queued → provisioning now
    booked: list[int] = field(default_factory=list)  # queued → scheduled (advance reservation)
    waiting: dict[int, datetime | None] = field(default_factory=dict)  # lease → estimated start


def schedule_card_model(card_model_id: int, *, now: datetime) -> PassResult:
    """Place every queued lease of the model that fits now; give the rest an estimated start.

    Must run inside a transaction holding the model's lock (leasing.locking). State
    changes go through the compare-and-set helper in leasing.services.
    """
    from leasing.services import transition  # services import this module

    assert transaction.get_connection().in_atomic_block, "schedule_card_model needs a transaction"
    from leasing.endings import preemption_plan

    result = PassResult()
    queue = queued_requests(card_model_id, now=now)
    if not queue:
        return result
    # Make room for a higher class first, so the plan below already sees the victims'
    # end (their grace period) and gives the waiting lease an honest estimate.
    preemption_plan(card_model_id, now=now)
    cards = card_slots(card_model_id, now=now)
    timeline = timeline_for(card_model_id, now=now)
    decisions = planner.plan_queue(cards, timeline, queue)
    requests = {r.lease_id: r for r in queue}
    estimates = dict(Lease.objects.filter(pk__in=requests).values_list("pk", "estimated_start"))

    for decision in decisions:
        request = requests[decision.lease_id]
        fits_when_wanted = decision.start is not None and decision.start == request.not_before
        if fits_when_wanted and decision.start <= now:
            end = now + request.duration
            if transition(
                decision.lease_id,
                frm=[LeaseStatus.QUEUED],
                to=LeaseStatus.PROVISIONING,
                kind="placed",
                at=now,
                start_at=now,
                end_at=end,
                estimated_start=None,
            ):
                Allocation.objects.bulk_create(
                    Allocation(card_id=c, lease_id=decision.lease_id, start_at=now, end_at=end)
                    for c in decision.card_ids
                )
                result.started.append(decision.lease_id)
        elif fits_when_wanted:
            end = decision.start + request.duration
            if transition(
                decision.lease_id,
                frm=[LeaseStatus.QUEUED],
                to=LeaseStatus.SCHEDULED,
                kind="booked",
                at=now,
                start_at=decision.start,
                end_at=end,
                estimated_start=None,
            ):
                Allocation.objects.bulk_create(
                    Allocation(
                        card_id=c, lease_id=decision.lease_id, start_at=decision.start, end_at=end
                    )
                    for c in decision.card_ids
                )
                result.booked.append(decision.lease_id)
        else:
            result.waiting[decision.lease_id] = decision.start
            if estimates.get(decision.lease_id) != decision.start:
                Lease.objects.filter(pk=decision.lease_id, status=LeaseStatus.QUEUED).update(
                    estimated_start=decision.start
                )
    return result
