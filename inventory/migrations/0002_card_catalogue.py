"""Load the card catalogue (inventory/data/card_models.yaml) so a fresh database has it."""

from django.db import migrations


def load_card_catalogue(apps, schema_editor):
    from inventory.catalogue import catalogue_sync

    catalogue_sync(card_model_cls=apps.get_model("inventory", "CardModel"))


class Migration(migrations.Migration):
    dependencies = [
        ("inventory", "0001_initial"),
    ]

    operations = [
        # Reverse is a no-op: rows may already be referenced by cards and leases.
        migrations.RunPython(load_card_catalogue, migrations.RunPython.noop),
    ]
