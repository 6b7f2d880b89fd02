"""Maintenance that touches leases: draining a node, and a card marked faulty (swap or end).

Operators call these from the node and card pages, the API and the admin; the sweep ends
what still runs on a node when its drain time comes.
"""

from __future__ import annotations

import logging
from datetime import datetime

from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy, ngettext

from inventory.models import Card, Node
from leasing.choices import RUNNING_STATES, EndReason, Kind, LeaseStatus, WarningKind
from leasing.lifecycle.endings import lease_end_now
from leasing.lifecycle.provisioning import backend_change_after_commit
from leasing.locking import lock_card_models
from leasing.models import Allocation, Lease
from leasing.notify.messages import notice_send
from leasing.notify.services import warning_with_notice
from leasing.scheduler import moves, planner
from leasing.scheduler.run import replan
from leasing.scheduler.snapshot import lease_card_slots, timeline_for
from leasing.transitions import event_record, notify_after_commit, transition
from portal.audit import audit
from portal.permissions import is_operator

logger = logging.getLogger(__name__)

BATCH = 500


# --- maintenance -------------------------------------------------------------------------


def node_drain_said(node: Node, drain_at: datetime, warned: int) -> str:
    """What the operator is told after a drain (the node page and the admin say the same),
    in the reader's language and time zone."""
    return ngettext(
        "Node %(node)s drains at %(at)s; %(n)s holder warned.",
        "Node %(node)s drains at %(at)s; %(n)s holders warned.",
        warned,
    ) % {
        "node": node.hostname,
        "at": f"{timezone.localtime(drain_at):%Y-%m-%d %H:%M}",
        "n": warned,
    }


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
        # The queue sees the drain at once: estimates move, and a lease that can no longer be
        # placed says why now, not at the next sweep.
        models = Card.objects.filter(node=node).values_list("card_model_id", flat=True)
        for card_model_id in lock_card_models(set(models)):
            with moves.because("drain", node=node.hostname):
                replan(card_model_id, now=now)
        return drain_warnings_send(now=now, node_ids=[node.pk])


def node_undrain(*, user, node: Node, now: datetime | None = None) -> None:
    """An operator takes a node out of draining or maintenance: it takes leases again.

    Leases whose end the drain cut show their booked end again (the cut is read from the
    node, ``selectors.with_drains``); the queue sees the cards at once.
    """
    now = now or timezone.now()
    if not is_operator(user):
        raise PermissionDenied(_("Only operators undrain nodes."))
    undrainable = (Node.Status.DRAINING, Node.Status.MAINTENANCE)
    with transaction.atomic():
        changed = Node.objects.filter(pk=node.pk, status__in=undrainable).update(
            status=Node.Status.ACTIVE, drain_at=None
        )
        if not changed:
            raise ValidationError(_("The node is neither draining nor in maintenance."))
        audit(actor=user, action="node_undrain", target=node.hostname)
        models = Card.objects.filter(node=node).values_list("card_model_id", flat=True)
        for card_model_id in lock_card_models(set(models)):
            replan(card_model_id, now=now)


def drain_warnings_send(*, now: datetime | None = None, node_ids: list[int] | None = None) -> int:
    """Tell each holder whose lease outlives its node's drain time, once, with the warning
    row and the notice written together (the sweep re-finds any whose notice failed)."""
    now = now or timezone.now()
    nodes = Node.objects.filter(status=Node.Status.DRAINING, drain_at__isnull=False)
    if node_ids is not None:
        nodes = nodes.filter(pk__in=node_ids)
    warned = 0
    for node in nodes.order_by("drain_at", "pk")[:BATCH]:
        affected = (
            Lease.objects.filter(
                allocations__card__node=node,
                allocations__end_at__gt=node.drain_at,
                status__in=[*RUNNING_STATES, LeaseStatus.SCHEDULED],
            )
            .exclude(warnings__kind=WarningKind.DRAIN)
            .distinct()
            .select_related("user__profile")
            .order_by("pk")
        )
        for lease in affected[:BATCH]:
            params = {
                "id": lease.pk,
                "node": node.hostname,
                "at": node.drain_at,
                "end": lease.end_at,
            }
            if warning_with_notice(
                lease,
                WarningKind.DRAIN,
                0,
                now,
                lambda lease=lease, params=params: notice_send(
                    lease,
                    kind=Kind.DRAIN_WARNING,
                    message="drain",
                    params=params,
                    key=f"lease:{lease.pk}:drain",
                ),
            ):
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
            allocations__card__node=node, status__in=RUNNING_STATES, allocations__end_at__gt=now
        )
        for lease in running.distinct().select_related("user"):
            # Billed to the drain time, the end the holder was shown (lease_truth).
            cut_at = max(min(node.drain_at or now, now), lease.start_at)
            if lease_end_now(
                lease, EndReason.DRAIN, now, why="drain", cut_at=cut_at, node=node.hostname
            ):
                ended += 1
        _requeue_bookings(node, now)
    return ended


def _requeue_bookings(node: Node, now: datetime) -> None:
    """Reservations booked on the node (not started yet) lose those cards and wait in the
    queue again, where the pass books them elsewhere or gives an honest estimate."""
    booked = Lease.objects.filter(
        allocations__card__node=node, status=LeaseStatus.SCHEDULED, allocations__end_at__gt=now
    ).distinct()
    for lease_id, model_id in booked.values_list("pk", "card_model_id"):
        with transaction.atomic():
            lock_card_models([model_id])
            if transition(
                lease_id,
                frm=[LeaseStatus.SCHEDULED],
                to=LeaseStatus.QUEUED,
                kind="requeued",
                at=now,
                data={"node": node.hostname, "why": "drain"},
                estimated_start=None,
            ):
                Allocation.objects.filter(lease_id=lease_id).delete()
                replan(model_id, now=now)
                notify_after_commit(lease_id, Kind.LEASE_QUEUED)


# What card_mark_faulty's answer means, for the messages of the node page and the admin.
FAULTY_OUTCOMES = {
    "moved": gettext_lazy("its lease moved to a spare card"),
    "ended": gettext_lazy("its lease ended (no spare card)"),
    "idle": gettext_lazy("no lease held it"),
}


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
                card=card, start_at__lte=now, end_at__gt=now, lease__status__in=RUNNING_STATES
            )
            .select_related("lease__user", "lease__card_model")
            .first()
        )
        if holding is None:
            # the queue sees the card gone at once: estimates move, and are told why
            with moves.because("card_failed", card=card.uuid):
                replan(card.card_model_id, now=now)
            return "idle"
        lease = holding.lease
        slots = [
            s
            for s in lease_card_slots(card.card_model_id, now=now, requirements=lease.requirements)
            if s.card_id != card.pk
        ]
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
            lease_end_now(lease, EndReason.FAULTY, now, actor=user, why="faulty")
            return "ended"
        end = holding.end_at
        if holding.start_at < now:
            Allocation.objects.filter(pk=holding.pk).update(end_at=now)
        else:
            Allocation.objects.filter(pk=holding.pk).delete()
        spare = Card.objects.select_related("node").get(pk=replacement[0])
        Allocation.objects.create(card=spare, lease=lease, start_at=now, end_at=end)
        # The backend moves the holding (Slurm: a job off the faulty card) and answers the
        # new access details; until then the lease shows what the backend still gives.
        backend_change_after_commit(lease, now=now)
        event_record(
            lease.pk,
            kind="card_replaced",
            at=now,
            actor=user,
            data={
                "from": card.uuid,
                "to": spare.uuid,
                "from_card": f"{card.node.hostname}:{card.index}",
                "to_card": f"{spare.node.hostname}:{spare.index}",
            },
        )
        notify_after_commit(lease.pk, "card_swapped")
        return "moved"
