"""Load the planner's picture of card models from the database: usable cards, busy periods,
the queue. The queue pass reads it; every view of time reads the plan it stores
(``picture``).
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from inventory.models import Node
from inventory.requirements import NODE_KEYS, nodes_meeting
from leasing import statements
from leasing.choices import LeaseStatus
from leasing.models import Allocation, FairShare, Lease
from leasing.scheduler.availability import usable_cards
from leasing.scheduler.fairshare import NO_USE
from leasing.scheduler.planner import CardSlot, Request, Timeline
from leasing.scheduler.queueplan import Key, service_key
from leasing.scheduler.rows import EpochMicros, at, fetch, json_value, micros


def card_slots_of(card_model_ids: Iterable[int], *, now: datetime) -> dict[int, list[CardSlot]]:
    """Per card model, its cards that can take a lease (``availability.usable_cards``).

    A draining node's cards are usable only by leases that end before its drain time.
    """
    slots: dict[int, list[CardSlot]] = defaultdict(list)
    cards = usable_cards(now).filter(card_model_id__in=list(card_model_ids))
    # Integers only, so no per-value conversion (a 10,000-card pool is read for each advice:
    # bench/advisor_scale.py); the few draining nodes' drain times come separately.
    drains = dict(
        Node.objects.filter(
            status=Node.Status.DRAINING, pk__in=cards.values("node_id")
        ).values_list("pk", "drain_at")
    )
    rows = fetch(
        cards.values_list("pk", "card_model_id", "node_id", "interconnect_domain").order_by(
            "node_id", "index"
        )
    )
    for pk, model_id, node_id, domain in rows:
        slots[model_id].append(CardSlot(pk, node_id, domain, drains.get(node_id)))
    return slots


def card_slots(card_model_id: int, *, now: datetime) -> list[CardSlot]:
    """The cards of one model that can take a lease (see ``card_slots_of``)."""
    return card_slots_of([card_model_id], now=now).get(card_model_id, [])


def lease_card_slots(
    card_model_id: int, *, now: datetime, requirements: dict | None
) -> list[CardSlot]:
    """The cards of one model a lease with *requirements* may use (its nodes: region,
    network, stack version — ``inventory.requirements.nodes_meeting``)."""
    slots = card_slots(card_model_id, now=now)
    nodes = nodes_meeting(requirements)
    return slots if nodes is None else [s for s in slots if s.node_id in nodes]


def timelines_of(
    card_model_ids: Iterable[int],
    *,
    now: datetime,
    exclude_lease: int | None = None,
    ending_now: frozenset[int] = frozenset(),
) -> dict[int, Timeline]:
    """Per card model, the busy periods from now on of every card.

    A lease marked for preemption is busy only until its ``preempt_at`` (the end of its
    grace period); leases in *ending_now* are treated as if they ended now (what-if).
    """
    timelines: dict[int, Timeline] = defaultdict(Timeline)
    allocations = Allocation.objects.filter(
        card__card_model_id__in=list(card_model_ids), end_at__gt=now
    )
    if exclude_lease is not None:
        allocations = allocations.exclude(lease_id=exclude_lease)
    rows = fetch(
        allocations.values_list(
            "card_id",
            "card__card_model_id",
            EpochMicros("start_at"),
            EpochMicros("end_at"),
            "lease_id",
            EpochMicros("lease__preempt_at"),
            "lease__preempt_cards",
        )
    )
    now_us = micros(now)
    for card_id, model_id, start, end, lease_id, preempt_at, preempt_cards in rows:
        if lease_id in ending_now:
            continue
        # A partial preemption already ended the periods of the cards it takes back.
        if preempt_at is not None and preempt_cards is None:
            end = min(end, max(preempt_at, now_us))
        start = max(start, now_us)
        if end > start:
            timelines[model_id].add(card_id, at(start), at(end))
    return timelines


def timeline_for(
    card_model_id: int,
    *,
    now: datetime,
    exclude_lease: int | None = None,
    ending_now: frozenset[int] = frozenset(),
) -> Timeline:
    """The busy periods of one model's cards (see ``timelines_of``)."""
    return timelines_of(
        [card_model_id], now=now, exclude_lease=exclude_lease, ending_now=ending_now
    )[card_model_id]


@dataclass(frozen=True)
class Waiting:
    """A waiting lease: its place in the queue, what it asks, and what the last pass planned."""

    key: Key
    request: Request
    estimated_start: datetime | None
    planned_cards: tuple[int, ...] | None
    stall_reason: str
    start_policy: str = ""  # an off-peak start policy (``choices.StartPolicy``), or ""
    team_id: int | None = None  # its team (``headfirst``: whether one team waits)


def _waiting_values(leases):
    return leases.values_list(
        "pk",
        "card_model_id",
        "count",
        EpochMicros("duration", duration=True),
        EpochMicros("start_at"),
        "same_node",
        "priority_rank",
        EpochMicros("submitted_at"),
        EpochMicros("estimated_start"),
        "planned_cards",
        "stall_reason",
        "start_policy",
        "requirements",
        "team__fair_share__factor",
        "team_id",
    )


def _waiting_one(model: int, lease: int):
    return _waiting_values(
        Lease.objects.filter(card_model_id=model, pk=lease, status=LeaseStatus.QUEUED)
    )


def waiting_of(
    card_model_ids: Iterable[int],
    *,
    now: datetime,
    min_rank: int | None = None,
    lease_ids: Iterable[int] | None = None,
) -> dict[int, list[Waiting]]:
    """Per card model, its waiting leases in service order (``queueplan.service_key``:
    priority class, then the team's fair-share factor as last recomputed, then virtual
    submit time). With *min_rank*, only those of that class or
    above; with *lease_ids*, only those."""
    card_model_ids = list(card_model_ids)
    lease_ids = None if lease_ids is None else list(lease_ids)
    if min_rank is None and len(card_model_ids) == 1 and lease_ids and len(lease_ids) == 1:
        # a lease that just joined the queue (every request that meets one): built once
        rows = statements.rows(
            "snapshot.waiting_one", _waiting_one, model=card_model_ids[0], lease=lease_ids[0]
        )
    else:
        leases = Lease.objects.filter(card_model_id__in=card_model_ids, status=LeaseStatus.QUEUED)
        if min_rank is not None:
            leases = leases.filter(priority_rank__gte=min_rank)
        if lease_ids is not None:
            leases = leases.filter(pk__in=lease_ids)
        rows = fetch(_waiting_values(leases))
    queues: dict[int, list[Waiting]] = defaultdict(list)
    allowed: dict[str, frozenset[int] | None] = {}  # one look-up per distinct requirements
    now_us = micros(now)
    for (
        pk,
        model_id,
        count,
        duration,
        start,
        same_node,
        rank,
        submitted,
        eta,
        planned,
        stall,
        policy,
        wanted,
        fair,
        team,
    ) in rows:
        nodes = None
        if wanted is not None and wanted not in ("{}", {}):
            wanted = json_value(wanted)
            if wanted and NODE_KEYS.intersection(wanted):
                text = json.dumps(wanted, sort_keys=True)
                if text not in allowed:
                    allowed[text] = nodes_meeting(wanted)
                nodes = allowed[text]
        duration = timedelta(microseconds=duration)
        key = service_key(
            rank=rank, submitted_at=at(submitted), duration=duration, count=count, lease_id=pk,
            fair=NO_USE if fair is None else fair,
        )  # fmt: skip
        request = Request(pk, count, duration, at(max(start, now_us)), bool(same_node), nodes)
        planned = None if planned is None else tuple(json_value(planned))
        queues[model_id].append(Waiting(key, request, at(eta), planned, stall, policy, team))
    for queue in queues.values():
        queue.sort(key=lambda w: w.key)
    return queues


def fair_factor(team_id: int | None) -> float:
    """The team's fair-share factor as last recomputed (``fairshare.NO_USE`` without one)."""
    if team_id is None:
        return NO_USE
    found = FairShare.objects.filter(team_id=team_id).values_list("factor", flat=True).first()
    return NO_USE if found is None else found


def work_ahead(team_ids) -> dict[int, float]:
    """Each team's work ahead as last recomputed (``fairshare.ahead``); a team never
    recomputed is left out (it has none)."""
    ids = {t for t in team_ids if t is not None}
    if not ids:
        return {}
    return dict(FairShare.objects.filter(team_id__in=ids).values_list("team_id", "ahead"))


def team_work_ahead(team_id: int | None) -> float:
    """One team's work ahead (``work_ahead``; 0 for none or a team never recomputed)."""
    return work_ahead([team_id]).get(team_id, 0.0)


def work_ahead_of_leases(lease_ids) -> dict[int, float]:
    """The work ahead of each lease's team (``work_ahead``), by lease id, for the leases whose
    team has some (none where no team has: one small query, as with one team)."""
    ahead = dict(FairShare.objects.filter(ahead__gt=0).values_list("team_id", "ahead"))
    ids = list(lease_ids)
    if not ahead or not ids:
        return {}
    rows = Lease.objects.filter(pk__in=ids, team_id__in=list(ahead)).values_list("pk", "team_id")
    return {pk: ahead[team_id] for pk, team_id in rows}


def waiting_for(card_model_id: int, *, now: datetime, min_rank: int | None = None) -> list[Waiting]:
    """The waiting leases of one model in service order (see ``waiting_of``)."""
    return waiting_of([card_model_id], now=now, min_rank=min_rank).get(card_model_id, [])


def queued_requests(
    card_model_id: int, *, now: datetime, min_rank: int | None = None
) -> list[Request]:
    """The waiting leases of one model in service order (see ``waiting_of``)."""
    return [w.request for w in waiting_for(card_model_id, now=now, min_rank=min_rank)]
