from django.core.management.base import BaseCommand

from inventory.services import statistics_refresh
from portal import demo


class Command(BaseCommand):
    help = "Load the demo pool, teams and users (idempotent: running it again changes nothing)."

    def handle(self, *args, **options):
        inventory = demo.seed_inventory()
        statistics_refresh()  # before the demo leases are placed
        users = demo.seed_people()
        quotas = demo.seed_quotas()
        history = demo.seed_history()
        leases = demo.seed_leases()
        self.stdout.write(
            f"demo data: {inventory['regions']} regions, {inventory['nodes']} nodes, {inventory['cards']} cards, "
            f"{users} users, {quotas} quota rules, {history} past leases and {leases} leases created"
        )
