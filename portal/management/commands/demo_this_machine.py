"""The demo's own machine as a node: two demo cards, the lab's environment, a node token for
its cardpool-agent, and the demo users' sessions run as this machine's Unix user.

Run by ``cardpool.py demo`` when it can run sessions (nginx and JupyterLab are installed);
idempotent.
"""

from __future__ import annotations

import getpass
import os
import socket
import sys
from decimal import Decimal
from pathlib import Path

from django.core.management.base import BaseCommand
from django.db import transaction

from inventory.models import Card, CardModel, Node, Region, validate_hostname
from inventory.telemetry import node_token_issue
from leasing.models import Environment
from portal.models import Profile
from portal.secret_key import secret_file_write

MODEL = "demo-card"


def this_hostname() -> str:
    name = socket.gethostname().split(".")[0].lower()
    try:
        validate_hostname(name)
    except Exception:  # noqa: BLE001 - an odd hostname: a fixed one serves the demo
        return "this-machine"
    return name


class Command(BaseCommand):
    help = "Register this machine as a demo node whose agent runs JupyterLab sessions."

    def add_arguments(self, parser):
        parser.add_argument("--token-file", required=True, help="where to write the node token")
        parser.add_argument(
            "--unix-user",
            default="",
            help="the Unix user sessions run as when the agent is not root (default: this one)",
        )

    @transaction.atomic
    def handle(self, *args, token_file, unix_user, **options):
        region, _ = Region.objects.get_or_create(
            slug="this-machine", defaults={"name": "本机 This machine"}
        )
        model, _ = CardModel.objects.get_or_create(
            slug=MODEL,
            defaults={
                "vendor": "other",
                "name": "Demo card (this machine)",
                "memory_gb": Decimal("1"),
                "price_per_hour": Decimal("0"),
                "software_stack": "Python",
                "visible_devices_env": "CUDA_VISIBLE_DEVICES",
                # This machine's desktop draws with Mesa (llvmpipe): offered, and said so.
                "graphics": True,
            },
        )
        node, _ = Node.objects.get_or_create(
            hostname=this_hostname(),
            defaults={"region": region, "labels": {"demo": "true", "backend": "local"}},
        )
        # The demo's agent reports its sessions on loopback (cardpool.py --session-address).
        if "127.0.0.1" not in node.session_addresses:
            node.session_addresses = [*node.session_addresses, "127.0.0.1"]
            node.save(update_fields=["session_addresses"])
        for index in range(2):
            Card.objects.get_or_create(
                node=node,
                index=index,
                defaults={"card_model": model, "uuid": f"{node.hostname}-demo{index}"},
            )
        env, _ = Environment.objects.update_or_create(
            slug="demo-python",
            defaults={
                "name": "Python + JupyterLab (this machine)",
                "stack_family": "python",
                "stack_version": f"{sys.version_info.major}.{sys.version_info.minor}",
                "vendors": ["other", "nvidia"],
                "entry_kind": Environment.Entry.VENV,
                "entry": sys.prefix,
            },
        )
        env.card_models.add(model)
        # Not root: the agent can start sessions only as its own Unix user.
        if os.geteuid() != 0 or unix_user:
            Profile.objects.update(slurm_user=unix_user or getpass.getuser())
        path = Path(token_file)
        path.parent.mkdir(parents=True, exist_ok=True)
        secret_file_write(path, node_token_issue(node=node))
        self.stdout.write(
            f"this machine is node {node.hostname} with 2 demo cards; token in {path}"
        )
