"""The provisioning backend interface: how a lease's cards are handed over and taken back.

A backend gets plain data (``Holding``: who, which cards on which nodes, until when) and
answers with access details or an error; it never reads or writes the lease's records.
``leasing.lifecycle.provisioning.holding_of`` builds a Holding from a lease.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime


class BackendError(Exception):
    """A backend could not do what was asked."""


class TransientBackendError(BackendError):
    """Worth retrying: a timeout, a busy controller, a lost connection."""


class PermanentBackendError(BackendError):
    """Retrying will not help; the message says why (shown to the user)."""


@dataclass(frozen=True)
class NodeCards:
    """The cards a lease holds now on one node (a swapped-out card no longer counts)."""

    hostname: str
    indices: tuple[int, ...]
    labels: Mapping = field(default_factory=dict)


@dataclass(frozen=True)
class Holding:
    """What a backend needs to know about one lease, read from the records by the caller."""

    lease_id: int
    username: str
    slurm_user: str
    status: str
    card_model_slug: str
    devices_env: str
    end_at: datetime
    nodes: tuple[NodeCards, ...] = ()
    # The backend of the lease's nodes (their ``backend`` label), chosen from every node it
    # ever held: when a release runs, its current cards are already cut away.
    backend: str = ""
    # Read by the kubernetes backend (a pod in the team's namespace, at the lease's priority,
    # running its environment's image, asking the vendor's device resource).
    team: str = ""
    priority: str = ""
    environment: str = ""
    vendor: str = ""


@dataclass(frozen=True)
class SessionSpec:
    """A browser session to run on one node of a holding: a bash script (read from stdin,
    so its secrets never show in a process list) that ends by exec-ing the program, which
    must listen on ``port`` of the node's address (``$CARDPOOL_SESSION_IP``)."""

    session_id: int
    host: str
    port: int
    script: str


class Backend:
    """Hands cards over and takes them back. Every call is idempotent on the lease id,
    and is called only from Celery tasks — except the provisioning of a backend that declares
    ``provisions_inline``."""

    name = "base"
    # True when ``provision`` only computes the access details from the Holding — it talks to
    # nothing outside the portal, cannot block, and leaves nothing to undo — so a lease its
    # request placed at once may be handed over by the web process right after the placement
    # commits, instead of by a worker (``lifecycle.handover.hand_over_placed``). Every other
    # call, and every hand-over of a lease started by the queue or the tick, runs in a task.
    provisions_inline = False

    def provision(self, holding: Holding) -> dict:
        """Make the holding's cards usable by its holder; return the access details."""
        raise NotImplementedError

    def release(self, holding: Holding) -> None:
        """Take the cards back. Releasing something already released is not an error."""
        raise NotImplementedError

    def status(self, holding: Holding) -> str:
        """'active', 'released' or 'unknown', as the backend sees it."""
        raise NotImplementedError

    def session_start(self, holding: Holding, spec: SessionSpec) -> dict:
        """Start *spec* on its node as the holder, inside the lease's hold on the cards;
        return where it runs (``address`` to reach it, and what ``session_stop`` needs), or
        ``{"by": "agent"}`` when the node's agent starts it."""
        raise PermanentBackendError(f"The {self.name} backend cannot run sessions.")

    def session_stop(self, holding: Holding, placement: dict) -> None:
        """Stop a session started by ``session_start``; stopping a stopped one is no error."""
        return None

    def change(self, holding: Holding) -> dict:
        """The holding's cards changed while it runs (a faulty card swapped, a resize in
        place): make the backend hold exactly ``holding.nodes`` and return the new access
        details. Calling it again with the same holding changes nothing more."""
        raise NotImplementedError

    def checkpoint(self, holding: Holding, *, signal: str, command: str) -> dict:
        """The lease is being preempted: deliver its checkpoint *signal* (a name such as
        ``USR1``) and/or run its checkpoint *command* on its nodes, so the job saves its state
        during the grace. Returns what was done (kept on the lease's timeline)."""
        raise PermanentBackendError(f"The {self.name} backend cannot deliver a checkpoint.")
