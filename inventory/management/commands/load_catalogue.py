"""``manage.py load_catalogue``: bring the card models in line with the catalogue file."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from inventory.catalogue import CATALOGUE_PATH, catalogue_sync


class Command(BaseCommand):
    help = (
        "Create or update card models from the card catalogue (default "
        "inventory/data/card_models.yaml), matching on slug. Checks every entry first and "
        "writes nothing if one is bad. A model's price is set only when it is created."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--path", default=None, help=f"catalogue YAML file (default {CATALOGUE_PATH})"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            created, updated = catalogue_sync(path=options["path"])
        except (OSError, ValueError) as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(f"Card catalogue: {created} created, {updated} updated.")
