"""Reads of leases that are more than a ``.get``: who may see what, calendars, queues."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db.models import F, OuterRef, Prefetch, Q, QuerySet, Subquery, Value
from django.db.models.functions import Coalesce
from django.utils import timezone

from inventory.models import Card, CardModel, Node
from leasing.choices import (
    ENDING_STATES,
    HOLDING_STATES,
    OPEN_STATES,
    RUNNING_STATES,
    TERMINAL_STATES,
    WAITING_STATES,
    LeaseStatus,
    PreemptWhy,
)
from leasing.models import Allocation, Lease, LeaseChange, LeaseEvent
from leasing.notify.messages import stall_text
from leasing.scheduler.eta import lease_told_start
from leasing.scheduler.picture import PLANNED, model_picture
from leasing.scheduler.snapshot import card_slots, team_work_ahead, waiting_for, work_ahead
from portal.permissions import is_finance, is_operator, lead_memberships, teams_led_by

# --- what a lease shows: one answer for the page, the list and the API -------------------

# Where the lease holds a card on a draining node past the drain time: the earliest such drain.
_DRAINS = Allocation.objects.filter(
    lease=OuterRef("pk"),
    card__node__status=Node.Status.DRAINING,
    card__node__drain_at__isnull=False,
    end_at__gt=F("card__node__drain_at"),
).order_by("card__node__drain_at", "card__node__hostname")
DRAIN_ANNOTATIONS = {
    "node_drain_at": Subquery(_DRAINS.values("card__node__drain_at")[:1]),
    "node_drain_host": Subquery(_DRAINS.values("card__node__hostname")[:1]),
}


def with_drains(leases: QuerySet[Lease]) -> QuerySet[Lease]:
    """The leases with the drain that cuts each short, if any (read by ``lease_truth``)."""
    return leases.annotate(**DRAIN_ANNOTATIONS)


@dataclass(frozen=True)
class LeaseTruth:
    """What a lease shows, wherever it is shown: when it starts and ends as things stand.

    ``end`` is the effective end: the booked end, or earlier where a drain or a preemption
    cuts the lease short (``cut`` says which, ``cut_node`` where); for a waiting lease it is
    its (estimated) start + duration, never before the start; None when the start is unknown.
    ``cards_lost`` cards are taken back at ``cards_lost_at`` by a partial preemption;
    ``cut_why`` says why a preemption takes them (``PreemptWhy``).
    ``stall``/``stall_why``/``stall_todo``: why a waiting lease cannot start, and what to do.
    ``planned``: for a queued lease told a later start than its place in the plan, that place
    (the start told leaves room for work that may still pass it, ``scheduler.eta``).
    """

    start: datetime | None
    end: datetime | None
    booked_end: datetime
    cut: str = ""
    cut_node: str = ""
    cut_why: str = ""  # a preemption's reason (``PreemptWhy``), whole or partial
    cards_lost: int = 0
    cards_lost_at: datetime | None = None
    stall: str = ""
    stall_why: str = ""
    stall_todo: str = ""
    planned: datetime | None = None

    @property
    def ends_early(self) -> bool:
        return bool(self.cut)


def _drains_loaded(lease: Lease) -> tuple[datetime | None, str] | None:
    """``DRAIN_ANNOTATIONS`` read from the lease's allocations when they are prefetched with
    their card's node (the API's answer to a request has them): the same rule, no query.
    None when they are not loaded."""
    allocations = getattr(lease, "_prefetched_objects_cache", {}).get("allocations")
    if allocations is None or not all(
        Allocation.card.is_cached(a) and Card.node.is_cached(a.card) for a in allocations
    ):
        return None
    drains = sorted(
        (a.card.node.drain_at, a.card.node.hostname)
        for a in allocations
        if a.card.node.status == Node.Status.DRAINING
        and a.card.node.drain_at is not None
        and a.end_at > a.card.node.drain_at
    )
    return drains[0] if drains else (None, "")


def _drain_of(lease: Lease) -> tuple[datetime | None, str]:
    if hasattr(lease, "node_drain_at"):
        return lease.node_drain_at, lease.node_drain_host or ""
    loaded = _drains_loaded(lease)
    if loaded is not None:
        return loaded
    row = (
        Lease.objects.filter(pk=lease.pk)
        .annotate(**DRAIN_ANNOTATIONS)
        .values_list("node_drain_at", "node_drain_host")
        .first()
    )
    return row or (None, "")


def lease_truth(lease: Lease, *, now: datetime | None = None) -> LeaseTruth:
    """The one rule for what a lease shows (page, list, API): see ``LeaseTruth``."""
    now = now or timezone.now()
    if lease.status in WAITING_STATES:
        if lease.status == LeaseStatus.QUEUED:
            # the plan's start plus room for work that may still pass it (scheduler.eta)
            start = lease_told_start(lease, now=now, ahead=_work_ahead(lease)) or (
                lease.start_at if lease.start_at > now else None
            )
        else:
            start = max(lease.start_at, now)
        why = todo = ""
        if lease.status == LeaseStatus.QUEUED and lease.stall_reason:
            start = None
            why, todo = stall_text(lease.stall_reason, same_node=lease.same_node)
        planned = lease.estimated_start if lease.status == LeaseStatus.QUEUED else None
        return LeaseTruth(
            start=start,
            end=start + lease.duration if start is not None else None,
            booked_end=lease.end_at,
            stall=lease.stall_reason if why else "",
            stall_why=why,
            stall_todo=todo,
            planned=planned if start is not None and planned and planned < start else None,
        )
    if lease.status in TERMINAL_STATES or lease.status in ENDING_STATES:
        return LeaseTruth(
            start=lease.start_at, end=lease.ended_at or lease.end_at, booked_end=lease.end_at
        )
    end, cut, node = lease.end_at, "", ""
    drain_at, drain_host = _drain_of(lease)
    if drain_at is not None and drain_at < end:
        end, cut, node = max(drain_at, lease.start_at), "drain", drain_host
    lost, lost_at, why = 0, None, ""
    if lease.preempt_at is not None and lease.status in RUNNING_STATES:
        why = lease.preempt_why or PreemptWhy.PRIORITY
        if lease.preempt_cards is None and lease.preempt_at < end:
            end, cut, node = lease.preempt_at, "preemption", ""
        elif lease.preempt_cards:
            lost, lost_at = lease.preempt_cards, lease.preempt_at
    return LeaseTruth(
        start=lease.start_at,
        end=end,
        booked_end=lease.end_at,
        cut=cut,
        cut_node=node,
        cut_why=why if (cut == "preemption" or lost) else "",
        cards_lost=lost,
        cards_lost_at=lost_at,
    )


def _work_ahead(lease: Lease) -> float:
    """The work ahead of the lease's team (``scheduler.eta``): read once for a list
    (``with_truth``), else now."""
    ahead = getattr(lease, "work_ahead", None)
    if ahead is None:
        ahead = team_work_ahead(lease.team_id)
    return ahead


def with_truth(leases) -> list[Lease]:
    """The leases as a list, each with its ``truth`` (``lease_truth``) for the templates."""
    now = timezone.now()
    if isinstance(leases, QuerySet):  # each team's work ahead read with the leases
        leases = leases.annotate(work_ahead=Coalesce("team__fair_share__ahead", Value(0.0)))
    out = list(leases)
    queued = [lease for lease in out if getattr(lease, "work_ahead", None) is None]
    ahead = work_ahead(lease.team_id for lease in queued) if queued else {}
    for lease in queued:
        lease.work_ahead = ahead.get(lease.team_id, 0.0)
    for lease in out:
        lease.truth = lease_truth(lease, now=now)
    return out


# --- who sees which leases -----------------------------------------------------------------


def leases_visible_to(user) -> QuerySet[Lease]:
    """A member sees their own leases; a lead their team's; finance and operators all."""
    return with_drains(
        Lease.objects.visible_to(user).select_related(
            # the profile: the access line's account in "profile" mode (workbench.access)
            "card_model",
            "team",
            "user__profile",
            "environment",
        )
    )


def with_pending_change(leases: QuerySet[Lease]) -> QuerySet[Lease]:
    """Leases with the change waiting for the lead on ``pending_changes`` (one query for all)."""
    return leases.prefetch_related(
        Prefetch(
            "changes",
            queryset=LeaseChange.objects.filter(status=LeaseChange.Status.PENDING).select_related(
                "card_model", "requested_by", "decided_by"
            ),
            to_attr="pending_changes",
        )
    )


def changes_visible_to(user) -> QuerySet[LeaseChange]:
    """Lease changes *user* may see: on their own leases, their teams' (leads), all (operators)."""
    changes = LeaseChange.objects.select_related(
        "lease__team",
        "lease__user",
        "lease__card_model",
        "card_model",
        "requested_by",
        "decided_by",
    )
    if is_operator(user):
        return changes
    return changes.filter(Q(lease__user=user) | Q(lease__team_id__in=teams_led_by(user)))


def latest_card_model_id(user) -> int | None:
    """The card model of the user's most recent lease (the calendar's and timeline's default)."""
    return (
        Lease.objects.filter(user=user)
        .order_by("-submitted_at", "-pk")
        .values_list("card_model_id", flat=True)
        .first()
    )


def my_leases(user, *, open_only: bool = False) -> QuerySet[Lease]:
    """The user's own leases, newest first, with their cards."""
    leases = (
        with_drains(Lease.objects.filter(user=user))
        .select_related("card_model", "team")
        .prefetch_related(
            Prefetch(
                "allocations",
                queryset=Allocation.objects.select_related("card__node").order_by("card__index"),
            )
        )
    )
    if open_only:
        leases = leases.filter(status__in=OPEN_STATES)
    return leases


LIST_SCOPES = ("mine", "team")


def list_scopes(user) -> tuple[str, ...]:
    """The lease list's switch: "mine" for everyone; "team" (every lease the user may see:
    their teams' as a lead, all as finance or an operator) where that is more."""
    if is_operator(user) or is_finance(user):
        return LIST_SCOPES
    if lead_memberships(user).exists():
        return LIST_SCOPES
    return ("mine",)


def leases_in_scope(user, scope: str) -> QuerySet[Lease]:
    """The lease list for *scope* ("mine" or "team"), newest first, with their cards."""
    if scope == "team" and scope in list_scopes(user):
        return (
            leases_visible_to(user)
            .select_related("user")
            .prefetch_related(
                Prefetch(
                    "allocations",
                    queryset=Allocation.objects.select_related("card__node").order_by(
                        "card__index"
                    ),
                )
            )
            .order_by("-submitted_at", "-pk")
        )
    return my_leases(user)


def lease_detail(lease_id: int, user) -> Lease | None:
    return (
        leases_visible_to(user)
        .prefetch_related(
            Prefetch(
                "allocations",
                queryset=Allocation.objects.select_related("card__node").order_by(
                    "card__node__hostname", "card__index"
                ),
            ),
            Prefetch(
                "events", queryset=LeaseEvent.objects.select_related("actor").order_by("at", "pk")
            ),
        )
        .filter(pk=lease_id)
        .first()
    )


def releases_failed() -> QuerySet[Lease]:
    """Leases whose release the backend failed to do, oldest first, with the cards they may
    still hold: what operators resolve (``lifecycle.releases``)."""
    return (
        Lease.objects.filter(status=LeaseStatus.RELEASE_FAILED)
        .select_related("user", "team", "card_model")
        .prefetch_related(
            Prefetch(
                "allocations",
                queryset=Allocation.objects.held().select_related("card__node"),
                to_attr="held_cards",
            )
        )
        .order_by("status_changed_at", "pk")
    )


def queue_position(lease: Lease) -> int | None:
    """1-based place of a queued lease among the waiting leases of its card model, in the
    order the queue serves them (``scheduler.queueplan.service_key``)."""
    if lease.status != LeaseStatus.QUEUED:
        return None
    queue = waiting_for(lease.card_model_id, now=timezone.now(), min_rank=lease.priority_rank)
    ids = [w.request.lease_id for w in queue]
    return ids.index(lease.pk) + 1 if lease.pk in ids else None


def availability_calendar(
    card_model: CardModel, *, start: datetime, days: int = 7, step: timedelta = timedelta(hours=3)
) -> dict:
    """Free cards of a model per time slot (the fewest free at any moment in the slot), and
    how many of the others a waiting request's plan holds (``planned``), read from the
    model's one picture of the future (``scheduler.picture``): leases held, reservations,
    waiting leases' planned cards, maintenance and unhealthy cards."""
    end = start + timedelta(days=days)
    picture = model_picture(card_model.pk, start=start, end=end, now=max(timezone.now(), start))
    usable = len(card_slots(card_model.pk, now=max(timezone.now(), start)))
    slots = []
    t = start
    while t < end:
        slot_end = t + step
        kinds = picture.kinds_at(t, slot_end)
        slots.append(
            {
                "start": t,
                "end": slot_end,
                "free": picture.free_count(t, slot_end),
                "planned": kinds.get(PLANNED, 0),
            }
        )
        t = slot_end
    return {
        "card_model": card_model,
        "total": len(picture.cards),
        "usable": usable,
        "slots": slots,
        "re_estimating": picture.re_estimating,
    }


def card_holders(node_id: int, now: datetime) -> dict[int, Lease]:
    """The lease holding each card of a node now (card id → lease with user and team): the
    node page's "who holds which card". One query."""
    held = (
        Allocation.objects.filter(
            card__node_id=node_id,
            start_at__lte=now,
            end_at__gt=now,
            lease__status__in=HOLDING_STATES,
        )
        .select_related("lease__user", "lease__team")
        .order_by("card_id", "start_at")
    )
    return {a.card_id: a.lease for a in held}
