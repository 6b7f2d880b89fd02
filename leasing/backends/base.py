"""The provisioning backend interface: how a lease's cards are handed over and taken back."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from leasing.models import Lease


class BackendError(Exception):
    """A backend could not do what was asked."""


class TransientBackendError(BackendError):
    """Worth retrying: a timeout, a busy controller, a lost connection."""


class PermanentBackendError(BackendError):
    """Retrying will not help; the message says why (shown to the user)."""


class Backend:
    """Hands cards over and takes them back. Every call is idempotent on the lease id,
    and is called only from Celery tasks."""

    name = "base"

    def provision(self, lease: Lease) -> dict:
        """Make the lease's allocated cards usable by its holder; return the access details."""
        raise NotImplementedError

    def release(self, lease: Lease) -> None:
        """Take the cards back. Releasing something already released is not an error."""
        raise NotImplementedError

    def status(self, lease: Lease) -> str:
        """'active', 'released' or 'unknown', as the backend sees it."""
        raise NotImplementedError
