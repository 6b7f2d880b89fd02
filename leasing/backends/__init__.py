"""Provisioning backends, chosen by the CARDPOOL_BACKEND setting (default ``local``).

A node group can use another backend: a node labelled ``backend=<name>`` (sync_slurm sets
``backend=slurm`` on the nodes it imports) has its leases handed over by that backend;
``get_backend(lease=…)`` picks it from the lease's nodes.
"""

from __future__ import annotations

import logging

from django.conf import settings
from django.utils.module_loading import import_string

from leasing.backends.base import (
    Backend,
    BackendError,
    PermanentBackendError,
    TransientBackendError,
)

logger = logging.getLogger(__name__)

BACKENDS = {
    "local": "leasing.backends.local.LocalBackend",
    "slurm": "leasing.backends.slurm.SlurmBackend",
}
NODE_LABEL = "backend"

__all__ = [
    "Backend",
    "BackendError",
    "PermanentBackendError",
    "TransientBackendError",
    "backend_name_for_lease",
    "get_backend",
]


def get_backend(name: str | None = None, *, lease=None) -> Backend:
    """The backend *name* (a key of BACKENDS or a dotted class path), else the one of the
    lease's nodes, else the configured default."""
    name = name or (backend_name_for_lease(lease) if lease is not None else None)
    name = name or settings.CARDPOOL["BACKEND"]
    return import_string(BACKENDS.get(name, name))()


def backend_name_for_lease(lease) -> str:
    """The ``backend`` label of the lease's nodes, or the configured default.

    A lease's cards normally sit on one node; should they span node groups of different
    backends, the first node (by hostname) decides and a warning is logged.
    """
    from inventory.models import Node

    default = settings.CARDPOOL["BACKEND"]
    labels = (
        Node.objects.filter(cards__allocations__lease=lease)
        .distinct()
        .order_by("hostname")
        .values_list("labels", flat=True)
    )
    names = [(lab or {}).get(NODE_LABEL) or default for lab in labels]
    if len(set(names)) > 1:
        logger.warning(
            "lease %s spans backends %s; using %s", lease.pk, sorted(set(names)), names[0]
        )
    return names[0] if names else default
