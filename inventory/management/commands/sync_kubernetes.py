"""``manage.py sync_kubernetes``: import nodes and cards from Kubernetes and follow cordons."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from inventory.services import InventoryImportError
from leasing.backends import BackendError
from leasing.backends.kubernetes import KubernetesBackend, kubernetes_settings
from leasing.backends.kubernetes_sync import kubernetes_sync

HELP = """Create or update nodes and cards from the cluster's node objects: one node per
Kubernetes node with a device resource, one card per unit of it (nvidia.com/gpu,
huawei.com/Ascend910, ...). Card models come from the node label cardpool.io/card-model or
--map RESOURCE[@PRODUCT]=SLUG. Cordoned nodes become maintenance, NotReady ones offline, and
active again when Kubernetes has them back. Running it again changes nothing. See
docs/operations.md, "Kubernetes backend"."""


class Command(BaseCommand):
    help = HELP

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--map",
            action="append",
            default=[],
            metavar="RESOURCE[@PRODUCT]=SLUG",
            help="map a device resource (and GPU product label) to a card model (repeatable)",
        )
        parser.add_argument(
            "--region",
            metavar="SLUG",
            help="region of nodes without topology.kubernetes.io/region "
            "(default CARDPOOL_KUBERNETES_REGION)",
        )
        parser.add_argument(
            "--from-file", metavar="FILE", help="read saved `kubectl get nodes -o json` output"
        )
        parser.add_argument("--dry-run", action="store_true", help="say what would change")

    def handle(self, *args: Any, **options: Any) -> None:
        config = kubernetes_settings()
        type_map = {resource: slug for slug, resource in config["RESOURCES"].items()}
        for item in options["map"]:
            key, sep, slug = item.partition("=")
            if not sep or not key.strip() or not slug.strip():
                raise CommandError(f"--map needs RESOURCE[@PRODUCT]=card-model-slug, not {item!r}")
            type_map[key.strip()] = slug.strip()
        try:
            if options["from_file"]:
                nodes = json.loads(Path(options["from_file"]).read_text()).get("items", [])
            else:
                nodes = KubernetesBackend(config=config).nodes()
        except (OSError, ValueError, BackendError) as exc:
            raise CommandError(f"cannot read Kubernetes' nodes: {exc}") from exc
        if not nodes:
            raise CommandError("Kubernetes listed no nodes; nothing imported.")
        try:
            result = kubernetes_sync(
                nodes=nodes,
                type_map=type_map,
                region=options["region"] or config["REGION"],
                dry_run=options["dry_run"],
            )
        except InventoryImportError as exc:
            raise CommandError("\n".join(str(e) for e in exc.errors)) from exc
        for warning in result.warnings:
            self.stderr.write(f"warning: {warning}")
        prefix = "dry run, nothing written: " if options["dry_run"] else ""
        self.stdout.write(prefix + result.summary())
