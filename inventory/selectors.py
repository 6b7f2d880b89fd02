"""Reads of the inventory: card models with their counts, nodes, cards and what is free now.

Every list here costs a fixed number of queries however many cards exist: counts are
correlated subqueries (one SQL statement), never a query per row.
"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal

from django.db.models import (
    Count,
    DateTimeField,
    Exists,
    IntegerField,
    OuterRef,
    Q,
    QuerySet,
    Subquery,
    Value,
)
from django.db.models.functions import Coalesce

from inventory.models import Card, CardModel, InterconnectKind, Node, Precision, Vendor
from leasing.models import Allocation

# The spec-sheet field that holds the peak figure for each precision.
PRECISION_FIELDS: dict[str, str] = {
    Precision.FP64: "fp64_tflops",
    Precision.FP32: "fp32_tflops",
    Precision.TF32: "tf32_tflops",
    Precision.FP16: "fp16_tflops",
    Precision.BF16: "bf16_tflops",
    Precision.FP8: "fp8_tflops",
    Precision.INT8: "int8_tops",
}


def covering_allocations(now: datetime, card_ref: str = "pk") -> QuerySet[Allocation]:
    """Allocations of the outer query's card (``OuterRef(card_ref)``) whose period covers *now*."""
    return Allocation.objects.filter(card=OuterRef(card_ref), start_at__lte=now, end_at__gt=now)


def node_takes_leases_q(now: datetime, prefix: str = "node__") -> Q:
    """Nodes that can hand out cards now: active, or draining with the drain still ahead."""
    return Q(**{f"{prefix}status": Node.Status.ACTIVE}) | Q(
        **{f"{prefix}status": Node.Status.DRAINING, f"{prefix}drain_at__gt": now}
    )


def available_cards(now: datetime) -> QuerySet[Card]:
    """Cards a lease could get at *now*: healthy, on a node taking leases, not held by anyone."""
    return (
        Card.objects.filter(status=Card.Status.OK)
        .filter(node_takes_leases_q(now))
        .filter(~Exists(covering_allocations(now)))
    )


def count_per_row(rows: QuerySet, outer_field: str) -> Coalesce:
    """Count of *rows* whose ``outer_field`` is the outer row, as one correlated subquery."""
    counted = (
        rows.filter(**{outer_field: OuterRef("pk")})
        .order_by()
        .values(outer_field)
        .annotate(n=Count("pk"))
        .values("n")
    )
    return Coalesce(Subquery(counted, output_field=IntegerField()), Value(0))


def card_models_with_counts(
    now: datetime,
    *,
    vendor: str | None = None,
    min_memory_gb: Decimal | int | None = None,
    precision: str | None = None,
    interconnect: str | None = None,
) -> QuerySet[CardModel]:
    """Card models annotated with ``total`` (cards not retired) and ``available`` (free now).

    Filters: *vendor* (a ``Vendor`` value), *min_memory_gb*, *precision* (a ``Precision``
    value; keeps models whose spec sheet lists a figure for it) and *interconnect* (an
    ``InterconnectKind`` value). An unknown choice raises ``ValueError``.
    """
    models = CardModel.objects.annotate(
        total=count_per_row(Card.objects.exclude(status=Card.Status.RETIRED), "card_model"),
        available=count_per_row(available_cards(now), "card_model"),
    )
    if vendor:
        if vendor not in Vendor.values:
            raise ValueError(f"unknown vendor {vendor!r}")
        models = models.filter(vendor=vendor)
    if min_memory_gb is not None:
        models = models.filter(memory_gb__gte=min_memory_gb)
    if precision:
        if precision not in PRECISION_FIELDS:
            raise ValueError(f"unknown precision {precision!r}")
        models = models.filter(**{f"{PRECISION_FIELDS[precision]}__isnull": False})
    if interconnect:
        if interconnect not in InterconnectKind.values:
            raise ValueError(f"unknown interconnect {interconnect!r}")
        models = models.filter(interconnect_kind=interconnect)
    return models


def nodes_with_counts(
    now: datetime,
    *,
    region: str | None = None,
    status: str | None = None,
    card_model: CardModel | None = None,
) -> QuerySet[Node]:
    """Nodes with their region, annotated with card counts and the model they hold.

    ``cards_total`` counts cards not retired, ``cards_available`` those free now,
    ``model_name``/``model_slug`` name the model of the node's first card and
    ``model_kinds`` says how many different models the node holds. *region* is a region
    slug, *status* a ``Node.Status`` value; *card_model* keeps the nodes holding that
    model and restricts the counts to it.
    """
    in_service = Card.objects.exclude(status=Card.Status.RETIRED)
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
    if region:
        nodes = nodes.filter(region__slug=region)
    if status:
        nodes = nodes.filter(status=status)
    if card_model is not None:
        nodes = nodes.filter(Exists(in_service.filter(node=OuterRef("pk"))))
    return nodes


def cards_list(
    now: datetime,
    *,
    model: str | None = None,
    node: str | None = None,
    status: str | None = None,
    region: str | None = None,
) -> QuerySet[Card]:
    """Cards with their node, region and model, annotated with ``busy_until``.

    ``busy_until`` is the end of the allocation covering *now*, or ``None`` when the card
    is not held. Filters: *model* (card model slug), *node* (hostname), *status*
    (``Card.Status`` value), *region* (region slug).
    """
    cards = Card.objects.select_related("node__region", "card_model").annotate(
        busy_until=Subquery(
            covering_allocations(now).order_by("-end_at").values("end_at")[:1],
            output_field=DateTimeField(),
        )
    )
    if model:
        cards = cards.filter(card_model__slug=model)
    if node:
        cards = cards.filter(node__hostname=node)
    if status:
        cards = cards.filter(status=status)
    if region:
        cards = cards.filter(node__region__slug=region)
    return cards


def node_cards_by_domain(node: Node, now: datetime) -> list[tuple[int, list[Card]]]:
    """The node's cards grouped by interconnect domain (its topology), in index order."""
    domains: dict[int, list[Card]] = {}
    for card in cards_list(now).filter(node=node).order_by("interconnect_domain", "index"):
        domains.setdefault(card.interconnect_domain, []).append(card)
    return list(domains.items())
