"""``manage.py sync_slurm``: import nodes and cards from Slurm and follow its node states."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from inventory.services import InventoryImportError
from leasing.backends import BackendError
from leasing.backends.slurm import SlurmCli, slurm_settings
from leasing.backends.slurm_parse import parse_nodes
from leasing.backends.slurm_sync import slurm_sync

HELP = """Read `scontrol show node -d` (or --from-file) and create or update one Cardpool node
per Slurm node, one card per GPU GRES (index = Slurm's GRES index). GRES types map to card
models by CARDPOOL_SLURM_GRES_TYPES (card model=GRES type) and --map TYPE=SLUG. Drained
nodes become maintenance, down ones offline, and active again when Slurm has them back.
Running it again changes nothing. See docs/operations.md, "Slurm backend"."""


class Command(BaseCommand):
    help = HELP

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--map",
            action="append",
            default=[],
            metavar="GRES_TYPE=SLUG",
            help="map a Slurm GRES type to a card model slug (repeatable)",
        )
        parser.add_argument(
            "--region", metavar="SLUG", help="region of new nodes (default CARDPOOL_SLURM_REGION)"
        )
        parser.add_argument(
            "--from-file", metavar="FILE", help="read saved `scontrol show node -d` output"
        )
        parser.add_argument("--dry-run", action="store_true", help="say what would change")

    def handle(self, *args: Any, **options: Any) -> None:
        config = slurm_settings()
        type_map = {gres: slug for slug, gres in config["GRES_TYPES"].items()}
        for item in options["map"]:
            gres, sep, slug = item.partition("=")
            if not sep or not gres.strip() or not slug.strip():
                raise CommandError(f"--map needs GRES_TYPE=card-model-slug, not {item!r}")
            type_map[gres.strip()] = slug.strip()  # GRES types are case-sensitive
        try:
            if options["from_file"]:
                nodes = parse_nodes(Path(options["from_file"]).read_text())
            else:
                nodes = SlurmCli(config).nodes()
        except (OSError, BackendError) as exc:
            raise CommandError(f"cannot read Slurm's nodes: {exc}") from exc
        if not nodes:
            raise CommandError("Slurm listed no nodes; nothing imported.")
        try:
            result = slurm_sync(
                nodes=nodes,
                type_map=type_map,
                region=options["region"] or config["REGION"],
                gres_name=config["GRES_NAME"],
                dry_run=options["dry_run"],
            )
        except InventoryImportError as exc:
            raise CommandError("\n".join(str(e) for e in exc.errors)) from exc
        for warning in result.warnings:
            self.stderr.write(f"warning: {warning}")
        prefix = "dry run, nothing written: " if options["dry_run"] else ""
        self.stdout.write(prefix + result.summary())
