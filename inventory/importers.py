"""Reading inventory files (CSV, YAML, Alibaba PAI machine lists) into validated node specs.

Nothing here touches the database: :func:`read_inventory_file` (in :mod:`inventory.importers_read`,
re-exported here) turns a file into raw rows with their line numbers, and :func:`normalize_rows`
turns raw rows into :class:`NodeSpec` objects, collecting every problem it finds (with its line)
instead of stopping at the first. Every value is checked by the model field that will store it
(:mod:`inventory.importers_checks`), so ``--dry-run`` refuses exactly what a real run would.
Checks that need the database (does the card model exist, is a UUID taken) live in
:func:`inventory.services.inventory_import`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from django.db import models

from inventory.importers_checks import field_errors, import_limits, value_shape_errors
from inventory.importers_read import (  # noqa: F401 - the reading half, re-exported
    FORMAT_ALIBABA,
    FORMAT_GENERIC,
    FORMAT_YAML,
    FORMATS,
    InventoryFileError,
    ParsedFile,
    RawRow,
    detect_format,
    read_inventory_file,
    read_mapping_file,
)
from inventory.models import Card, Node, Region

GENERIC_REQUIRED = ("hostname", "card_model", "cards")
GENERIC_OPTIONAL = (
    "region",
    "network_kind",
    "network_gbps",
    "cpu_cores",
    "memory_gb",
    "driver_version",
    "domains",
    "labels",
    "external_id",
)
ALIBABA_COLUMNS = ("machine", "gpu_type", "cap_cpu", "cap_mem", "cap_gpu")

# The card models the Alibaba PAI GPU types are, in the site catalogue's slugs. MISC is a mix of
# models the trace does not name, so it has no default: map it (--map MISC=...) or skip it.
ALIBABA_DEFAULT_MAPPING = {
    "P100": "p100",
    "T4": "t4",
    "V100": "v100-16g",
    "V100M32": "v100-32g",
}

_NETWORK_ALIASES = {
    "ib": Node.Network.INFINIBAND,
    "infiniband": Node.Network.INFINIBAND,
    "roce": Node.Network.ROCE,
    "ethernet": Node.Network.ETHERNET,
    "eth": Node.Network.ETHERNET,
}


@dataclass(frozen=True)
class RowError:
    """One problem in the input, at a line of the file (0 when it is not about a line)."""

    line: int
    message: str

    def __str__(self) -> str:
        return f"line {self.line}: {self.message}" if self.line else self.message


@dataclass(frozen=True)
class CardSpec:
    """One card a node should hold. ``uuid`` None means "keep the card's, or derive one"."""

    index: int
    card_model: str
    interconnect_domain: int = 0
    uuid: str | None = None


@dataclass
class NodeSpec:
    """One node as the file describes it; fields left None are not set (kept on update)."""

    line: int
    hostname: str
    region: str
    cards: list[CardSpec]
    network_kind: str | None = None
    network_gbps: int | None = None
    cpu_cores: int | None = None
    memory_gb: int | None = None
    driver_version: str | None = None
    external_id: str | None = None
    labels: dict[str, str] = field(default_factory=dict)
    software_versions: dict[str, str] = field(default_factory=dict)


@dataclass
class NormalizedRows:
    """The outcome of :func:`normalize_rows`."""

    nodes: list[NodeSpec]
    errors: list[RowError]
    skipped: int = 0


def card_uuid(hostname: str, index: int) -> str:
    """The UUID given to an imported card when the file names none; stable across imports."""
    return f"{hostname}-gpu{index}"


def normalize_rows(
    *,
    rows: Iterable[RawRow],
    source_format: str,
    columns: Sequence[str] | None = None,
    mapping: Mapping[str, str] | None = None,
    default_region: str | None = None,
    skip_types: Iterable[str] = (),
) -> NormalizedRows:
    """Check every row and turn it into a :class:`NodeSpec`, collecting all errors.

    *columns* is the header of a tabular file: a missing required column is reported once,
    at line 1, rather than on every row. *mapping* (GPU type → card model slug) and
    *skip_types* only apply to the ``alibaba`` format.
    """
    if source_format not in FORMATS:
        raise ValueError(f"unknown source format {source_format!r}")
    result = NormalizedRows(nodes=[], errors=[])
    required = ALIBABA_COLUMNS if source_format == FORMAT_ALIBABA else GENERIC_REQUIRED
    if columns is not None:
        missing = [c for c in required if c not in columns]
        if missing:
            result.errors.append(RowError(1, f"missing required column(s): {', '.join(missing)}"))
            return result
    if source_format == FORMAT_ALIBABA:
        type_map = {**ALIBABA_DEFAULT_MAPPING, **(mapping or {})}
        skip = {t.strip().upper() for t in skip_types}
    host_key = "machine" if source_format == FORMAT_ALIBABA else "hostname"
    max_cards = import_limits().max_cards_per_node
    seen: dict[str, int] = {}
    for row in rows:
        errors = value_shape_errors(row.data)
        spec: NodeSpec | None = None
        if errors:
            pass  # a list where a value belongs, or a NUL: nothing more to read from the row
        elif source_format == FORMAT_ALIBABA:
            spec = _alibaba_row(row, type_map, skip, default_region, max_cards, errors)
            if spec is None and not errors:
                result.skipped += 1
                continue
        else:
            spec = _generic_row(row, default_region, max_cards, errors)
        # Checked on bad rows too, so a fix to one line does not reveal a new error later.
        hostname = _text(row.data.get(host_key))
        if hostname and not errors:
            errors.extend(field_errors(Node, "hostname", hostname))
        first = seen.setdefault(hostname, row.line) if hostname else row.line
        if first != row.line:
            errors.append(f"duplicate hostname {hostname!r} (first on line {first})")
        result.errors.extend(RowError(row.line, message) for message in errors)
        if spec is not None and not errors:
            result.nodes.append(spec)
    return result


def _alibaba_row(
    row: RawRow,
    type_map: Mapping[str, str],
    skip: set[str],
    default_region: str | None,
    max_cards: int,
    errors: list[str],
) -> NodeSpec | None:
    """A PAI machine as a node; None (and no error) for machines that are skipped."""
    data = row.data
    machine = _text(data.get("machine"))
    gpu_type = _text(data.get("gpu_type")).upper()
    if gpu_type in skip:
        return None
    count = _card_count(
        _integer(data, "cap_gpu", errors, required=True), "cap_gpu", max_cards, errors
    )
    cpu = _integer(data, "cap_cpu", errors, stored_as=(Node, "cpu_cores"))
    mem = _integer(data, "cap_mem", errors, stored_as=(Node, "memory_gb"))
    if not machine:
        errors.append("machine is empty")
    else:
        errors.extend(field_errors(Node, "external_id", machine, "machine"))
    if not gpu_type:
        errors.append("gpu_type is empty")
    if count == 0 and not errors:
        return None
    slug = type_map.get(gpu_type)
    if gpu_type and slug is None:
        errors.append(
            f"GPU type {gpu_type!r} is not mapped to a card model "
            f"(use --map {gpu_type}=SLUG or --skip-type {gpu_type})"
        )
    region = _region(default_region, errors)
    if errors or count is None or slug is None:
        return None
    return NodeSpec(
        line=row.line,
        hostname=machine,
        region=region,
        cards=[CardSpec(index=i, card_model=slug) for i in range(count)],
        cpu_cores=cpu,
        memory_gb=mem,
        external_id=machine,
        labels={"gpu_type": gpu_type},
    )


def _generic_row(
    row: RawRow, default_region: str | None, max_cards: int, errors: list[str]
) -> NodeSpec | None:
    """A node from the generic CSV columns or a YAML mapping with the same keys."""
    data = row.data
    hostname = _text(data.get("hostname"))
    if not hostname:
        errors.append("hostname is missing")
    region = _region(_text(data.get("region")) or default_region, errors)
    model = _text(data.get("card_model"))
    cards = _cards(row, model, max_cards, errors)
    spec = NodeSpec(
        line=row.line,
        hostname=hostname,
        region=region,
        cards=cards or [],
        network_kind=_network(data.get("network_kind"), errors),
        network_gbps=_integer(data, "network_gbps", errors, stored_as=(Node, "network_gbps")),
        cpu_cores=_integer(data, "cpu_cores", errors, stored_as=(Node, "cpu_cores")),
        memory_gb=_integer(data, "memory_gb", errors, stored_as=(Node, "memory_gb")),
        driver_version=_stored_text(data, "driver_version", Node, errors),
        external_id=_stored_text(data, "external_id", Node, errors),
        labels=_pairs(data.get("labels"), "labels", errors),
        software_versions=_pairs(data.get("software_versions"), "software_versions", errors),
    )
    return None if errors else spec


def _cards(row: RawRow, model: str, max_cards: int, errors: list[str]) -> list[CardSpec] | None:
    """The node's cards: ``cards`` as a count (split into ``domains``) or, in YAML, a list."""
    data = row.data
    listed = data.get("cards")
    if isinstance(listed, list):
        if _card_count(len(listed), "cards", max_cards, errors) is None:
            return None
        return _card_list(listed, model, errors)
    count = _card_count(_integer(data, "cards", errors, required=True), "cards", max_cards, errors)
    domains = _integer(data, "domains", errors)
    if count is None:
        return None
    if count:
        errors.extend(field_errors(Card, "index", count - 1, "card index"))
    if count and not model:
        errors.append("card_model is missing")
        return None
    if domains is None:
        domains = 1
    elif domains < 1 or (count and domains > count):
        errors.append(f"domains must be between 1 and the number of cards ({count}), not {domains}")
        return None
    # Even split: with 8 cards and 2 domains, cards 0-3 share domain 0 and 4-7 domain 1.
    return [
        CardSpec(index=i, card_model=model, interconnect_domain=i * domains // count)
        for i in range(count)
    ]


def _card_list(listed: list[Any], model: str, errors: list[str]) -> list[CardSpec] | None:
    cards: list[CardSpec] = []
    indexes: set[int] = set()
    for position, item in enumerate(listed):
        if not isinstance(item, dict):
            errors.append(f"cards[{position}] is not a mapping")
            continue
        where = f"cards[{position}] (line {item.get('__line__', '?')})"
        card_errors = value_shape_errors(item)
        if card_errors:
            errors.extend(f"{where}: {message}" for message in card_errors)
            continue
        index = _integer(item, "index", card_errors, stored_as=(Card, "index"))
        domain = _integer(item, "domain", card_errors, stored_as=(Card, "interconnect_domain"))
        card_model = _text(item.get("model")) or model
        uuid = _stored_text(item, "uuid", Card, card_errors)
        if index is None and not card_errors:
            index = position
        if not card_model:
            card_errors.append("has no model and the node has no card_model")
        if index is not None and index in indexes:
            card_errors.append(f"repeats index {index}")
        errors.extend(f"{where}: {message}" for message in card_errors)
        if card_errors or index is None:
            continue
        indexes.add(index)
        cards.append(CardSpec(index, card_model, domain or 0, uuid))
    return cards


def _text(value: Any) -> str:
    return "" if value is None else str(value).strip()


def _card_count(count: int | None, key: str, max_cards: int, errors: list[str]) -> int | None:
    """*count* when it is within CARDPOOL_IMPORT_MAX_CARDS_PER_NODE, before any card is made."""
    if count is not None and count > max_cards:
        errors.append(
            f"{key} must be at most {max_cards} (CARDPOOL_IMPORT_MAX_CARDS_PER_NODE), not {count}"
        )
        return None
    return count


def _stored_text(
    data: Mapping[str, Any], key: str, model: type[models.Model], errors: list[str]
) -> str | None:
    """The text under *key* (None when blank), checked against the field of *model* it goes to."""
    text = _text(data.get(key)) or None
    if text is not None:
        errors.extend(field_errors(model, key, text))
    return text


def _integer(
    data: Mapping[str, Any],
    key: str,
    errors: list[str],
    *,
    required: bool = False,
    stored_as: tuple[type[models.Model], str] | None = None,
) -> int | None:
    """A non-negative integer from *key*; blank is None (an error when *required*). With
    *stored_as* (model, field), it must also fit that field."""
    raw = data.get(key)
    if isinstance(raw, bool):
        errors.append(f"{key} must be a whole number, not {raw!r}")
        return None
    text = _text(raw)
    if not text:
        if required:
            errors.append(f"{key} is missing")
        return None
    try:
        value = int(text)
    except ValueError:
        errors.append(f"{key} must be a whole number, not {text!r}")
        return None
    if value < 0:
        errors.append(f"{key} must not be negative, not {value}")
        return None
    if stored_as is not None:
        problems = field_errors(*stored_as, value, key)
        if problems:
            errors.extend(problems)
            return None
    return value


def _region(slug: str | None, errors: list[str]) -> str:
    if not slug:
        errors.append("no region (add a region column or pass --region)")
        return ""
    errors.extend(field_errors(Region, "slug", slug, "region"))
    return slug


def _network(value: Any, errors: list[str]) -> str | None:
    text = _text(value).lower()
    if not text:
        return None
    kind = _NETWORK_ALIASES.get(text)
    if kind is None:
        errors.append(f"network_kind {text!r} is not one of ib, roce, ethernet")
        return None
    return str(kind)


def _pairs(value: Any, key: str, errors: list[str]) -> dict[str, str]:
    """``k=v;k=v`` (CSV) or a mapping (YAML) as a dict of strings."""
    if value is None or value == "":
        return {}
    if isinstance(value, dict):
        return {str(k): _text(v) for k, v in value.items() if k != "__line__"}
    pairs = {}
    for part in str(value).split(";"):
        if not part.strip():
            continue
        name, sep, val = part.partition("=")
        if not sep or not name.strip():
            errors.append(f"{key} must look like k=v;k=v, not {str(value)!r}")
            return {}
        pairs[name.strip()] = val.strip()
    return pairs


def parse_mapping_options(values: Iterable[str]) -> dict[str, str]:
    """``["P100=p100", "T4=t4"]`` → ``{"P100": "p100", "T4": "t4"}``; ValueError when malformed."""
    mapping = {}
    for value in values:
        gpu_type, sep, slug = value.partition("=")
        if not sep or not gpu_type.strip() or not slug.strip():
            raise ValueError(f"--map needs GPU_TYPE=card-model-slug, not {value!r}")
        mapping[gpu_type.strip().upper()] = slug.strip()
    return mapping
