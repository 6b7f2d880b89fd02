"""``manage.py node_token HOSTNAME``: issue the token a node's cardpool-agent posts with."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from inventory.models import Node
from inventory.telemetry import node_token_issue, node_token_revoke


class Command(BaseCommand):
    help = (
        "Issue the agent token of a node and print it (only now: the portal keeps only its "
        "hash). A node that has a token keeps it unless --rotate is given; the old token "
        "stops working at once. --revoke takes the token away."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("hostname", help="the node's hostname, as in the inventory")
        action = parser.add_mutually_exclusive_group()
        action.add_argument(
            "--rotate", action="store_true", help="replace the node's current token"
        )
        action.add_argument("--revoke", action="store_true", help="remove the node's token")

    def handle(self, *args: Any, **options: Any) -> None:
        hostname = options["hostname"]
        node = Node.objects.filter(hostname=hostname).first()
        if node is None:
            raise CommandError(f"No node {hostname!r} in the inventory.")
        if options["revoke"]:
            node_token_revoke(node=node)
            self.stderr.write(f"The agent token of {hostname} is revoked.")
            return
        if node.agent_token_hash and not options["rotate"]:
            raise CommandError(
                f"{hostname} already has an agent token. Use --rotate to replace it "
                "(the old one stops working at once)."
            )
        token = node_token_issue(node=node)
        # The token alone on stdout, so that scripts can capture it; the advice on stderr.
        self.stdout.write(token)
        self.stderr.write(
            f"Agent token for {hostname}: shown once, store it on the node (e.g. in "
            "/etc/cardpool/agent-token, mode 600)."
        )
