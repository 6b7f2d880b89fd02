"""List the stored usernames that break today's username rule (portal/usernames.py)."""

from __future__ import annotations

from django.core.management.base import BaseCommand

from portal.usernames import usernames_breaking_the_rule


class Command(BaseCommand):
    help = (
        "List users whose names the username rule would refuse now (invisible, control or "
        "markup characters, mixed scripts, look-alikes of another name). Nothing is renamed."
    )

    def handle(self, *args, **options):
        found = usernames_breaking_the_rule()
        for pk, name, problems in found:
            self.stdout.write(f"{pk}\t{ascii(name)}\t{name}\t{'; '.join(problems)}")
        self.stderr.write(f"{len(found)} username(s) break the rule; none was changed.")
