"""Provisioning backends, chosen by the CARDPOOL_BACKEND setting (default ``local``).

A node group can use another backend: a node labelled ``backend=<name>`` (sync_slurm sets
``backend=slurm`` on the nodes it imports) has its leases handed over by that backend;
``get_backend(holding=…)`` picks it from the holding's nodes.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from django.conf import settings
from django.utils.module_loading import import_string

from leasing.backends.base import (
    Backend,
    BackendError,
    Holding,
    NodeCards,
    PermanentBackendError,
    SessionSpec,
    TransientBackendError,
)

logger = logging.getLogger(__name__)

BACKENDS = {
    "local": "leasing.backends.local.LocalBackend",
    "slurm": "leasing.backends.slurm.SlurmBackend",
    "kubernetes": "leasing.backends.kubernetes.KubernetesBackend",
}
NODE_LABEL = "backend"

__all__ = [
    "Backend",
    "BackendError",
    "Holding",
    "NodeCards",
    "PermanentBackendError",
    "SessionSpec",
    "TransientBackendError",
    "backend_name_for",
    "get_backend",
]


def get_backend(name: str | None = None, *, holding: Holding | None = None) -> Backend:
    """The backend *name* (a key of BACKENDS or a dotted class path), else the holding's, else
    the configured default."""
    name = name or (holding.backend if holding is not None else None)
    name = name or settings.CARDPOOL["BACKEND"]
    return import_string(BACKENDS.get(name, name))()


def backend_name_for(lease_id: int, node_labels: list[Mapping]) -> str:
    """The ``backend`` label of a lease's nodes (*node_labels* in hostname order), or the
    configured default.

    A lease's cards normally sit on one node; should they span node groups of different
    backends, the first node (by hostname) decides and a warning is logged.
    """
    default = settings.CARDPOOL["BACKEND"]
    names = [(labels or {}).get(NODE_LABEL) or default for labels in node_labels]
    if len(set(names)) > 1:
        logger.warning(
            "lease %s spans backends %s; using %s", lease_id, sorted(set(names)), names[0]
        )
    return names[0] if names else default
