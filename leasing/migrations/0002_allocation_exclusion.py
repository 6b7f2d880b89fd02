"""On PostgreSQL: no card may be in two allocations whose periods overlap, whatever the code does.

Kept out of the model's Meta because SQLite cannot express it; there, IMMEDIATE
transactions serialize every writer and the placement check runs inside them.
"""

from django.contrib.postgres.operations import BtreeGistExtension
from django.db import migrations

CREATE = """
ALTER TABLE leasing_allocation ADD CONSTRAINT allocation_no_overlap
EXCLUDE USING gist (card_id WITH =, tstzrange(start_at, end_at, '[)') WITH &&)
"""
DROP = "ALTER TABLE leasing_allocation DROP CONSTRAINT IF EXISTS allocation_no_overlap"


class PostgresOnlySQL(migrations.RunSQL):
    """RunSQL that is a no-op on databases other than PostgreSQL."""

    def database_forwards(self, app_label, schema_editor, from_state, to_state):
        if schema_editor.connection.vendor == "postgresql":
            super().database_forwards(app_label, schema_editor, from_state, to_state)

    def database_backwards(self, app_label, schema_editor, from_state, to_state):
        if schema_editor.connection.vendor == "postgresql":
            super().database_backwards(app_label, schema_editor, from_state, to_state)


class Migration(migrations.Migration):
    dependencies = [("leasing", "0001_initial")]

    operations = [
        BtreeGistExtension(),
        PostgresOnlySQL(CREATE, DROP),
    ]
