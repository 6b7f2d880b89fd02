"""What the lease page shows about working on the cards."""

from __future__ import annotations

from dataclasses import dataclass, field

from leasing.choices import LeaseStatus
from leasing.models import Lease, Session
from leasing.workbench import access, environments, offers, sessions, workspace


@dataclass
class Workbench:
    session: Session | None
    environments: list = field(default_factory=list)
    ssh_commands: list[str] = field(default_factory=list)
    workspaces: list = field(default_factory=list)
    is_holder: bool = False
    keys: int = 0
    offers: dict = field(default_factory=dict)
    failure: str = ""


def lease_workbench(lease: Lease, user) -> Workbench:
    """The latest session, the environments that fit, a ready ssh command per node, and the
    holder's workspaces with their measured size."""
    is_holder = lease.user_id == user.pk
    session = Session.objects.filter(lease=lease).order_by("-pk").first()
    commands = []
    offered = offers.lease_offers(lease) if is_holder else {}
    keys_refused = is_holder and not offered["keys"].ok  # the offers say why instead
    if lease.status == LeaseStatus.ACTIVE and not keys_refused:
        account = access.account_for(lease)
        for node in (lease.access or {}).get("nodes", []):
            if not node.get("host"):
                continue
            if node.get("job_id"):
                # pam_slurm_adopt puts the ssh login into the lease's job on that node.
                commands.append(access.access_line(account, node["host"]))
            else:
                commands.append(access.access_line(account, node["host"], node.get("env")))
    return Workbench(
        session=session,
        environments=environments.environments_for(lease.card_model) if is_holder else [],
        ssh_commands=commands,
        workspaces=workspace.workspace_usage(user=lease.user, team=lease.team),
        is_holder=is_holder,
        keys=lease.user.ssh_keys.count(),
        offers=offered,
        failure=sessions.failure_message(session) if session else "",
    )
