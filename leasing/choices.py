"""Every choice a lease, a warning or a notice can take, and the named groups of lease states.

One name per set of states (NetBox ``core/choices.py``); the rest of the project filters by
these groups, never by a list of its own. Imports only Django.
"""

from __future__ import annotations

from django.db import models
from django.utils.translation import gettext_lazy as _
from django.utils.translation import pgettext_lazy


class LeaseStatus(models.TextChoices):
    PENDING_APPROVAL = "pending_approval", _("Pending approval")
    QUEUED = "queued", _("Queued")
    SCHEDULED = "scheduled", _("Scheduled")
    PROVISIONING = "provisioning", _("Provisioning")
    ACTIVE = "active", _("Active")
    RELEASING = "releasing", _("Releasing")
    RELEASE_FAILED = "release_failed", _("Release failed")
    ENDED = "ended", _("Ended")
    REJECTED = "rejected", _("Rejected")
    CANCELLED = "cancelled", _("Cancelled")
    FAILED = "failed", _("Failed")


# Named groups of states. Each set has one name; the comments say what each is for.
# Waiting for approval or for cards: nothing booked yet.
WAITING_STATES = (LeaseStatus.PENDING_APPROVAL, LeaseStatus.QUEUED)
# Cards booked for the lease's window, now or later: what "concurrent cards" counts.
BOOKED_STATES = (LeaseStatus.SCHEDULED, LeaseStatus.PROVISIONING, LeaseStatus.ACTIVE)
# The cards are the holder's right now (the backend has them or is handing them over).
RUNNING_STATES = (LeaseStatus.PROVISIONING, LeaseStatus.ACTIVE)
# The holder has lost the lease (usage stopped at ``ended_at``); the backend is taking the
# cards back, or failed to for good and an operator must resolve it. A failed release keeps
# its last cards out of placement (``Allocation.objects.held_back``) until then.
ENDING_STATES = (LeaseStatus.RELEASING, LeaseStatus.RELEASE_FAILED)
# ``Lease.end_reason`` is set exactly in these (a database check): set when the release
# begins, read by every later step. A hand-over that failed says why in ``failure_reason``.
REASONED_STATES = ENDING_STATES + (LeaseStatus.ENDED,)
# A backend holds something for the lease: handed over, held, or being taken back.
BACKEND_STATES = (LeaseStatus.PROVISIONING, LeaseStatus.ACTIVE, *ENDING_STATES)
# Booked or still being taken back: who holds what on the team page.
HOLDING_STATES = BOOKED_STATES + ENDING_STATES
OPEN_STATES = WAITING_STATES + HOLDING_STATES
TERMINAL_STATES = (
    LeaseStatus.ENDED,
    LeaseStatus.REJECTED,
    LeaseStatus.CANCELLED,
    LeaseStatus.FAILED,
)
# The holding is over and its usage is recorded (billing.usage).
RECORDED_STATES = (LeaseStatus.ENDED, LeaseStatus.FAILED)
# What may be done to a lease in each state: the services check these, and the pages show
# their buttons from them (``Lease.actions``), so a button is never offered that would fail.
RELEASABLE_STATES = RUNNING_STATES
CANCELLABLE_STATES = (LeaseStatus.PENDING_APPROVAL, LeaseStatus.QUEUED, LeaseStatus.SCHEDULED)
EXTENDABLE_STATES = BOOKED_STATES
RESIZABLE_STATES = (LeaseStatus.ACTIVE,)
# Never given cards: no start or end of its own to show (the timeline says when it was asked).
UNHELD_STATES = (
    LeaseStatus.PENDING_APPROVAL,
    LeaseStatus.QUEUED,
    LeaseStatus.CANCELLED,
    LeaseStatus.REJECTED,
)
# Leases that use budget: admitted ones, running or done. Waiting for approval, cancelled
# and rejected ones do not.
CHARGED_STATES = (LeaseStatus.QUEUED, *HOLDING_STATES, *RECORDED_STATES)


class EndReason(models.TextChoices):
    EXPIRED = "expired", _("Expired")
    RELEASED = "released", _("Released")
    PREEMPTED = "preempted", _("Preempted")
    IDLE = "idle", _("Idle")
    ADMIN = "admin", _("Ended by an operator")
    FAILED = "failed", _("Failed")
    DRAIN = "drain", _("Its node went into maintenance")
    FAULTY = "faulty", _("A card failed and no spare was free")


class PreemptWhy(models.TextChoices):
    """Why a running lease is being preempted (what its holder is told)."""

    PRIORITY = "priority", _("A higher-priority request needs its cards")
    SHARE = "share", _("A team's guaranteed share needs its cards back")
    FAIR_SHARE = "fair_share", _("A team below its fair share needs its cards")


class StallReason(models.TextChoices):
    """Why a waiting lease can never be placed as asked (set by the queue pass)."""

    TOO_FEW_CARDS = "too_few_cards", _("Fewer cards of this model exist than it asks for")
    CARDS_OUT_OF_SERVICE = (
        "out_of_service",
        _("Too many cards of this model are faulty, draining or in maintenance"),
    )
    NO_NODE_BIG_ENOUGH = (
        "no_node_big_enough",
        _("No single node has that many usable cards of this model"),
    )
    UNHEALTHY = (
        "unhealthy",
        _(
            "Cards of this model are kept out of placement until they recover: too hot, or their node stopped reporting"
        ),
    )
    REQUIREMENTS = (
        "requirements",
        _(
            "Too few cards of this model are on nodes meeting its requirements (region, network, stack version)"
        ),
    )


class Priority(models.TextChoices):
    CRITICAL = "critical", _("Critical")
    HIGH = "high", _("High")
    NORMAL = "normal", _("Normal")
    PREEMPTIBLE = "preemptible", _("Preemptible")


# Higher rank is served first.
PRIORITY_RANK = {
    Priority.CRITICAL: 300,
    Priority.HIGH: 200,
    Priority.NORMAL: 100,
    Priority.PREEMPTIBLE: 0,
}


def queue_rank(priority: str, purpose: str = "") -> int:
    """The rank a request waits with: its class's, raised to the class the operator gives
    its purpose (``CARDPOOL["PURPOSE_PRIORITY"]``, e.g. inference=high). Never lowered, and a
    preemptible request keeps its rank (it asked to be cheap and interruptible)."""
    from django.conf import settings

    rank = PRIORITY_RANK.get(priority, PRIORITY_RANK[Priority.NORMAL])
    if priority == Priority.PREEMPTIBLE:
        return rank
    lifted = settings.CARDPOOL["PURPOSE_PRIORITY"].get(purpose)
    return max(rank, PRIORITY_RANK[lifted]) if lifted in PRIORITY_RANK else rank


class StartPolicy(models.TextChoices):
    """When a request may start, besides its asked start (off-peak windows, site time zone)."""

    AS_ASKED = "", _("As asked")
    NEXT_OFF_PEAK = "next_off_peak", _("In the next off-peak window")
    OFF_PEAK_ONLY = "off_peak_only", _("Only inside an off-peak window")


class Purpose(models.TextChoices):
    TRAINING = "training", _("Training")
    FINE_TUNING = "fine_tuning", _("Fine-tuning")
    INFERENCE = "inference", _("Inference")
    RENDERING = "rendering", _("Rendering / simulation")
    DEVELOPMENT = "development", _("Development")


class WarningKind(models.TextChoices):
    EXPIRY = "expiry", _("Lease ending")
    IDLE = "idle", _("Cards idle")
    PREEMPTION = "preemption", _("Preemption")
    DRAIN = "drain", _("Node draining")
    FAULT = "fault", _("Card faulty")


class Channel(models.TextChoices):
    INAPP = "inapp", _("In the portal")
    EMAIL = "email", _("Email")
    WEBHOOK = "webhook", _("Webhooks")


class Kind(models.TextChoices):
    """The events people can be told about (``Notification.kind``)."""

    LEASE_ACTIVE = "lease_active", _("Lease active")
    LEASE_QUEUED = "lease_queued", _("Lease queued")
    LEASE_STARTED_FROM_QUEUE = (
        "lease_started_from_queue",
        _("Lease started from the queue"),
    )
    LEASE_EXPIRING = "lease_expiring", _("Lease ending soon")
    LEASE_ENDED = "lease_ended", _("Lease ended")
    LEASE_FAILED = "lease_failed", _("Lease failed")
    CARD_SWAPPED = "card_swapped", _("Card swapped")
    LEASE_RESTARTING = "lease_restarting", _("Lease restarting")
    RELEASE_FAILED = "release_failed", _("Release failed")
    IDLE_WARNING = "idle_warning", _("Cards idle")
    PREEMPTION_WARNING = "preemption_warning", _("Preemption warning")
    DRAIN_WARNING = "drain_warning", _("Node maintenance")
    LEASE_STALLED = "lease_stalled", _("Lease cannot start")
    APPROVAL_REQUESTED = "approval_requested", _("Approval requested")
    APPROVAL_DECIDED = "approval_decided", _("Approval decided")
    BUDGET_80 = "budget_80", _("Team budget at 80%")
    BUDGET_100 = "budget_100", _("Team budget used up")
    POOL_ALERT = "pool_alert", _("Pool alert")
    CARD_HEALTH = "card_health", _("Card health")
    STATEMENT_ISSUED = "statement_issued", _("Monthly statement issued")
    WORKSPACE_NEAR_LIMIT = "workspace_near_limit", _("Workspace nearly full")
    # Someone left (the directory or an operator let them go), or the directory left a team
    # without a lead: told to the team's leads and to operators (leasing.directory).
    DIRECTORY = "directory", _("Directory change")


# --- pool health (leasing.health) ---------------------------------------------------------


class AlertKind(models.TextChoices):
    """The pool-health rules; each has a Prometheus counterpart in
    deploy/prometheus/cardpool-rules.yml (label ``cardpool_rule``)."""

    CARD_HOT = "card_hot", _("Card too hot")
    POWER_LIMIT = "power_limit", _("Card at its power limit")
    MEMORY_FULL = "memory_full", _("Card memory nearly full")
    NODE_SILENT = "node_silent", _("Node silent")
    FAILURE_RATE = "failure_rate", _("Lease failure rate")
    CARD_IDLE = "card_idle", _("Leased card idle")


class AlertSeverity(models.TextChoices):
    INFO = "info", _("Info")
    WARNING = "warning", _("Warning")
    CRITICAL = "critical", _("Critical")


class AlertStatus(models.TextChoices):
    OPEN = "open", pgettext_lazy("alert", "Open")
    ACKNOWLEDGED = "acknowledged", _("Acknowledged")
    RESOLVED = "resolved", _("Resolved")


# An alert that still lasts (one per rule and subject at a time: a partial unique constraint).
LASTING_ALERT_STATES = (AlertStatus.OPEN, AlertStatus.ACKNOWLEDGED)
