"""Provisioning backends, chosen by the CARDPOOL_BACKEND setting (default ``local``)."""

from __future__ import annotations

from django.conf import settings
from django.utils.module_loading import import_string

from leasing.backends.base import (
    Backend,
    BackendError,
    PermanentBackendError,
    TransientBackendError,
)

BACKENDS = {
    "local": "leasing.backends.local.LocalBackend",
}

__all__ = [
    "Backend",
    "BackendError",
    "PermanentBackendError",
    "TransientBackendError",
    "get_backend",
]


def get_backend(name: str | None = None) -> Backend:
    """The configured backend; *name* may be a key of BACKENDS or a dotted class path."""
    name = name or settings.CARDPOOL["BACKEND"]
    return import_string(BACKENDS.get(name, name))()
