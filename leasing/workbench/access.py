"""The access line a lease's holder pastes to reach their cards on a node of the local backend:

    ssh -t <account>@<host> 'export CUDA_VISIBLE_DEVICES=0,1; exec $SHELL -l'

one command that logs in as the session account (``accounts.account_name``, the site's
``CARDPOOL_SESSION_ACCOUNTS``) and leaves the holder in a login shell on the node with the
vendor's visible-devices variable set there. Built when read (lease page, workbench, API), never
stored: leases provisioned before a fix or a change of the account mode show the right line.
"""

from __future__ import annotations

import re
import shlex

from leasing.workbench import accounts

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")  # what a shell accepts after ``export``


def access_line(account: str, host: str, env: dict | None = None) -> str:
    """``ssh -t account@host 'export K=V …; exec $SHELL -l'``, every word quoted for a POSIX
    shell (shlex) so that it works as printed; a plain ``ssh account@host`` without variables.
    Variable names a shell would refuse are left out (``CardModel.devices_env`` is free text)."""
    target = shlex.quote(f"{account}@{host}")
    exports = [
        f"{name}={shlex.quote(str(value))}"
        for name, value in sorted((env or {}).items())
        if _NAME.match(str(name))
    ]
    if not exports:
        return f"ssh {target}"
    remote = f"export {' '.join(exports)}; exec $SHELL -l"
    return f"ssh -t {target} {shlex.quote(remote)}"


def account_for(lease) -> str:
    """The Unix account *lease*'s holder logs in as: the Slurm user the backend recorded on
    Slurm, else the session account (``CARDPOOL_SESSION_ACCOUNTS``)."""
    access = lease.access or {}
    recorded = access.get("slurm_user") if access.get("backend") == "slurm" else ""
    return recorded or accounts.account_name(lease.user)


def access_for(lease) -> dict:
    """*lease*'s access details as read (a copy; the stored ones are not changed): on the local
    backend each node's ``shell`` is the access line for the holder's account now; elsewhere
    the backend's own line (srun, kubectl exec) stays and a node without one gets the ssh
    line."""
    access = lease.access or {}
    if not access.get("nodes"):
        return access
    local = access.get("backend") == "local"
    account = None
    nodes = []
    for node in access["nodes"]:
        if node.get("host") and (local or not node.get("shell")):
            account = account or account_for(lease)
            node = {**node, "shell": access_line(account, node["host"], node.get("env"))}
        nodes.append(node)
    return {**access, "nodes": nodes}
