"""``manage.py ldap_sync_users``: one pass of the directory sync now (people, Unix accounts,
teams from groups, leavers) — the periodic job's work. It takes the place of
django-python3-ldap's command of the same name, which only created and updated accounts."""

from __future__ import annotations

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError


class Command(BaseCommand):
    help = "Sync people, teams from groups and leavers from the LDAP directory now."

    def handle(self, *args, **options):
        from leasing.directory.sync import directory_sync_run

        if not getattr(settings, "LDAP_AUTH_URL", None):
            raise CommandError("LDAP is not configured (set CARDPOOL_LDAP_URL).")
        try:
            counts = directory_sync_run()
        except ConnectionError as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(", ".join(f"{key}: {value}" for key, value in counts.items()))
