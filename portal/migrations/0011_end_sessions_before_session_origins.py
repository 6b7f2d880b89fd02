"""End every portal login that existed before sessions moved to their own origins.

Until then the session proxy passed the browser's cookies on to the node, so a node (or a
Jupyter extension in a shared environment) may hold a copy of anyone's portal session that
opened a session there. The cookies are renamed as well (``__Host-`` under HTTPS); this
deletes the stored sessions so no copied one can be used. Everyone signs in once again.
"""

from django.db import migrations


def end_sessions(apps, schema_editor):
    Session = apps.get_model("sessions", "Session")
    Session.objects.all().delete()


class Migration(migrations.Migration):
    dependencies = [
        ("portal", "0010_profile_session_language"),
        ("sessions", "0001_initial"),
    ]

    operations = [migrations.RunPython(end_sessions, migrations.RunPython.noop)]
