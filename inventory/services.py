"""Writes to the inventory: importing nodes and cards from an operator's files."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from django.db import connection, transaction
from django.utils import timezone

from inventory.importers import (
    CardSpec,
    NodeSpec,
    RawRow,
    RowError,
    card_uuid,
    normalize_rows,
)
from inventory.importers_checks import field_errors
from inventory.models import Card, CardModel, Node, Region

# Fields of Node an import may set; the rest (status, drain_at) belong to the operator.
_NODE_FIELDS = (
    "network_kind",
    "network_gbps",
    "cpu_cores",
    "memory_gb",
    "driver_version",
    "external_id",
)
# Keeps every IN (...) list well under SQLite's limit on query parameters.
_CHUNK = 500

T = TypeVar("T")


class InventoryImportError(Exception):
    """The input has problems; nothing was written. ``errors`` lists every one with its line."""

    def __init__(self, errors: Sequence[RowError]):
        self.errors = sorted(errors, key=lambda e: e.line)
        super().__init__(f"{len(self.errors)} problem(s) in the input")


@dataclass
class ImportResult:
    """What an import did (or, with ``dry_run``, would do)."""

    source_format: str
    dry_run: bool
    nodes_created: int = 0
    nodes_updated: int = 0
    nodes_unchanged: int = 0
    cards_created: int = 0
    cards_updated: int = 0
    cards_removed: int = 0
    rows_skipped: int = 0
    regions_created: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return bool(
            self.nodes_created
            or self.nodes_updated
            or self.cards_created
            or self.cards_updated
            or self.cards_removed
            or self.regions_created
        )

    def summary(self) -> str:
        """One line for people: ``nodes: 0 created, 0 updated, 1814 unchanged; cards: ...``."""
        text = (
            f"nodes: {self.nodes_created} created, {self.nodes_updated} updated, "
            f"{self.nodes_unchanged} unchanged; cards: {self.cards_created} created, "
            f"{self.cards_updated} updated, {self.cards_removed} removed"
        )
        if self.rows_skipped:
            text += f"; {self.rows_skipped} row(s) skipped"
        return text


@dataclass
class _NodeChange:
    """An existing node and what the import changes on it."""

    node: Node
    fields: set[str]
    new_region: str | None = None
    cards_changed: bool = False
    extra: list[Card] = field(default_factory=list)


@dataclass
class _Plan:
    """The writes an import needs, worked out before any of them is made."""

    result: ImportResult
    errors: list[RowError]
    new_regions: list[str] = field(default_factory=list)
    new_nodes: list[tuple[NodeSpec, Node]] = field(default_factory=list)
    existing: list[_NodeChange] = field(default_factory=list)
    changed_nodes: list[_NodeChange] = field(default_factory=list)
    node_fields: set[str] = field(default_factory=set)
    # Cards of new nodes wait for the node's primary key, so they are kept with the hostname.
    new_cards: list[tuple[str, Card]] = field(default_factory=list)
    changed_cards: list[Card] = field(default_factory=list)
    card_fields: set[str] = field(default_factory=set)
    removed_cards: list[int] = field(default_factory=list)


def inventory_import(
    *,
    rows: Iterable[RawRow],
    source_format: str,
    columns: Sequence[str] | None = None,
    mapping: Mapping[str, str] | None = None,
    default_region: str | None = None,
    skip_types: Iterable[str] = (),
    dry_run: bool = False,
) -> ImportResult:
    """Create or update nodes and their cards from *rows*, all or nothing.

    Every row is checked first (values, duplicate hostnames, card models and UUIDs against
    the database) and every problem is collected; if there is any, InventoryImportError is
    raised and nothing is written. Otherwise the changes are made in one transaction with
    bulk queries (no query per node or card). Importing the same rows again changes nothing.

    Nodes keep fields the rows do not give, and labels are merged (imported keys win). When
    a node has fewer cards than before, the extra cards are deleted unless they have
    allocations; those are kept and listed in ``warnings``. Regions that do not exist yet
    are created. With *dry_run*, the result says what would change and nothing is written.
    """
    normalized = normalize_rows(
        rows=rows,
        source_format=source_format,
        columns=columns,
        mapping=mapping,
        default_region=default_region,
        skip_types=skip_types,
    )
    result = ImportResult(
        source_format=source_format, dry_run=dry_run, rows_skipped=normalized.skipped
    )
    with transaction.atomic():
        plan = _plan(normalized.nodes, result, list(normalized.errors))
        if plan.errors:
            raise InventoryImportError(plan.errors)
        if not dry_run:
            _apply(plan)
    if not dry_run:
        statistics_refresh()
    return result


def statistics_refresh() -> None:
    """Refresh PostgreSQL's planner statistics of the inventory after a bulk write. Until
    autovacuum gets to it, the planner believes a card model has one card and plans the
    placement queries for that: 90 ms instead of 2 for a request (docs/performance.md)."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE inventory_node, inventory_card")


def _chunks(items: Sequence[T]) -> Iterator[Sequence[T]]:
    for start in range(0, len(items), _CHUNK):
        yield items[start : start + _CHUNK]


def _plan(specs: list[NodeSpec], result: ImportResult, errors: list[RowError]) -> _Plan:
    plan = _Plan(result=result, errors=errors)
    regions = _existing_regions({spec.region for spec in specs})
    plan.new_regions = sorted({spec.region for spec in specs} - regions.keys())
    result.regions_created = list(plan.new_regions)

    models = dict(
        CardModel.objects.filter(
            slug__in={c.card_model for s in specs for c in s.cards}
        ).values_list("slug", "pk")
    )
    nodes = _existing_nodes([spec.hostname for spec in specs])
    cards = _existing_cards([node.pk for node in nodes.values()])
    _check_uuids(specs, nodes, cards, errors)

    for spec in specs:
        unknown = sorted({c.card_model for c in spec.cards} - models.keys())
        if unknown:
            errors.extend(
                RowError(spec.line, f"card model {slug!r} does not exist") for slug in unknown
            )
            continue
        node = nodes.get(spec.hostname)
        if node is None:
            _plan_new_node(plan, spec, models)
        else:
            _plan_existing_node(plan, spec, node, cards.get(node.pk, {}), models)
    _plan_removals(plan)
    return plan


def _existing_regions(slugs: set[str]) -> dict[str, int]:
    return dict(Region.objects.filter(slug__in=slugs).values_list("slug", "pk"))


def _existing_nodes(hostnames: list[str]) -> dict[str, Node]:
    nodes: dict[str, Node] = {}
    for chunk in _chunks(hostnames):
        nodes.update(
            (n.hostname, n)
            for n in Node.objects.filter(hostname__in=chunk).select_related("region")
        )
    return nodes


def _existing_cards(node_ids: list[int]) -> dict[int, dict[int, Card]]:
    cards: dict[int, dict[int, Card]] = {}
    for chunk in _chunks(node_ids):
        for card in Card.objects.filter(node_id__in=chunk):
            cards.setdefault(card.node_id, {})[card.index] = card
    return cards


def _wanted_uuid(spec: NodeSpec, card: CardSpec, existing: Card | None) -> str:
    """The file's UUID; else the card's current one; else one derived from host and index."""
    if card.uuid:
        return card.uuid
    if existing is not None:
        return existing.uuid
    return card_uuid(spec.hostname, card.index)


def _check_uuids(
    specs: list[NodeSpec],
    nodes: dict[str, Node],
    cards: dict[int, dict[int, Card]],
    errors: list[RowError],
) -> None:
    """Every card UUID the import would write must be unique in the file and the database."""
    owner: dict[str, tuple[str, int, int]] = {}  # uuid -> (hostname, index, line)
    fresh: list[str] = []  # UUIDs no card has yet at its (node, index): the database may hold them
    for spec in specs:
        node = nodes.get(spec.hostname)
        on_node = cards.get(node.pk, {}) if node else {}
        for card in spec.cards:
            existing = on_node.get(card.index)
            uuid = _wanted_uuid(spec, card, existing)
            too_long = field_errors(Card, "uuid", uuid, "card UUID")
            if too_long:  # derived from a long hostname: HOSTNAME-gpuINDEX
                errors.extend(RowError(spec.line, message) for message in too_long)
                continue
            if uuid in owner:
                host, index, line = owner[uuid]
                errors.append(
                    RowError(
                        spec.line,
                        f"card UUID {uuid!r} is also given to {host}#{index} (line {line})",
                    )
                )
                continue
            owner[uuid] = (spec.hostname, card.index, spec.line)
            if existing is None or existing.uuid != uuid:
                fresh.append(uuid)
    for chunk in _chunks(fresh):
        taken = Card.objects.filter(uuid__in=chunk).values_list("uuid", "node__hostname", "index")
        for uuid, host, index in taken:
            wanted_host, wanted_index, line = owner[uuid]
            if (host, index) != (wanted_host, wanted_index):
                errors.append(
                    RowError(line, f"card UUID {uuid!r} already belongs to {host}#{index}")
                )


def _plan_new_node(plan: _Plan, spec: NodeSpec, models: dict[str, int]) -> None:
    node = Node(
        hostname=spec.hostname,
        labels=dict(spec.labels),
        software_versions=dict(spec.software_versions),
    )
    for name in _NODE_FIELDS:
        value = getattr(spec, name)
        if value is not None:
            setattr(node, name, value)
    plan.new_nodes.append((spec, node))
    plan.result.nodes_created += 1
    for card in spec.cards:
        plan.new_cards.append(
            (
                spec.hostname,
                Card(
                    card_model_id=models[card.card_model],
                    index=card.index,
                    uuid=_wanted_uuid(spec, card, None),
                    interconnect_domain=card.interconnect_domain,
                ),
            )
        )
    plan.result.cards_created += len(spec.cards)


def _plan_existing_node(
    plan: _Plan,
    spec: NodeSpec,
    node: Node,
    on_node: dict[int, Card],
    models: dict[str, int],
) -> None:
    change = _NodeChange(node=node, fields=_update_node_fields(node, spec))
    if "region" in change.fields:
        change.new_region = spec.region
    for card in spec.cards:
        existing = on_node.get(card.index)
        wanted: dict[str, Any] = {
            "card_model_id": models[card.card_model],
            "interconnect_domain": card.interconnect_domain,
            "uuid": _wanted_uuid(spec, card, existing),
        }
        if existing is None:
            plan.new_cards.append((spec.hostname, Card(node=node, index=card.index, **wanted)))
            plan.result.cards_created += 1
            change.cards_changed = True
            continue
        diff = {k: v for k, v in wanted.items() if getattr(existing, k) != v}
        if diff:
            for name, value in diff.items():
                setattr(existing, name, value)
            plan.changed_cards.append(existing)
            plan.card_fields.update(name.removesuffix("_id") for name in diff)
            plan.result.cards_updated += 1
            change.cards_changed = True
    wanted_indexes = {card.index for card in spec.cards}
    change.extra = [card for index, card in sorted(on_node.items()) if index not in wanted_indexes]
    plan.existing.append(change)


def _update_node_fields(node: Node, spec: NodeSpec) -> set[str]:
    """Set on *node* what the spec gives and differs; return the names of changed fields."""
    changed: set[str] = set()
    if node.region.slug != spec.region:
        # The pk is set in _apply: the region may be one this import creates.
        changed.add("region")
    for name in _NODE_FIELDS:
        value = getattr(spec, name)
        if value is not None and getattr(node, name) != value:
            setattr(node, name, value)
            changed.add(name)
    for name in ("labels", "software_versions"):
        current = getattr(node, name) or {}
        merged = {**current, **getattr(spec, name)}
        if merged != current:
            setattr(node, name, merged)
            changed.add(name)
    return changed


def _plan_removals(plan: _Plan) -> None:
    """Cards beyond the file's count go, unless leases ever held them; then count the nodes."""
    extra_ids = [card.pk for change in plan.existing for card in change.extra]
    held: set[int] = set()
    for chunk in _chunks(extra_ids):
        held.update(
            Card.objects.filter(pk__in=chunk, allocations__isnull=False).values_list(
                "pk", flat=True
            )
        )
    for change in plan.existing:
        removed = [card for card in change.extra if card.pk not in held]
        kept = [card for card in change.extra if card.pk in held]
        plan.removed_cards.extend(card.pk for card in removed)
        plan.result.cards_removed += len(removed)
        if kept:
            indexes = ", ".join(f"#{card.index}" for card in kept)
            plan.result.warnings.append(
                f"{change.node.hostname}: card(s) {indexes} are no longer in the file but have "
                "allocations, so they were kept; retire them in the admin when their leases end"
            )
        if change.fields or change.cards_changed or removed:
            plan.changed_nodes.append(change)
            plan.node_fields.update(change.fields)
            plan.result.nodes_updated += 1
        else:
            plan.result.nodes_unchanged += 1


def _apply(plan: _Plan) -> None:
    """Make the planned writes: a handful of bulk queries whatever the number of rows."""
    now = timezone.now()
    if plan.new_regions:
        Region.objects.bulk_create(Region(slug=slug, name=slug) for slug in plan.new_regions)
    region_ids = _existing_regions(
        {spec.region for spec, _ in plan.new_nodes}
        | {change.new_region for change in plan.changed_nodes if change.new_region}
    )

    for spec, node in plan.new_nodes:
        node.region_id = region_ids[spec.region]
    Node.objects.bulk_create([node for _, node in plan.new_nodes])
    node_ids = {node.hostname: node.pk for _, node in plan.new_nodes}
    if any(pk is None for pk in node_ids.values()):
        # Backends that cannot return keys from a bulk insert: read them back.
        node_ids = {host: node.pk for host, node in _existing_nodes(list(node_ids)).items()}

    for change in plan.changed_nodes:
        if change.new_region:
            change.node.region_id = region_ids[change.new_region]
        change.node.updated_at = now  # bulk_update skips auto_now
    if plan.changed_nodes:
        Node.objects.bulk_update(
            [change.node for change in plan.changed_nodes],
            sorted(plan.node_fields | {"updated_at"}),
        )

    if plan.removed_cards:
        for chunk in _chunks(plan.removed_cards):
            Card.objects.filter(pk__in=chunk).delete()
    if plan.changed_cards:
        Card.objects.bulk_update(plan.changed_cards, sorted(plan.card_fields))
    for hostname, card in plan.new_cards:
        if card.node_id is None:
            card.node_id = node_ids[hostname]
    Card.objects.bulk_create([card for _, card in plan.new_cards])
