"""``manage.py import_inventory FILE``: load nodes and cards from CSV, YAML or a PAI machine list."""

from __future__ import annotations

import time
from argparse import RawDescriptionHelpFormatter
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from django.core.management.base import (
    BaseCommand,
    CommandError,
    CommandParser,
    DjangoHelpFormatter,
)

from inventory.importers import (
    FORMATS,
    InventoryFileError,
    RowError,
    parse_mapping_options,
    read_inventory_file,
    read_mapping_file,
)
from inventory.services import InventoryImportError, inventory_import

HELP = """Create or update nodes and their cards from FILE. All or nothing: every bad row is
reported with its line number and nothing is written. Importing the same file again changes
nothing. See docs/operations.md, "Importing inventory".

Generic CSV (header row; * = required):
  hostname*, card_model* (slug; may be blank when cards is 0), cards* (count), region
  (slug; else --region), network_kind (ib|roce|ethernet), network_gbps, cpu_cores,
  memory_gb, driver_version, external_id, domains (split the cards into this many
  interconnect domains; default 1), labels (k=v;k=v).
YAML (.yaml/.yml): a list of mappings with the same keys; `cards` may instead be a list
  of {index, uuid, model, domain}; labels and software_versions may be mappings.
Alibaba PAI machine list (--format alibaba, or detected by its header
  machine,gpu_type,cap_cpu,cap_mem,cap_gpu): hostname = machine id; GPU types map to card
  models by --map/--mapping (defaults P100=p100, T4=t4, V100=v100-16g, V100M32=v100-32g;
  MISC has none). Machines whose type is skipped (--skip-type) or with cap_gpu 0 are
  skipped, not imported as nodes.
Cards get the UUID HOSTNAME-gpuINDEX unless the file gives one.
Every value is checked by the model field that stores it (--dry-run refuses the same). Limits:
CARDPOOL_IMPORT_MAX_BYTES (16 MiB), _MAX_ROWS (100000), _MAX_CARDS_PER_NODE (128); no YAML
aliases."""


class _HelpFormatter(DjangoHelpFormatter, RawDescriptionHelpFormatter):
    pass


class Command(BaseCommand):
    help = HELP

    def create_parser(self, prog_name: str, subcommand: str, **kwargs: Any) -> CommandParser:
        parser = super().create_parser(prog_name, subcommand, **kwargs)
        parser.formatter_class = _HelpFormatter  # keep the format description's line breaks
        return parser

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("file", help="CSV or YAML file to import")
        parser.add_argument(
            "--format", choices=FORMATS, help="csv, yaml or alibaba (default: detected)"
        )
        parser.add_argument(
            "--map",
            action="append",
            default=[],
            metavar="GPU_TYPE=SLUG",
            help="map an Alibaba GPU type to a card model slug (repeatable)",
        )
        parser.add_argument(
            "--mapping", metavar="FILE.yaml", help="YAML mapping of GPU type to card model slug"
        )
        parser.add_argument(
            "--region", metavar="SLUG", help="region for rows with none (created if missing)"
        )
        parser.add_argument(
            "--skip-type",
            action="append",
            default=[],
            metavar="GPU_TYPE",
            help="skip Alibaba machines of this GPU type, e.g. CPU (repeatable)",
        )
        parser.add_argument(
            "--dry-run",
            action="store_true",
            help="check and report what would change; write nothing",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        started = time.monotonic()
        try:
            parsed = read_inventory_file(options["file"], source_format=options["format"])
            mapping = read_mapping_file(options["mapping"]) if options["mapping"] else {}
            mapping.update(parse_mapping_options(options["map"]))
        except (InventoryFileError, ValueError) as exc:
            raise CommandError(str(exc)) from exc
        try:
            result = inventory_import(
                rows=parsed.rows,
                source_format=parsed.source_format,
                columns=parsed.columns,
                mapping=mapping,
                default_region=options["region"],
                skip_types=options["skip_type"],
                dry_run=options["dry_run"],
            )
        except InventoryImportError as exc:
            raise CommandError(
                f"{options['file']}: {len(exc.errors)} problem(s), nothing imported:\n"
                + format_errors(exc.errors)
            ) from exc

        verb = "Would create" if result.dry_run else "Created"
        for slug in result.regions_created:
            self.stdout.write(
                self.style.WARNING(f"{verb} region {slug!r} (name {slug!r}; edit it in the admin).")
            )
        for warning in result.warnings:
            self.stdout.write(self.style.WARNING(warning))
        elapsed = time.monotonic() - started
        if result.dry_run:
            self.stdout.write(f"Dry run, nothing written. Would change {result.summary()}.")
        else:
            self.stdout.write(
                self.style.SUCCESS(
                    f"Imported {options['file']} ({result.source_format}) in {elapsed:.1f} s: "
                    f"{result.summary()}."
                )
            )


def format_errors(errors: Sequence[RowError]) -> str:
    """One line per distinct message, with every line it occurs on (runs as ranges)."""
    lines: dict[str, list[int]] = defaultdict(list)
    for error in errors:
        lines[error.message].append(error.line)
    out = []
    for message, numbers in lines.items():
        if numbers == [0]:
            out.append(f"  {message}")
        else:
            label = "line" if len(numbers) == 1 else f"lines ({len(numbers)})"
            out.append(f"  {label} {_ranges(numbers)}: {message}")
    return "\n".join(out)


def _ranges(numbers: Sequence[int]) -> str:
    """``[3, 4, 5, 9]`` → ``"3-5, 9"``."""
    spans: list[list[int]] = []
    for n in numbers:
        if spans and n == spans[-1][1] + 1:
            spans[-1][1] = n
        else:
            spans.append([n, n])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in spans)
