"""The embedded default: the portal's own records are the truth.

A lab that shares a few servers by convention needs exactly this: the holder is told
which host and which device indices are theirs, and the environment variable their
vendor's runtime reads (CUDA_VISIBLE_DEVICES, ASCEND_RT_VISIBLE_DEVICES, ...).
"""

from __future__ import annotations

from leasing.backends.base import Backend, Holding, SessionSpec


class LocalBackend(Backend):
    name = "local"
    # The records are the truth: provisioning is reading the cards back, nothing to call.
    provisions_inline = True

    def provision(self, holding: Holding) -> dict:
        return access_details(holding)

    def release(self, holding: Holding) -> None:
        return None

    def status(self, holding: Holding) -> str:
        return "active" if holding.status == "active" else "released"

    def session_start(self, holding: Holding, spec: SessionSpec) -> dict:
        # The node's cardpool-agent asks for its sessions and starts them (inventory/agent.py).
        return {"by": "agent"}

    def change(self, holding: Holding) -> dict:
        # Nothing to hold: the records are the truth; the holder is told the new devices.
        return access_details(holding)

    def checkpoint(self, holding: Holding, *, signal: str, command: str) -> dict:
        # Nothing runs on the nodes from here: the node's agent (``cardpool-agent
        # --checkpoints``) asks the portal for its leases being preempted and delivers the
        # signal to the processes on their cards, or runs the command (docs/operations.md).
        return {"via": "agent", "hosts": [node.hostname for node in holding.nodes]}


def access_details(holding: Holding) -> dict:
    """Host, device indices and environment per node, from the holding's current cards. The
    ssh line is not stored: the portal builds it when read, with the holder's session account
    (``leasing.workbench.access``)."""
    env_name = holding.devices_env
    nodes = []
    for node in sorted(holding.nodes, key=lambda n: n.hostname):
        indices = sorted(node.indices)
        devices = ",".join(str(i) for i in indices)
        nodes.append(
            {
                "host": node.hostname,
                "devices": indices,
                "env": {env_name: devices},
            }
        )
    return {"backend": "local", "env_var": env_name, "nodes": nodes}
