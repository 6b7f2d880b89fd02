"""Importing nodes and cards from Slurm (``scontrol show node -d``) into the inventory.

The import itself is the ordinary inventory import (inventory.services.inventory_import),
fed one row per Slurm node: all or nothing, idempotent, labels merged. On top of it:

- each imported node is labelled ``backend=slurm`` (its leases go through the Slurm
  backend), ``slurm:state=<Slurm state>`` and ``slurm:gres:<card model>=<GRES type>``;
- availability follows Slurm: a drained node becomes *maintenance*, a down one *offline*,
  and it becomes *active* again once Slurm has it back — but only if it was this sync that
  took it out (label ``slurm:set_status``); an operator's own maintenance is left alone.
  A node labelled ``backend=slurm`` that Slurm no longer lists goes offline the same way.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from django.db import transaction

from inventory.importers import FORMAT_YAML, RawRow
from inventory.models import Node
from inventory.services import ImportResult, inventory_import
from leasing.backends.slurm_parse import SlurmNode

SET_STATUS = "slurm:set_status"
WANTED_STATUS = {
    "up": Node.Status.ACTIVE,
    "drained": Node.Status.MAINTENANCE,
    "down": Node.Status.OFFLINE,
}


@dataclass
class SyncResult:
    """The import's own result plus what changed in availability."""

    imported: ImportResult
    status_changes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return self.imported.changed or bool(self.status_changes)

    def summary(self) -> str:
        text = self.imported.summary()
        return f"{text}; status: {', '.join(self.status_changes) or 'unchanged'}"


def rows_from_slurm(
    nodes: list[SlurmNode], *, type_map: dict[str, str], region: str, gres_name: str = "gpu"
) -> tuple[list[RawRow], list[str]]:
    """One import row per node with mapped GRES; warnings for types no card model maps to.

    *type_map* is GRES type → card model slug.
    """
    rows: list[RawRow] = []
    warnings: list[str] = []
    for line, node in enumerate(nodes, start=1):
        cards = []
        labels = {"backend": "slurm", "slurm:state": node.state}
        for index, gres_type in node.cards(gres_name):
            slug = type_map.get(gres_type)
            if slug is None:
                warnings.append(
                    f"{node.name}: GRES {gres_name}:{gres_type or '(no type)'} #{index} maps "
                    f"to no card model (use --map {gres_type}=SLUG); not imported"
                )
                continue
            labels[f"slurm:gres:{slug}"] = gres_type
            cards.append({"index": index, "model": slug})
        if not cards:
            warnings.append(f"{node.name}: no card to import; node skipped")
            continue
        data = {"hostname": node.name, "region": region, "cards": cards, "labels": labels}
        if node.cpus is not None:
            data["cpu_cores"] = node.cpus
        if node.memory_mb is not None:
            data["memory_gb"] = node.memory_mb // 1024
        rows.append(RawRow(line, data))
    return rows, warnings


def slurm_sync(
    *,
    nodes: list[SlurmNode],
    type_map: dict[str, str],
    region: str,
    gres_name: str = "gpu",
    dry_run: bool = False,
) -> SyncResult:
    """Create or update nodes and cards from Slurm's view and follow its availability.

    Raises inventory.services.InventoryImportError (nothing written) on bad input, e.g. a
    card model slug that does not exist.
    """
    rows, warnings = rows_from_slurm(nodes, type_map=type_map, region=region, gres_name=gres_name)
    with transaction.atomic():
        imported = inventory_import(rows=rows, source_format=FORMAT_YAML, dry_run=dry_run)
        result = SyncResult(imported=imported, warnings=warnings + imported.warnings)
        availability = {n.name: n.availability for n in nodes}
        follow_availability(availability, result, dry_run=dry_run)
    return result


def follow_availability(
    availability: dict[str, str],
    result: SyncResult,
    *,
    dry_run: bool,
    backend: str = "slurm",
    source: str = "Slurm",
) -> None:
    """Nodes follow their scheduler's view (*availability*: hostname → up, drained or
    down; a node labelled ``backend=<backend>`` missing from it is down), but only where
    this sync took them out (label ``<backend>:set_status``): an operator's own state
    is left alone."""
    set_status = f"{backend}:set_status"
    known = Node.objects.select_for_update().filter(hostname__in=list(availability))
    gone = (
        Node.objects.select_for_update()
        .filter(labels__backend=backend)
        .exclude(hostname__in=list(availability))
    )
    for node in [*known.order_by("pk"), *gone.order_by("pk")]:
        state = availability.get(node.hostname, "down")
        if node.hostname not in availability:
            result.warnings.append(f"{node.hostname}: not in {source} any more")
        wanted = WANTED_STATUS[state]
        ours = node.labels.get(set_status)
        labels = dict(node.labels)
        if wanted == Node.Status.ACTIVE:
            if not ours or node.status != ours:
                continue  # not taken out by us (or changed since by an operator): leave it
            labels.pop(set_status)
        elif node.status == Node.Status.ACTIVE or (ours and node.status == ours):
            if node.status == wanted:
                continue
            labels[set_status] = wanted
        else:
            continue  # an operator's maintenance, offline or drain: leave it
        result.status_changes.append(f"{node.hostname} {node.status}→{wanted}")
        if not dry_run:
            Node.objects.filter(pk=node.pk).update(status=wanted, labels=labels)
