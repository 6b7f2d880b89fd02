"""Making room for a higher class: which preemptible leases end, and when (after a grace period).

Runs inside the queue pass (``run.schedule_card_model``) with the card model locked; the
leases it marks are ended by the sweep at ``preempt_at`` (``lifecycle.endings``).
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from leasing.choices import PRIORITY_RANK, RUNNING_STATES, LeaseStatus, Priority, WarningKind
from leasing.models import Lease
from leasing.notify.services import notify_holder, warning_record_once
from leasing.scheduler import planner
from leasing.scheduler.snapshot import card_slots, timeline_for
from leasing.transitions import event_record

PREEMPTIBLE_RANK = PRIORITY_RANK[Priority.PREEMPTIBLE]


def preemption_plan(card_model_id: int, *, now: datetime) -> int:
    """For the first waiting lease that outranks preemptible ones and cannot start now, mark
    the fewest preemptible leases (fewest cards, least elapsed work first) whose end lets it
    start; they end after a grace period. Never touches a non-preemptible lease.

    Runs inside the queue pass (the model is locked). Returns the number of leases marked.
    """
    waiting = (
        Lease.objects.filter(
            card_model_id=card_model_id,
            status=LeaseStatus.QUEUED,
            priority_rank__gt=PREEMPTIBLE_RANK,
        )
        .order_by("-priority_rank", "submitted_at", "pk")
        .first()
    )
    if waiting is None or waiting.start_at > now:
        return 0
    if Lease.objects.filter(preempted_for=waiting, status__in=RUNNING_STATES).exists():
        return 0  # already being made room for
    victims = list(
        Lease.objects.filter(
            card_model_id=card_model_id,
            status__in=RUNNING_STATES,
            priority=Priority.PREEMPTIBLE,
            preempt_at__isnull=True,
        ).order_by("count", "-activated_at", "pk")
    )
    if not victims:
        return 0
    cards = card_slots(card_model_id, now=now)
    request = planner.Request(waiting.pk, waiting.count, waiting.duration, now, waiting.same_node)
    end = now + request.duration
    if planner.place(
        cards,
        timeline_for(card_model_id, now=now),
        request.count,
        now,
        end,
        same_node=request.same_node,
    ):
        return 0  # it fits without ending anyone
    chosen: list[Lease] = []
    for victim in victims:
        chosen.append(victim)
        timeline = timeline_for(card_model_id, now=now, ending_now=frozenset(v.pk for v in chosen))
        if planner.place(
            cards, timeline, request.count, now, now + request.duration, same_node=request.same_node
        ):
            break
    else:
        return 0
    preempt_at = now + timedelta(minutes=settings.CARDPOOL["PREEMPT_GRACE_MINUTES"])
    for victim in chosen:
        Lease.objects.filter(pk=victim.pk, preempt_at__isnull=True).update(
            preempt_at=preempt_at, preempted_for=waiting
        )
        event_record(
            victim.pk,
            kind="preemption_scheduled",
            at=now,
            data={"at": preempt_at.isoformat(), "for": waiting.pk},
        )
        if warning_record_once(victim, WarningKind.PREEMPTION, 0, now):
            transaction.on_commit(
                lambda v=victim: notify_holder(
                    v,
                    "preemption_warning",
                    _("Lease %(id)s will be preempted at %(at)s")
                    % {"id": v.pk, "at": timezone.localtime(preempt_at).strftime("%H:%M")},
                    _(
                        "A higher-priority request needs these cards. Save a checkpoint now; the lease ends at %(at)s."
                    )
                    % {"at": timezone.localtime(preempt_at).strftime("%Y-%m-%d %H:%M")},
                )
            )
    return len(chosen)
