"""Importing nodes and cards from Kubernetes node objects into the inventory.

Like ``slurm_sync``, the import is the ordinary inventory import
(inventory.services.inventory_import), fed one row per node: all or nothing, idempotent,
labels merged. What a node object says:

- **cards**: one card per unit of an extended device resource in ``status.capacity``
  (``nvidia.com/gpu: 8`` → cards 0–7). The card model is the node's ``cardpool.io/card-model``
  label, else ``--map RESOURCE@PRODUCT=SLUG`` with the product from the GPU feature
  discovery label (``nvidia.com/gpu.product``), else ``--map RESOURCE=SLUG``. Indices are
  Cardpool's own numbering: the device plugin picks the devices (docs/decisions.md).
- **labels**: ``backend=kubernetes`` (its leases go through the Kubernetes backend),
  ``kubernetes:resource:<slug>=<resource>``, and the interconnect label
  (``cardpool.io/interconnect``) and zone when the node has them; the region is
  ``topology.kubernetes.io/region``, else the configured one.
- **health**: ``allocatable`` below ``capacity`` means the device plugin reports unhealthy
  devices: the node gets ``kubernetes:unhealthy=<count>`` and a warning.
- **availability**: a cordoned node (``spec.unschedulable``) becomes *maintenance*, one whose
  ``Ready`` condition is not True *offline*, and *active* again when Kubernetes has it back —
  only if this sync took it out (slurm_sync.follow_availability).
"""

from __future__ import annotations

from django.db import transaction

from inventory.importers import FORMAT_YAML, RawRow
from inventory.services import inventory_import
from leasing.backends.kubernetes_manifests import ASCEND_310P, VENDOR_RESOURCES
from leasing.backends.slurm_sync import SyncResult, follow_availability

MODEL_LABEL = "cardpool.io/card-model"
INTERCONNECT_LABEL = "cardpool.io/interconnect"
REGION_LABEL = "topology.kubernetes.io/region"
ZONE_LABEL = "topology.kubernetes.io/zone"
PRODUCT_LABELS = ("nvidia.com/gpu.product", "cardpool.io/product")
KNOWN_RESOURCES = {*VENDOR_RESOURCES.values(), ASCEND_310P}


def availability_of(node: dict) -> str:
    """'up', 'drained' (cordoned) or 'down' (not Ready), as slurm_sync understands it."""
    conditions = node.get("status", {}).get("conditions") or []
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)
    if not ready:
        return "down"
    if node.get("spec", {}).get("unschedulable"):
        return "drained"
    return "up"


def _device_resources(capacity: dict, type_map: dict[str, str]) -> list[str]:
    mapped = {key.split("@", 1)[0] for key in type_map}
    return sorted(r for r in capacity if r in KNOWN_RESOURCES or r in mapped)


def rows_from_kubernetes(
    nodes: list[dict], *, type_map: dict[str, str], region: str
) -> tuple[list[RawRow], list[str]]:
    """One import row per node with a mapped device resource; warnings for the others."""
    rows: list[RawRow] = []
    warnings: list[str] = []
    for line, node in enumerate(sorted(nodes, key=lambda n: n["metadata"]["name"]), start=1):
        meta, status = node["metadata"], node.get("status", {})
        name, labels_in = meta["name"], meta.get("labels") or {}
        capacity = status.get("capacity") or {}
        allocatable = status.get("allocatable") or {}
        product = next((labels_in[k] for k in PRODUCT_LABELS if labels_in.get(k)), "")
        labels = {"backend": "kubernetes"}
        cards: list[dict] = []
        for resource in _device_resources(capacity, type_map):
            slug = (
                labels_in.get(MODEL_LABEL)
                or type_map.get(f"{resource}@{product}")
                or type_map.get(resource)
            )
            count = int(str(capacity[resource]))
            if not slug:
                warnings.append(
                    f"{name}: {count} × {resource} ({product or 'no product label'}) map to no "
                    f"card model (label the node {MODEL_LABEL}=SLUG or use --map "
                    f"{resource}=SLUG); not imported"
                )
                continue
            labels[f"kubernetes:resource:{slug}"] = resource
            unhealthy = count - int(str(allocatable.get(resource, count)))
            if unhealthy > 0:
                labels["kubernetes:unhealthy"] = str(unhealthy)
                warnings.append(f"{name}: {unhealthy} of {count} {resource} are unhealthy")
            start = len(cards)
            cards.extend({"index": start + i, "model": slug} for i in range(count))
        if not cards:
            warnings.append(f"{name}: no card to import; node skipped")
            continue
        for key in (INTERCONNECT_LABEL, ZONE_LABEL):
            if labels_in.get(key):
                labels[f"kubernetes:{key.rsplit('/', 1)[-1]}"] = labels_in[key]
        data: dict = {
            "hostname": name,
            "region": labels_in.get(REGION_LABEL) or region,
            "cards": cards,
            "labels": labels,
        }
        cpu = str(capacity.get("cpu", ""))
        if cpu.isdigit():
            data["cpu_cores"] = int(cpu)
        memory = str(capacity.get("memory", ""))
        if memory.endswith("Ki") and memory[:-2].isdigit():
            data["memory_gb"] = int(memory[:-2]) // (1024 * 1024)
        elif memory.endswith("Gi") and memory[:-2].isdigit():
            data["memory_gb"] = int(memory[:-2])
        rows.append(RawRow(line, data))
    return rows, warnings


def kubernetes_sync(
    *, nodes: list[dict], type_map: dict[str, str], region: str, dry_run: bool = False
) -> SyncResult:
    """Create or update nodes and cards from Kubernetes' node objects and follow their
    cordons and readiness. Raises inventory.services.InventoryImportError (nothing written)
    on bad input, e.g. a card model slug that does not exist."""
    rows, warnings = rows_from_kubernetes(nodes, type_map=type_map, region=region)
    with transaction.atomic():
        imported = inventory_import(rows=rows, source_format=FORMAT_YAML, dry_run=dry_run)
        result = SyncResult(imported=imported, warnings=warnings + imported.warnings)
        availability = {n["metadata"]["name"]: availability_of(n) for n in nodes}
        follow_availability(
            availability, result, dry_run=dry_run, backend="kubernetes", source="Kubernetes"
        )
    return result


__all__ = ["availability_of", "kubernetes_sync", "rows_from_kubernetes"]
