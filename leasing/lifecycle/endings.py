"""How leases end: at their end time, with warnings before it; idle cards; preemption when its
grace is over (which leases, and when, is decided by ``scheduler.preemption``). Draining and
faulty cards are in ``maintenance``.

Each step is a service run by the periodic sweep (task ``leasing.tasks.sweep``) over a bounded
batch; each is safe to run twice or on two workers at once: warnings are rows with a
unique constraint (sent exactly once), ends go through the compare-and-set transitions.
"""

from __future__ import annotations

import logging
import math
from datetime import datetime, timedelta

from django.conf import settings
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.utils import timezone

from inventory.selectors import utilization_stats
from leasing.choices import RUNNING_STATES, EndReason, Kind, LeaseStatus, WarningKind
from leasing.lifecycle.provisioning import backend_change_after_commit
from leasing.lifecycle.requests import lease_request
from leasing.lifecycle.validation import Checkpoint
from leasing.locking import lock_card_models
from leasing.models import Lease, LeaseWarning
from leasing.notify.messages import notice_send
from leasing.notify.services import warning_record_once
from leasing.scheduler.preemption import preemption_warn
from leasing.scheduler.run import release_begin, replan
from leasing.transitions import event_record
from portal.models import default_warning_offsets

logger = logging.getLogger(__name__)

BATCH = 500


# --- the end time ---------------------------------------------------------------------


def lease_expire(*, lease_id: int, now: datetime | None = None) -> bool:
    """Reclaim a lease whose end time has come. Safe to call twice or concurrently."""
    now = now or timezone.now()
    with transaction.atomic():
        lease = Lease.objects.filter(pk=lease_id, status__in=RUNNING_STATES).first()
        if lease is None or lease.end_at > now:
            return False
        lock_card_models([lease.card_model_id])
        # Usage stops at the booked end, however late the reclaim runs.
        return release_begin(
            lease, reason=EndReason.EXPIRED, now=now, cut_at=lease.end_at, kind="expire"
        )


# --- warnings before the end -------------------------------------------------------------


def offsets_for(lease: Lease) -> list[int]:
    """The lease's own offsets, else its holder's, else the default; only those that fit it."""
    offsets = lease.warning_offsets or getattr(
        getattr(lease.user, "profile", None), "warning_offsets", None
    )
    if not offsets:
        offsets = default_warning_offsets()
    length = (lease.end_at - lease.start_at) / timedelta(minutes=1)
    return sorted({int(m) for m in offsets if 0 < int(m) < length}, reverse=True)


def warnings_due(*, end: datetime, offsets: list[int], sent: set[int], now: datetime) -> list[int]:
    """The offsets (minutes before *end*) whose warning is due at *now* and not yet *sent*:
    due from exactly ``end - offset`` on, not a second earlier."""
    return [m for m in offsets if m not in sent and end - timedelta(minutes=m) <= now]


def next_warning_at(*, end: datetime, offsets: list[int], sent: set[int]) -> datetime:
    """When a lease's next unsent warning is due; its *end* when none is left (``Lease.warn_at``:
    the tick looks at the lease again then)."""
    return min((end - timedelta(minutes=m) for m in offsets if m not in sent), default=end)


def warnings_send_due(*, now: datetime | None = None) -> int:
    """The sweep's pass: every active lease ending within the furthest warning's reach (a
    warning the tick missed, offsets changed since ``warn_at`` was worked out)."""
    now = now or timezone.now()
    horizon = now + timedelta(minutes=max(settings.CARDPOOL["MAX_WARNING_MINUTES"], 1))
    leases = Lease.objects.filter(status=LeaseStatus.ACTIVE, end_at__gt=now, end_at__lte=horizon)
    return _warnings_send(leases.order_by("end_at")[:BATCH], now)


def warnings_send_ticked(*, now: datetime | None = None) -> int:
    """The tick's pass (every ``TICK_SECONDS``): the active leases whose next warning is due
    by ``warn_at``, or not worked out yet, so a warning goes out within a tick of its offset.
    Two index range reads (status, warn_at) when none is due; a lease past its end is left
    to the expiry on the same tick."""
    now = now or timezone.now()
    active = Lease.objects.filter(status=LeaseStatus.ACTIVE)
    due = list(active.filter(warn_at__lte=now).values_list("pk", flat=True)[:BATCH])
    due += active.filter(warn_at__isnull=True).values_list("pk", flat=True)[: BATCH - len(due)]
    if not due:
        return 0
    leases = Lease.objects.filter(pk__in=due, status=LeaseStatus.ACTIVE, end_at__gt=now)
    return _warnings_send(leases.order_by("end_at"), now)


def _warnings_send(leases, now: datetime) -> int:
    """Warn holders at each offset before their lease ends, each warning exactly once; then
    keep when the next one is due on the lease (``warn_at``)."""
    leases = list(leases.select_related("user__profile", "card_model"))
    sent_before: dict[int, set[int]] = {}
    for lease_id, offset in LeaseWarning.objects.filter(
        lease_id__in=[lease.pk for lease in leases], kind=WarningKind.EXPIRY
    ).values_list("lease_id", "offset_minutes"):
        sent_before.setdefault(lease_id, set()).add(offset)
    sent = 0
    for lease in leases:
        offsets, done = offsets_for(lease), sent_before.get(lease.pk, set())
        for offset in warnings_due(end=lease.end_at, offsets=offsets, sent=done, now=now):
            done.add(offset)  # sent now, or by another worker
            sent += _expiry_warn(lease, offset, now)
        warn_at = next_warning_at(end=lease.end_at, offsets=offsets, sent=done)
        if warn_at != lease.warn_at:
            Lease.objects.filter(pk=lease.pk, end_at=lease.end_at).update(warn_at=warn_at)
    return sent


def _expiry_warn(lease: Lease, offset: int, now: datetime) -> bool:
    with transaction.atomic():
        if not warning_record_once(lease, WarningKind.EXPIRY, offset, now):
            return False
        # The warning's own offset (10 for the 10-minute warning, though the pass ran
        # seconds after it); what is left, rounded up, if it went out much later.
        left = math.ceil((lease.end_at - now) / timedelta(minutes=1))
        left = offset if abs(left - offset) <= 1 else max(left, 0)
        notice_send(
            lease,
            kind=Kind.LEASE_EXPIRING,
            message="expiring",
            params={
                "id": lease.pk,
                "minutes": left,
                "n": lease.count,
                "model": lease.card_model.name,
                "end": lease.end_at,
            },
            anchor="#extend",
            key=f"lease:{lease.pk}:expiring:{offset}",
        )
    return True


# --- idle cards --------------------------------------------------------------------------


def utilisation_over(card_ids: list[int], since: datetime, until: datetime) -> dict:
    """Max utilisation over the window and whether every card reported throughout it
    (a silent agent is not an idle card)."""
    return utilization_stats(card_ids, since, until)


def idle_check(*, now: datetime | None = None) -> dict:
    """Warn about leases whose cards sit idle; reclaim them where the team's policy says so."""
    now = now or timezone.now()
    grace = timedelta(minutes=settings.CARDPOOL["IDLE_GRACE_MINUTES"])
    done = {"warned": 0, "reclaimed": 0}
    leases = (
        Lease.objects.filter(status=LeaseStatus.ACTIVE, activated_at__isnull=False)
        .select_related("team", "user", "card_model")
        .order_by("pk")[:BATCH]
    )
    for lease in leases:
        window = timedelta(minutes=lease.team.idle_minutes)
        if lease.activated_at > now - window:
            continue  # not running long enough to judge
        card_ids = list(lease.allocations.filter(end_at__gt=now).values_list("card_id", flat=True))
        stats = utilisation_over(card_ids, now - window, now)
        idle = (
            stats["covered"]
            and stats["max"] is not None
            and stats["max"] < lease.team.idle_threshold_pct
        )
        if not idle:
            if lease.idle_since is not None:
                Lease.objects.filter(pk=lease.pk).update(idle_since=None)
            continue
        with transaction.atomic():
            if warning_record_once(lease, WarningKind.IDLE, 0, now):
                Lease.objects.filter(pk=lease.pk).update(idle_since=now - window)
                notice_send(
                    lease,
                    kind=Kind.IDLE_WARNING,
                    message="idle",
                    params={
                        "id": lease.pk,
                        "pct": lease.team.idle_threshold_pct,
                        "minutes": lease.team.idle_minutes,
                        "grace": int(grace.total_seconds() // 60),
                        "reclaim": lease.team.idle_reclaim,
                    },
                    key=f"lease:{lease.pk}:idle_warning",
                )
                done["warned"] += 1
                continue
        warned_at = (
            lease.warnings.filter(kind=WarningKind.IDLE).values_list("sent_at", flat=True).first()
        )
        if lease.team.idle_reclaim and warned_at is not None and warned_at <= now - grace:
            still = utilisation_over(card_ids, warned_at, now)
            if (
                still["covered"]
                and still["max"] is not None
                and still["max"] < lease.team.idle_threshold_pct
            ):
                if lease_end_now(lease, EndReason.IDLE, now, why="idle"):
                    done["reclaimed"] += 1
    return done


def lease_end_now(
    lease: Lease,
    reason: str,
    now: datetime,
    actor=None,
    *,
    why: str = "",
    cut_at: datetime | None = None,
    **params,
) -> bool:
    """End a running lease now for *reason* (idle, preempted, a drain, a failed card); its
    cards are free (and billed) from *cut_at* when given (a drain's time), else from now.

    With *why* (a key of ``notify.messages.ENDED_WHY``) the holder is told in the same
    transaction, once (the notice shares the generic "ended" notice's key).
    """
    with transaction.atomic():
        lock_card_models([lease.card_model_id])
        lease.refresh_from_db()
        ended = release_begin(
            lease, reason=reason, now=now, kind=reason, actor=actor, cut_at=cut_at
        )
        if ended and why:
            notify_ended(lease, why, **params)
        return ended


def notify_ended(lease: Lease, why: str, **params) -> None:
    """Tell the holder why their lease ended (stored as a message, rendered for the reader)."""
    # Same key as the generic "ended" notice: the holder hears once, with the reason.
    notice_send(
        lease,
        kind=Kind.LEASE_ENDED,
        message="ended",
        params={"id": lease.pk, "why": why, **params},
        key=f"lease:{lease.pk}:lease_ended",
    )


# --- preemption --------------------------------------------------------------------------


def preemption_warnings_send(*, now: datetime | None = None) -> int:
    """Warn the holders of leases marked for preemption that were not told yet (the queue
    pass warns at once; this re-finds any whose notice could not be written)."""
    now = now or timezone.now()
    marked = (
        Lease.objects.filter(status__in=RUNNING_STATES, preempt_at__gt=now)
        .exclude(warnings__kind=WarningKind.PREEMPTION)
        .select_related("user__profile")
        .order_by("preempt_at", "pk")
    )
    return sum(1 for lease in marked[:BATCH] if preemption_warn(lease, now=now))


def preemptions_due(*, now: datetime | None = None) -> int:
    """End the leases whose preemption grace period is over; a partly preempted lease gives
    back only the cards it was told about and keeps the rest."""
    now = now or timezone.now()
    done = 0
    due = (
        Lease.objects.filter(status__in=RUNNING_STATES, preempt_at__lte=now)
        .select_related("user__profile")
        .order_by("preempt_at")
    )
    for lease in due[:BATCH]:
        if lease.preempt_cards is not None and lease.preempt_cards < lease.count:
            done += cards_take_back(lease, now=now)
        elif lease_end_now(lease, EndReason.PREEMPTED, now, why="preempted"):
            done += 1
            if lease.requeue:
                lease_requeue(lease, now=now)
    return done


def lease_requeue(lease: Lease, *, now: datetime) -> Lease | None:
    """A preempted lease asked to be requeued: a new request with the same profile (model,
    cards, placement, priority, purpose, checkpoint, start policy) for the time it still had, linked to it
    (``resumes``). It passes admission like any request; when it is refused (a quota), the
    holder is told why on the old lease's timeline and nothing is queued."""
    left = lease.end_at - (lease.ended_at or now)
    if left < timedelta(minutes=1):
        return None
    try:
        new = lease_request(
            user=lease.user,
            team=lease.team,
            card_model=lease.card_model,
            count=lease.count,
            duration=left,
            priority=lease.priority,
            purpose=lease.purpose,
            same_node=lease.same_node,
            description=lease.description,
            checkpoint=Checkpoint(
                lease.checkpoint_signal,
                lease.checkpoint_command,
                lease.checkpoint_seconds,
                requeue=True,
            ),
            start_policy=lease.start_policy,
            resumes=lease,
            now=now,
        )
    except (ValidationError, PermissionDenied) as exc:
        messages = getattr(exc, "messages", [str(exc)])
        event_record(lease.pk, kind="requeue_refused", at=now, message="; ".join(messages))
        logger.info("lease %s: not requeued: %s", lease.pk, messages)
        return None
    event_record(lease.pk, kind="resumed_by", at=now, data={"lease": new.pk})
    event_record(new.pk, kind="resumes", at=now, data={"lease": lease.pk})
    return new


def cards_take_back(lease: Lease, *, now: datetime) -> bool:
    """A partial preemption's time has come: the lease holds fewer cards from now on.

    The cards' periods already end at ``preempt_at`` (set when the preemption was planned,
    so the planner and billing see them end then); here the count and access follow, with a
    ``resized`` event on the timeline.
    """
    with transaction.atomic():
        lock_card_models([lease.card_model_id])
        row = (
            Lease.objects.filter(
                pk=lease.pk,
                status__in=RUNNING_STATES,
                preempt_at__lte=now,
                preempt_cards__isnull=False,
            )
            .values_list("count", "preempt_cards")
            .first()
        )
        if row is None:
            return False
        count, taken = row
        left = count - taken
        Lease.objects.filter(pk=lease.pk).update(
            count=left, preempt_at=None, preempt_cards=None, preempt_why=""
        )
        lease.refresh_from_db()
        # The backend gives the taken cards back (Slurm: the job's GRES) and answers the access.
        backend_change_after_commit(lease, now=now)
        event_record(
            lease.pk,
            kind="resized",
            at=now,
            data={"from": count, "to": left, "reason": "preempted", "for": lease.preempted_for_id},
        )
        replan(lease.card_model_id, now=now)
    return True
