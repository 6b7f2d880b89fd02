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

from inventory.models import Card, Node
from leasing.choices import RUNNING_STATES, EndReason, LeaseStatus, WarningKind
from leasing.lifecycle.endings import lease_end_now, notify_ended
from leasing.lifecycle.provisioning import backend_change_after_commit
from leasing.locking import lock_card_models
from leasing.models import Allocation, Lease
from leasing.notify.services import notify_holder, warning_record_once
from leasing.scheduler import planner
from leasing.scheduler.snapshot import card_slots, timeline_for
from leasing.transitions import event_record, notify_after_commit
from portal.audit import audit
from portal.permissions import is_operator

logger = logging.getLogger(__name__)

BATCH = 500


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
                status__in=[*RUNNING_STATES, LeaseStatus.SCHEDULED],
            )
            .distinct()
            .select_related("user")
        )
        warned = 0
        for lease in affected:
            if warning_record_once(lease, WarningKind.DRAIN, 0, now):
                transaction.on_commit(
                    lambda lease=lease: notify_holder(
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
            allocations__card__node=node, status__in=RUNNING_STATES, allocations__end_at__gt=now
        )
        for lease in running.distinct().select_related("user"):
            if lease_end_now(lease, EndReason.ADMIN, now):
                notify_ended(
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
                card=card, start_at__lte=now, end_at__gt=now, lease__status__in=RUNNING_STATES
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
            ended = lease_end_now(lease, EndReason.FAILED, now, actor=user)
            if ended:
                transaction.on_commit(
                    lambda: notify_ended(lease, _("a card failed and no spare was free"))
                )
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
