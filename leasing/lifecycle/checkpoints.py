"""Checkpoints delivered by a node's agent (the local backend): which leases on a node are
being preempted and declared a checkpoint, and the agent's word that it delivered one.

The Slurm backend delivers the signal itself (``scancel --signal``); with the local backend
nothing runs on the nodes from the portal, so ``cardpool-agent`` asks
``GET /api/v1/checkpoints/`` with its node token every interval, signals the processes that
use the lease's cards (or runs the command) and answers
``POST /api/v1/checkpoints/<lease>/``. Each delivery is an event on the lease's timeline,
once per node.

What the lease shows follows the acknowledgement (DESIGN invariant 12): handed to the agent
(``checkpoint_handed``), delivered (``checkpoint_delivered``, the agent's word), or not
delivered (``checkpoint_failed``: the agent's failure, or no word within
``CARDPOOL["CHECKPOINT_ACK_SECONDS"]``, recorded by the sweep). The grace runs on either way.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Exists, OuterRef

from inventory.models import Node
from leasing.choices import RUNNING_STATES
from leasing.models import Allocation, Lease, LeaseEvent
from leasing.transitions import event_record

DELIVERED = "checkpoint_delivered"
HANDED = "checkpoint_handed"  # the backend (local) left it to the node's agent
SENT = "checkpoint_signal"  # the backend itself delivered it (Slurm acknowledged the signal)
FAILED = "checkpoint_failed"


def checkpoints_for_node(node: Node, *, now: datetime) -> list[dict]:
    """The checkpoints the node's agent has to deliver now: leases running on the node,
    marked for preemption, that declared a signal or a command, not yet delivered there."""
    leases = list(
        Lease.objects.filter(
            status__in=RUNNING_STATES,
            preempt_at__isnull=False,
            allocations__card__node=node,
            allocations__end_at__gt=now,
        )
        .exclude(checkpoint_signal="", checkpoint_command="")
        .select_related("card_model", "user")
        .distinct()
        .order_by("preempt_at", "pk")
    )
    if not leases:
        return []
    done = {
        lease_id
        for lease_id, data in LeaseEvent.objects.filter(
            lease__in=leases, kind__in=(DELIVERED, FAILED)
        ).values_list("lease_id", "data")
        if (data or {}).get("host") == node.hostname
    }
    devices: dict[int, list[int]] = defaultdict(list)
    for lease_id, index in Allocation.objects.filter(
        lease__in=leases, card__node=node, start_at__lte=now, end_at__gt=now
    ).values_list("lease_id", "card__index"):
        devices[lease_id].append(index)
    return [
        {
            "lease": lease.pk,
            "user": lease.user.get_username(),
            "signal": lease.checkpoint_signal,
            "command": lease.checkpoint_command,
            "seconds": lease.checkpoint_seconds,
            "preempt_at": lease.preempt_at.isoformat(),
            "env_var": lease.card_model.devices_env,
            "devices": sorted(devices[lease.pk]),
        }
        for lease in leases
        if lease.pk not in done and devices[lease.pk]
    ]


def checkpoint_delivered(
    *, node: Node, lease_id: int, ok: bool, detail: str, now: datetime
) -> bool:
    """Record the agent's word that it delivered the lease's checkpoint on *node* (once per
    node; a second report changes nothing). False when the lease has no checkpoint due on
    that node (the agent's answer is then a 404)."""
    with transaction.atomic():
        due = {c["lease"] for c in checkpoints_for_node(node, now=now)}
        if lease_id not in due:
            return False
        event_record(
            lease_id,
            kind=DELIVERED if ok else FAILED,
            at=now,
            message=detail[:500],
            data={"host": node.hostname, "ok": ok},
        )
    return True


def ack_seconds() -> int:
    """How long the portal waits for the agent's word before it says "not delivered"."""
    return int(settings.CARDPOOL.get("CHECKPOINT_ACK_SECONDS", 60))


def checkpoints_unacknowledged(*, now: datetime, batch: int) -> int:
    """Record "not delivered" on leases still in their grace whose checkpoint was handed to
    the node's agent more than ``ack_seconds()`` ago without its word (once per lease)."""
    late = now - timedelta(seconds=ack_seconds())
    answered = LeaseEvent.objects.filter(lease=OuterRef("pk"), kind__in=(DELIVERED, FAILED))
    handed = LeaseEvent.objects.filter(lease=OuterRef("pk"), kind=HANDED, at__lte=late)
    leases = (
        Lease.objects.filter(status__in=RUNNING_STATES, preempt_at__isnull=False)
        .filter(Exists(handed))
        .exclude(Exists(answered))
        .order_by("preempt_at", "pk")
        .values_list("pk", flat=True)[:batch]
    )
    recorded = 0
    for lease_id in leases:
        event_record(
            lease_id, kind=FAILED, at=now, data={"why": "no_ack", "seconds": ack_seconds()}
        )
        recorded += 1
    return recorded


def checkpoint_state(lease: Lease) -> dict | None:
    """What the lease page says of its checkpoint, from the timeline: ``sent`` only on an
    acknowledgement (the agent's or the backend's), ``failed`` with the reason, ``waiting``
    while the agent has not answered; None before any was sent."""
    events = [e for e in lease.events.all() if e.kind in (HANDED, SENT, DELIVERED, FAILED)]
    if not events:
        return None
    last = max(events, key=lambda e: (e.at, e.pk))
    if last.kind in (SENT, DELIVERED):
        return {"state": "sent", "at": last.at, "host": (last.data or {}).get("host", "")}
    if last.kind == FAILED:
        data = last.data or {}
        return {
            "state": "failed",
            "at": last.at,
            "host": data.get("host", ""),
            "seconds": data.get("seconds"),
            "detail": last.message,
        }
    return {"state": "waiting", "at": last.at, "host": ""}
