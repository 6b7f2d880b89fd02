"""What is free now: the catalogue's and the node pages' counts, and each card's holder's end.

The inventory says which cards exist and which can take a lease (``Card.objects.usable``,
the one "usable card" rule); the allocations say who holds them. This module joins the two
for reading. Every list costs a fixed number of queries however many cards exist: counts
are correlated subqueries (one SQL statement), never a query per row.
"""

from __future__ import annotations

from datetime import datetime

from django.db.models import (
    Count,
    DateTimeField,
    Exists,
    IntegerField,
    OuterRef,
    QuerySet,
    Subquery,
    Value,
)
from django.db.models.functions import Coalesce

from inventory.models import Card, CardModel, Node
from inventory.selectors import count_per_row
from leasing.models import Allocation


def usable_cards(start: datetime, end: datetime | None = None) -> QuerySet[Card]:
    """Cards a lease may be placed on over [start, end): the inventory's one rule
    (``Card.objects.usable``: healthy, on a node taking leases) less the cards a failed
    release may still hold (``Allocation.objects.held_back``). The planner's snapshot, the
    fast path and the counts here all start from it."""
    held_back = Allocation.objects.held_back().values("card_id")
    return Card.objects.usable(start, end).exclude(pk__in=held_back)


def held_back_allocations(card_ref: str = "pk") -> QuerySet[Allocation]:
    """The outer query's card (``OuterRef(card_ref)``) as the last card of a failed release."""
    return Allocation.objects.held_back().filter(card=OuterRef(card_ref))


def covering_allocations(now: datetime, card_ref: str = "pk") -> QuerySet[Allocation]:
    """Allocations of the outer query's card (``OuterRef(card_ref)``) whose period covers *now*."""
    return Allocation.objects.filter(card=OuterRef(card_ref), start_at__lte=now, end_at__gt=now)


def available_cards(now: datetime) -> QuerySet[Card]:
    """Cards a lease could get at *now*: healthy, on a node taking leases, not held by anyone."""
    return usable_cards(now).filter(~Exists(covering_allocations(now)))


def card_models_with_counts(now: datetime) -> QuerySet[CardModel]:
    """Card models annotated with ``total`` (cards not retired), ``available`` (free now) and
    ``unhealthy`` (kept out of placement by their readings: hot, or their node silent).

    Filter it with ``inventory.filters.CardModelFilterSet``.
    """
    return CardModel.objects.annotate(
        total=count_per_row(Card.objects.in_service(), "card_model"),
        available=count_per_row(available_cards(now), "card_model"),
        # Kept out by their readings alone (hot, node silent): back on their own.
        unhealthy=count_per_row(Card.objects.unhealthy(), "card_model"),
    )


def nodes_with_counts(now: datetime, *, card_model: CardModel | None = None) -> QuerySet[Node]:
    """Nodes with their region, annotated with card counts and the model they hold.

    ``cards_total`` counts cards not retired, ``cards_available`` those free now,
    ``model_name``/``model_slug`` name the model of the node's first card and
    ``model_kinds`` says how many different models the node holds. *region* is a region
    slug, *status* a ``Node.Status`` value; *card_model* keeps the nodes holding that
    model and restricts the counts to it.
    """
    in_service = Card.objects.in_service()
    free = available_cards(now)
    if card_model is not None:
        in_service = in_service.filter(card_model=card_model)
        free = free.filter(card_model=card_model)
    first_card = in_service.filter(node=OuterRef("pk")).order_by("index")
    nodes = Node.objects.select_related("region").annotate(
        cards_total=count_per_row(in_service, "node"),
        cards_available=count_per_row(free, "node"),
        model_name=Subquery(first_card.values("card_model__name")[:1]),
        model_slug=Subquery(first_card.values("card_model__slug")[:1]),
        model_kinds=Coalesce(
            Subquery(
                in_service.filter(node=OuterRef("pk"))
                .order_by()
                .values("node")
                .annotate(n=Count("card_model", distinct=True))
                .values("n"),
                output_field=IntegerField(),
            ),
            Value(0),
        ),
    )
    if card_model is not None:
        nodes = nodes.filter(Exists(in_service.filter(node=OuterRef("pk"))))
    return nodes


def cards_list(now: datetime) -> QuerySet[Card]:
    """Cards with their node, region and model, annotated with ``busy_until``: the end of the
    allocation covering *now*, or ``None`` when the card is not held. Filter it with
    ``inventory.filters.CardFilterSet``.
    """
    cards = Card.objects.select_related("node__region", "card_model").annotate(
        busy_until=Subquery(
            covering_allocations(now).order_by("-end_at").values("end_at")[:1],
            output_field=DateTimeField(),
        )
    )
    return cards


def node_cards_by_domain(node: Node, now: datetime) -> list[tuple[int, list[Card]]]:
    """The node's cards grouped by interconnect domain (its topology), in index order, each
    with ``busy_until``, ``is_free`` (free now: the one rule of ``available_cards``) and
    ``held_back_by`` (the lease whose failed release may still hold it, or None)."""
    domains: dict[int, list[Card]] = {}
    cards = (
        cards_list(now)
        .filter(node=node)
        .annotate(
            is_free=Exists(available_cards(now).filter(pk=OuterRef("pk"))),
            # The lease whose failed release may still hold the card (an operator resolves it).
            held_back_by=Subquery(held_back_allocations().values("lease_id")[:1]),
        )
    )
    for card in cards.order_by("interconnect_domain", "index"):
        domains.setdefault(card.interconnect_domain, []).append(card)
    return list(domains.items())
