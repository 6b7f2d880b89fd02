"""How leases end besides their end time: warnings before it, idle cards, preemption, maintenance.

Each step is a service run by the periodic sweep (leasing.tasks.sweep) over a bounded
batch; each is safe to run twice or on two workers at once: warnings are rows with a
unique constraint (sent exactly once), ends go through the compare-and-set transitions.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from django.conf import settings
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import IntegrityError, transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from inventory.models import Card, Node
from inventory.telemetry import utilization_stats
from leasing import services
from leasing.backends.local import access_details
from leasing.locking import lock_card_models
from leasing.models import (
    PRIORITY_RANK,
    Allocation,
    EndReason,
    Lease,
    LeaseStatus,
    LeaseWarning,
    Priority,
    WarningKind,
)
from leasing.scheduler import planner
from leasing.scheduler.snapshot import card_slots, timeline_for
from portal.audit import audit
from portal.models import default_warning_offsets
from portal.permissions import is_operator

logger = logging.getLogger(__name__)

BATCH = 500
RUNNING = (LeaseStatus.PROVISIONING, LeaseStatus.ACTIVE)


def _tell(
    lease: Lease, kind: str, title: str, body: str = "", *, anchor: str = "", key: str = ""
) -> None:
    """Send a notification to the holder through the configured channels (once per *key*)."""
    from leasing.notifications import notify

    notify(
        user=lease.user,
        kind=kind,
        title=title,
        body=body,
        lease=lease,
        url=f"/leases/{lease.pk}/{anchor}",
        key=key,
    )


def _warn_once(lease: Lease, kind: str, offset: int, now: datetime) -> bool:
    """Record the warning; False if it was already sent (by this or another worker)."""
    try:
        with transaction.atomic():
            LeaseWarning.objects.create(lease=lease, kind=kind, offset_minutes=offset, sent_at=now)
    except IntegrityError:
        return False
    return True


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


def warnings_send_due(*, now: datetime | None = None) -> int:
    """Warn holders at each offset before their lease ends; each warning exactly once."""
    now = now or timezone.now()
    horizon = now + timedelta(minutes=max(settings.CARDPOOL["MAX_WARNING_MINUTES"], 1))
    leases = (
        Lease.objects.filter(status=LeaseStatus.ACTIVE, end_at__gt=now, end_at__lte=horizon)
        .select_related("user__profile", "card_model")
        .order_by("end_at")[:BATCH]
    )
    sent = 0
    for lease in leases:
        for offset in offsets_for(lease):
            if lease.end_at - timedelta(minutes=offset) > now:
                continue
            with transaction.atomic():
                if not _warn_once(lease, WarningKind.EXPIRY, offset, now):
                    continue
                left = max(int((lease.end_at - now).total_seconds() // 60), 0)
                _tell(
                    lease,
                    "lease_expiring",
                    _("Lease %(id)s ends in %(minutes)s minutes")
                    % {"id": lease.pk, "minutes": left},
                    _(
                        "%(n)s × %(model)s end at %(end)s. Extend it from the lease page if you still need the cards."
                    )
                    % {
                        "n": lease.count,
                        "model": lease.card_model.name,
                        "end": timezone.localtime(lease.end_at).strftime("%Y-%m-%d %H:%M"),
                    },
                    anchor="#extend",
                    key=f"lease:{lease.pk}:expiring:{offset}",
                )
                sent += 1
    return sent


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
            if _warn_once(lease, WarningKind.IDLE, 0, now):
                Lease.objects.filter(pk=lease.pk).update(idle_since=now - window)
                policy = (
                    _("It will be reclaimed in %(minutes)s minutes unless the cards get busy.")
                    % {"minutes": int(grace.total_seconds() // 60)}
                    if lease.team.idle_reclaim
                    else _("Release it if you no longer need the cards.")
                )
                _tell(
                    lease,
                    "idle_warning",
                    _("Lease %(id)s: cards idle") % {"id": lease.pk},
                    _(
                        "The cards stayed under %(pct)s%% utilisation for %(minutes)s minutes. %(policy)s"
                    )
                    % {
                        "pct": lease.team.idle_threshold_pct,
                        "minutes": lease.team.idle_minutes,
                        "policy": policy,
                    },
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
                if _end(lease, EndReason.IDLE, now):
                    _notify_end(lease, _("reclaimed: the cards stayed idle"))
                    done["reclaimed"] += 1
    return done


def _end(lease: Lease, reason: str, now: datetime, actor=None) -> bool:
    with transaction.atomic():
        lock_card_models([lease.card_model_id])
        lease.refresh_from_db()
        return services._begin_release(lease, reason=reason, now=now, kind=reason, actor=actor)


def _notify_end(lease: Lease, why: str) -> None:
    # Same key as the generic "ended" notice: the holder hears once, with the reason.
    _tell(
        lease,
        "lease_ended",
        _("Lease %(id)s ended: %(why)s") % {"id": lease.pk, "why": why},
        key=f"lease:{lease.pk}:lease_ended",
    )


# --- preemption --------------------------------------------------------------------------

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
    if Lease.objects.filter(preempted_for=waiting, status__in=RUNNING).exists():
        return 0  # already being made room for
    victims = list(
        Lease.objects.filter(
            card_model_id=card_model_id,
            status__in=RUNNING,
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
        services._event(
            victim.pk,
            kind="preemption_scheduled",
            at=now,
            data={"at": preempt_at.isoformat(), "for": waiting.pk},
        )
        if _warn_once(victim, WarningKind.PREEMPTION, 0, now):
            transaction.on_commit(
                lambda v=victim: _tell(
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


def preemptions_due(*, now: datetime | None = None) -> int:
    """End the leases whose preemption grace period is over."""
    now = now or timezone.now()
    ended = 0
    due = (
        Lease.objects.filter(status__in=RUNNING, preempt_at__lte=now)
        .select_related("user")
        .order_by("preempt_at")
    )
    for lease in due[:BATCH]:
        if _end(lease, EndReason.PREEMPTED, now):
            _notify_end(lease, _("preempted for a higher-priority request"))
            ended += 1
    return ended


# --- maintenance -------------------------------------------------------------------------


def node_drain(*, user, node: Node, drain_at: datetime, now: datetime | None = None) -> int:
    """An operator drains a node: no lease may run past *drain_at*; holders are warned.

    Returns the number of leases warned. At the drain time the sweep puts the node into
    maintenance and ends what still runs there.
    """
    now = now or timezone.now()
    if not is_operator(user):
        raise PermissionDenied(_("Only operators drain nodes."))
    if drain_at < now:
        raise ValidationError(
            {"drain_at": [_("The drain time is in the past; pick now or later.")]}
        )
    with transaction.atomic():
        Node.objects.filter(pk=node.pk).update(status=Node.Status.DRAINING, drain_at=drain_at)
        audit(actor=user, action="node_drain", target=node.hostname, drain_at=drain_at)
        affected = (
            Lease.objects.filter(
                allocations__card__node=node,
                allocations__end_at__gt=drain_at,
                status__in=[*RUNNING, LeaseStatus.SCHEDULED],
            )
            .distinct()
            .select_related("user")
        )
        warned = 0
        for lease in affected:
            if _warn_once(lease, WarningKind.DRAIN, 0, now):
                transaction.on_commit(
                    lambda lease=lease: _tell(
                        lease,
                        "drain_warning",
                        _("Node %(node)s goes into maintenance at %(at)s")
                        % {
                            "node": node.hostname,
                            "at": timezone.localtime(drain_at).strftime("%Y-%m-%d %H:%M"),
                        },
                        _("Lease %(id)s runs past that time and will end then. Save your work.")
                        % {"id": lease.pk},
                    )
                )
                warned += 1
    return warned


def drains_due(*, now: datetime | None = None) -> int:
    """Nodes whose drain time has come go into maintenance; what still runs there ends."""
    now = now or timezone.now()
    ended = 0
    for node in Node.objects.filter(status=Node.Status.DRAINING, drain_at__lte=now)[:BATCH]:
        Node.objects.filter(pk=node.pk, status=Node.Status.DRAINING).update(
            status=Node.Status.MAINTENANCE
        )
        running = Lease.objects.filter(
            allocations__card__node=node, status__in=RUNNING, allocations__end_at__gt=now
        )
        for lease in running.distinct().select_related("user"):
            if _end(lease, EndReason.ADMIN, now):
                _notify_end(
                    lease, _("node %(node)s went into maintenance") % {"node": node.hostname}
                )
                ended += 1
    return ended


def card_mark_faulty(*, user, card: Card, note: str = "", now: datetime | None = None) -> str:
    """Take a card out of service; move its lease to a free card of the same model, or end it.

    Returns "moved", "ended" or "idle" (no lease held it).
    """
    now = now or timezone.now()
    if not is_operator(user):
        raise PermissionDenied(_("Only operators mark cards faulty."))
    with transaction.atomic():
        lock_card_models([card.card_model_id])
        Card.objects.filter(pk=card.pk).update(status=Card.Status.FAULTY, health_note=note[:200])
        audit(actor=user, action="card_faulty", target=card.uuid, note=note[:200])
        holding = (
            Allocation.objects.filter(
                card=card, start_at__lte=now, end_at__gt=now, lease__status__in=RUNNING
            )
            .select_related("lease__user", "lease__card_model")
            .first()
        )
        if holding is None:
            return "idle"
        lease = holding.lease
        slots = [s for s in card_slots(card.card_model_id, now=now) if s.card_id != card.pk]
        timeline = timeline_for(card.card_model_id, now=now)
        siblings = {
            a.card_id: a.card
            for a in lease.allocations.select_related("card")
            if a.card_id != card.pk
        }
        # Prefer a card on the same node and interconnect domain as the lease's other cards.
        same = [
            s
            for s in slots
            if any(s.node_id == c.node_id for c in siblings.values()) or not siblings
        ]
        replacement = planner.place(
            same or slots, timeline, 1, now, holding.end_at, same_node=True
        ) or (
            planner.place(slots, timeline, 1, now, holding.end_at, same_node=True) if same else None
        )
        if replacement is None:
            ended = _end(lease, EndReason.FAILED, now, actor=user)
            if ended:
                transaction.on_commit(
                    lambda: _notify_end(lease, _("a card failed and no spare was free"))
                )
            return "ended"
        end = holding.end_at
        if holding.start_at < now:
            Allocation.objects.filter(pk=holding.pk).update(end_at=now)
        else:
            Allocation.objects.filter(pk=holding.pk).delete()
        Allocation.objects.create(card_id=replacement[0], lease=lease, start_at=now, end_at=end)
        Lease.objects.filter(pk=lease.pk).update(access=access_details(lease))
        services._event(
            lease.pk,
            kind="card_replaced",
            at=now,
            actor=user,
            data={"from": card.uuid, "to": replacement[0]},
        )
        transaction.on_commit(
            lambda: _tell(
                lease,
                "lease_active",
                _("Lease %(id)s: a card was replaced") % {"id": lease.pk},
                _(
                    "Card %(uuid)s failed; your lease now holds another card. See the lease page for the new device list."
                )
                % {"uuid": card.uuid},
            )
        )
        return "moved"
