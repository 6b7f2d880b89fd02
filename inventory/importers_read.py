"""Reading inventory files (CSV, YAML, Alibaba PAI machine lists) into raw rows with their lines.

Bounded: the file's size and row count (settings.CARDPOOL_IMPORT), csv's field size limit, and
YAML without aliases or deep nesting. :mod:`inventory.importers` checks the rows.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from inventory.importers_checks import ImportLimits, import_limits

FORMAT_GENERIC = "csv"
FORMAT_YAML = "yaml"
FORMAT_ALIBABA = "alibaba"
FORMATS = (FORMAT_GENERIC, FORMAT_YAML, FORMAT_ALIBABA)

# Deeper than any inventory needs (list > node > cards > card), shallow enough that the
# recursive composer (libyaml's or PyYAML's) never nears a recursion limit.
_YAML_MAX_DEPTH = 10


class InventoryFileError(Exception):
    """The file cannot be read at all (missing, not CSV/YAML, wrong top-level shape)."""


@dataclass(frozen=True)
class RawRow:
    """One record as read from the file, before any checking."""

    line: int
    data: Mapping[str, Any]


@dataclass
class ParsedFile:
    """What :func:`read_inventory_file` found: the format, the rows and (for tables) the header."""

    source_format: str
    rows: list[RawRow]
    columns: list[str] | None = None


def detect_format(path: Path, header: Sequence[str] | None) -> str:
    """YAML by extension; a CSV whose header has the Alibaba columns is ``alibaba``."""
    if path.suffix.lower() in (".yaml", ".yml"):
        return FORMAT_YAML
    if header is not None and {"machine", "gpu_type", "cap_gpu"} <= set(header):
        return FORMAT_ALIBABA
    return FORMAT_GENERIC


def read_inventory_file(path: Path | str, *, source_format: str | None = None) -> ParsedFile:
    """Read *path* into raw rows; the format is detected unless *source_format* is given.

    The file may hold at most ``MAX_BYTES`` and ``MAX_ROWS`` (settings.CARDPOOL_IMPORT)."""
    path = Path(path)
    limits = import_limits()
    try:
        with path.open("rb") as handle:
            raw = handle.read(limits.max_bytes + 1)
        if len(raw) > limits.max_bytes:
            raise InventoryFileError(
                f"{path} is larger than {limits.max_bytes} bytes (CARDPOOL_IMPORT_MAX_BYTES)"
            )
        text = raw.decode("utf-8-sig")
    except (OSError, UnicodeDecodeError) as exc:
        raise InventoryFileError(f"cannot read {path}: {exc}") from exc
    if source_format is not None and source_format not in FORMATS:
        raise InventoryFileError(
            f"unknown format {source_format!r}; use one of {', '.join(FORMATS)}"
        )
    if source_format == FORMAT_YAML or (
        source_format is None and detect_format(path, None) == FORMAT_YAML
    ):
        rows = _read_yaml(text, path, limits)
        return ParsedFile(FORMAT_YAML, rows)
    columns, rows = _read_csv(text, path, limits)
    return ParsedFile(source_format or detect_format(path, columns), rows, columns)


def _check_row_count(rows: Sequence[RawRow], limits: ImportLimits, path: Path) -> None:
    if len(rows) > limits.max_rows:
        raise InventoryFileError(
            f"{path} has more than {limits.max_rows} rows (CARDPOOL_IMPORT_MAX_ROWS)"
        )


def _read_csv(text: str, path: Path, limits: ImportLimits) -> tuple[list[str], list[RawRow]]:
    reader = csv.DictReader(io.StringIO(text, newline=""))
    rows: list[RawRow] = []
    try:  # csv's own field size limit (128 KiB) bounds a field; it raises csv.Error
        columns = [c.strip() for c in reader.fieldnames or []]
        reader.fieldnames = columns
        for record in reader:
            # line_num is the physical line the record ended on; the header is line 1.
            if not any((v or "").strip() for v in record.values() if isinstance(v, str)):
                continue
            rows.append(RawRow(reader.line_num, record))
            _check_row_count(rows, limits, path)
    except csv.Error as exc:
        # DictReader copies line_num only after a record is read: ask the csv reader itself.
        raise InventoryFileError(f"{path}: line {reader.reader.line_num}: {exc}") from exc
    return columns, rows


# libyaml's parser when PyYAML was built with it (about 4x faster, half the memory).
_SafeLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _LineLoader(_SafeLoader):
    """A safe loader that remembers the line each mapping starts on, under ``__line__``."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        mapping = super().construct_mapping(node, deep=True)
        mapping["__line__"] = node.start_mark.line + 1
        return mapping


def _check_yaml_events(text: str, limits: ImportLimits) -> None:
    """Walk the parser's events (constant memory) before anything is built, refusing:

    * aliases (``*name``): nested ones expand exponentially (a 1 KB "billion laughs" file is
      hundreds of millions of values once anything walks it) and PyYAML has no limit for them;
    * nesting deeper than inventory needs (the composer recurses);
    * more top-level items than ``MAX_ROWS``, before their nodes are composed."""
    depth = rows = 0
    for event in yaml.parse(text, Loader=_SafeLoader):
        line = event.start_mark.line + 1
        if isinstance(event, yaml.AliasEvent):
            raise InventoryFileError(
                f"line {line}: YAML aliases (*name) are not allowed; write the values out"
            )
        if isinstance(event, yaml.NodeEvent) and depth == 1:
            rows += 1
            if rows > limits.max_rows:
                raise InventoryFileError(
                    f"has more than {limits.max_rows} rows (CARDPOOL_IMPORT_MAX_ROWS)"
                )
        if isinstance(event, yaml.CollectionStartEvent):
            depth += 1
            if depth > _YAML_MAX_DEPTH:
                raise InventoryFileError(
                    f"line {line}: nested too deeply (at most {_YAML_MAX_DEPTH} levels)"
                )
        elif isinstance(event, yaml.CollectionEndEvent):
            depth -= 1


def _read_yaml(text: str, path: Path, limits: ImportLimits) -> list[RawRow]:
    try:
        _check_yaml_events(text, limits)
        data = yaml.load(text, Loader=_LineLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as exc:
        raise InventoryFileError(f"{path} is not valid YAML: {exc}") from exc
    except InventoryFileError as exc:
        raise InventoryFileError(f"{path}: {exc}") from exc
    if data is None:
        return []
    if not isinstance(data, list):
        raise InventoryFileError(f"{path}: expected a list of nodes at the top level")
    rows = []
    for position, item in enumerate(data, start=1):
        if not isinstance(item, dict):
            raise InventoryFileError(f"{path}: item {position} is not a mapping")
        line = item.pop("__line__")
        rows.append(RawRow(line, item))
    return rows


def read_mapping_file(path: Path | str) -> dict[str, str]:
    """A YAML mapping file: ``{GPU_TYPE: card-model-slug}``."""
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise InventoryFileError(f"cannot read mapping file {path}: {exc}") from exc
    if not isinstance(data, dict) or not all(isinstance(v, str) for v in data.values()):
        raise InventoryFileError(f"{path}: expected a mapping of GPU type to card model slug")
    return {str(k).strip().upper(): v.strip() for k, v in data.items()}
