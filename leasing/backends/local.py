"""The embedded default: the portal's own records are the truth.

A lab that shares a few servers by convention needs exactly this: the holder is told
which host and which device indices are theirs, and the environment variable their
vendor's runtime reads (CUDA_VISIBLE_DEVICES, ASCEND_RT_VISIBLE_DEVICES, ...).
"""

from __future__ import annotations

from collections import defaultdict

from django.utils import timezone

from leasing.backends.base import Backend


class LocalBackend(Backend):
    name = "local"

    def provision(self, lease) -> dict:
        return access_details(lease)

    def release(self, lease) -> None:
        return None

    def status(self, lease) -> str:
        return "active" if lease.status == "active" else "released"


def access_details(lease) -> dict:
    """Host, device indices and environment per node, from the lease's allocations."""
    env_name = lease.card_model.devices_env
    per_node: dict[str, list[int]] = defaultdict(list)
    current = lease.allocations.filter(end_at__gt=timezone.now())  # not a card swapped out
    for hostname, index in current.values_list("card__node__hostname", "card__index"):
        per_node[hostname].append(index)
    nodes = []
    for hostname, indices in sorted(per_node.items()):
        devices = ",".join(str(i) for i in sorted(indices))
        nodes.append(
            {
                "host": hostname,
                "devices": sorted(indices),
                "env": {env_name: devices},
                "shell": f"ssh {lease.user.username}@{hostname} && export {env_name}={devices}",
            }
        )
    return {"backend": "local", "env_var": env_name, "nodes": nodes}
