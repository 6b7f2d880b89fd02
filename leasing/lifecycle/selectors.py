"""Reads of leases that are more than a ``.get``: who may see what, calendars, queues."""

from __future__ import annotations

from datetime import datetime, timedelta

from django.db.models import Prefetch, Q, QuerySet

from inventory.models import Card, CardModel
from leasing.choices import OPEN_STATES, LeaseStatus
from leasing.models import Allocation, Lease, LeaseEvent
from leasing.scheduler.snapshot import card_slots, timeline_for
from portal.models import Membership
from portal.permissions import is_finance, is_operator


def leases_visible_to(user) -> QuerySet[Lease]:
    """A member sees their own leases; a lead their team's; finance and operators all."""
    leases = Lease.objects.select_related("card_model", "team", "user")
    if is_operator(user) or is_finance(user):
        return leases
    led = Membership.objects.filter(user=user, role=Membership.Role.LEAD).values("team_id")
    return leases.filter(Q(user=user) | Q(team_id__in=led))


def my_leases(user, *, open_only: bool = False) -> QuerySet[Lease]:
    """The user's own leases, newest first, with their cards."""
    leases = (
        Lease.objects.filter(user=user)
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
    """1-based place of a queued lease among the waiting leases of its card model."""
    if lease.status != LeaseStatus.QUEUED:
        return None
    ahead = Lease.objects.filter(
        card_model_id=lease.card_model_id, status=LeaseStatus.QUEUED
    ).filter(
        Q(priority_rank__gt=lease.priority_rank)
        | Q(priority_rank=lease.priority_rank, submitted_at__lt=lease.submitted_at)
        | Q(priority_rank=lease.priority_rank, submitted_at=lease.submitted_at, pk__lt=lease.pk)
    )
    return ahead.count() + 1


def availability_calendar(
    card_model: CardModel, *, start: datetime, days: int = 7, step: timedelta = timedelta(hours=3)
) -> dict:
    """Free cards of a model per time slot (the fewest free at any moment in the slot).

    Counts bookings only (active and scheduled leases), not the queue's plans.
    """
    cards = card_slots(card_model.pk, now=start)
    timeline = timeline_for(card_model.pk, now=start)
    total_in_service = Card.objects.in_service().filter(card_model=card_model).count()
    slots = []
    t = start
    end = start + timedelta(days=days)
    while t < end:
        slot_end = t + step
        free = sum(
            1
            for c in cards
            if (c.usable_until is None or c.usable_until >= slot_end)
            and timeline.is_free(c.card_id, t, slot_end)
        )
        slots.append({"start": t, "end": slot_end, "free": free})
        t = slot_end
    return {
        "card_model": card_model,
        "total": total_in_service,
        "usable": len(cards),
        "slots": slots,
    }
