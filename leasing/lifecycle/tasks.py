"""Celery tasks of a lease's life: thin, take ids, call services; safe to run twice or at once.

Each task's name is pinned to the one it had before the code moved into packages, so
messages already queued and the beat schedule keep working; callers send work by that
name (``leasing.enqueue``) and never import this module.
"""

from __future__ import annotations

import logging
from datetime import timedelta

from celery import shared_task
from django.conf import settings
from django.db.models import Q
from django.utils import timezone

from leasing.backends import (
    BackendError,
    PermanentBackendError,
    TransientBackendError,
    get_backend,
)
from leasing.choices import RUNNING_STATES, Kind, LeaseStatus
from leasing.enqueue import enqueue
from leasing.lifecycle import (
    change_decisions,
    checkpoints,
    endings,
    kubernetes,
    maintenance,
    provisioning,
    reconcile,
    session_steps,
)
from leasing.models import Lease
from leasing.notify import wording
from leasing.scheduler import moves, plancache
from leasing.scheduler.eta import lease_told_start
from leasing.scheduler.refresh import queue_refresh as refresh_slice
from leasing.scheduler.refresh import queue_tick
from leasing.scheduler.snapshot import team_work_ahead
from leasing.teams import fairshare
from leasing.workbench import workspace

logger = logging.getLogger(__name__)

REFRESH_SLICES_MAX = 500  # a queue of thousands is refreshed in far fewer

BATCH = 500
MAX_BACKEND_RETRIES = 5


def _backoff(retries: int) -> int:
    return min(2**retries, 60)


@shared_task(
    name="leasing.tasks.provision_lease", bind=True, max_retries=MAX_BACKEND_RETRIES, acks_late=True
)
def provision_lease(self, lease_id: int) -> None:
    try:
        provisioning.provision_step(lease_id=lease_id, attempt=self.request.retries + 1)
    except TransientBackendError as exc:
        if self.request.retries >= self.max_retries:
            provisioning.lease_fail(lease_id=lease_id, reason=f"The backend kept failing: {exc}")
            return
        raise self.retry(exc=exc, countdown=_backoff(self.request.retries)) from exc
    except PermanentBackendError as exc:
        provisioning.lease_fail(lease_id=lease_id, reason=str(exc))


@shared_task(name="leasing.tasks.checkpoint_lease", bind=True, max_retries=3, acks_late=True)
def checkpoint_lease(self, lease_id: int) -> None:
    """A lease marked for preemption declared a checkpoint: deliver it through its backend."""
    try:
        provisioning.checkpoint_step(lease_id=lease_id, attempt=self.request.retries + 1)
    except TransientBackendError as exc:
        if self.request.retries >= self.max_retries:
            logger.warning("lease %s: checkpoint not delivered: %s", lease_id, exc)
            return
        raise self.retry(exc=exc, countdown=_backoff(self.request.retries)) from exc


@shared_task(name="leasing.tasks.provision_batch", acks_late=True)
def provision_batch(lease_ids: list[int]) -> None:
    """Hand over the leases one queue pass started, in one message. A lease whose backend
    fails here gets its own ``provision_lease``, with its retries and backoff."""
    for lease_id in lease_ids:
        try:
            provisioning.provision_step(lease_id=lease_id)
        except PermanentBackendError as exc:
            provisioning.lease_fail(lease_id=lease_id, reason=str(exc))
        except Exception:
            logger.warning(
                "lease %s: hand-over failed in a batch; retried alone", lease_id, exc_info=True
            )
            enqueue("leasing.tasks.provision_lease", lease_id, countdown=_backoff(0))


@shared_task(
    name="leasing.tasks.release_lease",
    bind=True,
    max_retries=provisioning.RELEASE_ATTEMPTS,
    acks_late=True,
)
def release_lease(self, lease_id: int, reason: str = "") -> None:
    """Take a releasing lease's cards back. *reason* is ignored (messages queued by an older
    version carry it): the lease holds its own ``end_reason``. ``release_step`` counts the
    attempts in the database and fails the release for good at the last one, so neither
    these retries nor the sweep's resends can loop."""
    try:
        provisioning.release_step(lease_id=lease_id)
    except TransientBackendError as exc:
        raise self.retry(exc=exc, countdown=_backoff(self.request.retries)) from exc


@shared_task(
    name="leasing.tasks.change_lease",
    bind=True,
    max_retries=provisioning.CHANGE_ATTEMPTS,
    acks_late=True,
)
def change_lease(self, lease_id: int) -> None:
    """Tell a running lease's backend its cards changed; write the access it answers.
    ``change_step`` bounds the attempts in the database (then the lease fails)."""
    try:
        provisioning.change_step(lease_id=lease_id)
    except TransientBackendError as exc:
        raise self.retry(exc=exc, countdown=_backoff(self.request.retries)) from exc


# start_lease and expire_lease are no longer sent (the tick does their work); they stay so
# that ETA messages queued by an older version before an upgrade are still understood.
@shared_task(name="leasing.tasks.start_lease", acks_late=True)
def start_lease(lease_id: int) -> None:
    provisioning.lease_start(lease_id=lease_id)


@shared_task(name="leasing.tasks.queue_refresh", acks_late=True)
def queue_refresh(card_model_id: int) -> int:
    """Plan the stale stretch a request left behind it in the model's queue, one slice per
    transaction, until the stored plan is exact again (``scheduler.refresh.queue_refresh``).
    Bounded; the tick's full pass catches whatever is left or a lost message."""
    slices = 1
    while refresh_slice(card_model_id) and slices < REFRESH_SLICES_MAX:
        slices += 1
    return slices


@shared_task(name="leasing.tasks.fair_share_recompute", acks_late=True)
def fair_share_recompute() -> bool:
    """Every minute: recompute the teams' fair-share factors when one of the policy's fixed
    times has passed (``teams.fairshare.recompute_if_due``)."""
    return fairshare.recompute_if_due()


@shared_task(name="leasing.tasks.plan_share")
def plan_share(card_model_id: int) -> bool:
    """Leave a fresh base of the model's queue picture in the cache, so that the processes
    serving requests replay a few steps instead of reading the queue (scheduler/plancache)."""
    return plancache.share(card_model_id)


@shared_task(name="leasing.tasks.expire_lease", acks_late=True)
def expire_lease(lease_id: int) -> None:
    endings.lease_expire(lease_id=lease_id)


@shared_task(name="leasing.tasks.notify_lease")
def notify_lease(lease_id: int, kind: str) -> None:
    """Tell the holder (or, for an approval request, the team's leads) what happened.

    Through every channel they chose (leasing.notify); idempotent per lease and event.
    """
    told = None
    if kind == Kind.LEASE_QUEUED:  # the start the lease page tells (scheduler.eta)
        lease = Lease.objects.filter(pk=lease_id).first()
        ahead = lease and team_work_ahead(lease.team_id)
        told = lease and lease_told_start(lease, now=timezone.now(), ahead=ahead)
    wording.notify_lease_event(lease_id=lease_id, kind=kind, told_start=told)


def _expire_and_start_due(now) -> dict:
    # Drains end on the tick like expiries: a drained node's leases end within the tick's
    # bound of the drain time (one indexed query on nodes when none is due).
    done = {"expired": 0, "started": 0, "drained": maintenance.drains_due(now=now)}
    # Warnings too: each goes out within a tick of its offset (``Lease.warn_at``).
    done["warned"] = endings.warnings_send_ticked(now=now)
    due = Lease.objects.filter(status__in=RUNNING_STATES, end_at__lte=now)
    for lease_id in due.order_by("end_at").values_list("pk", flat=True)[:BATCH]:
        done["expired"] += endings.lease_expire(lease_id=lease_id, now=now)
    starting = Lease.objects.filter(status=LeaseStatus.SCHEDULED, start_at__lte=now)
    for lease_id in starting.order_by("start_at").values_list("pk", flat=True)[:BATCH]:
        done["started"] += provisioning.lease_start(lease_id=lease_id, now=now)
    return done


@shared_task(name="leasing.tasks.tick")
def tick() -> dict:
    """Every CARDPOOL_TICK_SECONDS (2 s): end the leases whose end has come and start the
    reservations whose start has; send the expiry warnings that are due (within a tick of
    their offset). Indexed queries only when nothing is due.

    Instead of one ETA task per lease: a Redis broker hands an unacknowledged ETA task to
    another worker after its visibility timeout (an hour), so every lease longer than that
    would have its expiry delivered again each hour, and every task would sit in a worker's
    memory until its end. The tick costs the same whatever the number of leases.
    """
    return _expire_and_start_due(timezone.now())


@shared_task(name="leasing.tasks.sweep")
def sweep() -> dict:
    """Re-find whatever a lost task missed: expiries, starts, stuck hand-overs, the queue.

    Each step takes a bounded batch and re-checks state in its filter; running it twice
    or on two workers at once does no harm (the services compare-and-set).
    """
    now = timezone.now()
    done = {**_expire_and_start_due(now), "reprovisioned": 0, "rereleased": 0, "queues": 0}
    stale = now - timedelta(seconds=settings.CARDPOOL["STUCK_SECONDS"])
    stuck = Lease.objects.filter(
        Q(status=LeaseStatus.PROVISIONING) | Q(status=LeaseStatus.RELEASING),
        status_changed_at__lt=stale,
    )
    for lease_id, status in stuck.values_list("pk", "status")[:BATCH]:
        if status == LeaseStatus.PROVISIONING:
            enqueue("leasing.tasks.provision_lease", lease_id)
            done["reprovisioned"] += 1
        else:
            # The reason is on the lease; a failed release (release_failed) is not re-sent.
            enqueue("leasing.tasks.release_lease", lease_id)
            done["rereleased"] += 1
    done["rechanged"] = 0
    for lease_id in provisioning.changes_pending(older_than=stale, batch=BATCH):
        enqueue("leasing.tasks.change_lease", lease_id)
        done["rechanged"] += 1
    done["recheckpointed"] = 0
    for lease_id in provisioning.checkpoints_unsent(now=now, older_than=stale, batch=BATCH):
        enqueue("leasing.tasks.checkpoint_lease", lease_id)
        done["recheckpointed"] += 1
    done["checkpoints_unacknowledged"] = checkpoints.checkpoints_unacknowledged(
        now=now, batch=BATCH
    )
    done["preempted"] = endings.preemptions_due(now=now)
    done["drained"] += maintenance.drains_due(now=now)
    done["warnings"] = endings.warnings_send_due(now=now)
    done["changes_lapsed"] = change_decisions.changes_lapse(now=now)
    # Drain and preemption warnings whose notice could not be written are re-tried here.
    done["early_end_warnings"] = endings.preemption_warnings_send(
        now=now
    ) + maintenance.drain_warnings_send(now=now)
    done["idle"] = endings.idle_check(now=now)
    done["estimate_notices"] = moves.estimate_notices_due(now=now)
    models = (
        Lease.objects.filter(status=LeaseStatus.QUEUED)
        .values_list("card_model_id", flat=True)
        .distinct()
    )
    model_ids = sorted(models)
    for model_id in model_ids:
        queue_tick(model_id, now=now)
    if model_ids:
        done["queues"] = len(model_ids)
    return done


# --- the Slurm backend: reconciliation (on beat) and the extend hook --------------------


@shared_task(name="leasing.tasks_slurm.reconcile_slurm", acks_late=True)
def reconcile_slurm() -> dict:
    """Active leases against Slurm's ``cardpool-*`` jobs (leasing.lifecycle.reconcile)."""
    try:
        return reconcile.slurm_reconcile()
    except TransientBackendError as exc:
        # The next beat tries again; nothing was ended on a failed read.
        logger.warning("slurm reconcile skipped: %s", exc)
        return {"error": str(exc)}


@shared_task(
    name="leasing.tasks_slurm.extend_lease_backend", bind=True, max_retries=5, acks_late=True
)
def extend_lease_backend(self, lease_id: int) -> int:
    """Tell the lease's backend its end moved later (Slurm: raise the job's time limit).

    Idempotent: the backend sets the limit from the lease's current end, never adds to it.
    Backends without an ``extend`` need nothing (Cardpool's records are their truth).
    """
    lease = Lease.objects.select_related("user", "card_model").filter(pk=lease_id).first()
    if lease is None or lease.status != LeaseStatus.ACTIVE:
        return 0
    holding = provisioning.holding_of(lease)
    backend = get_backend(holding=holding)
    extend = getattr(backend, "extend", None)
    if extend is None:
        return 0
    try:
        return extend(holding)
    except TransientBackendError as exc:
        raise self.retry(exc=exc, countdown=min(2**self.request.retries, 60)) from exc


# --- the Kubernetes backend: reconciliation and the quota/priority mirror (on beat) --------


@shared_task(name="leasing.tasks_kubernetes.reconcile_kubernetes", acks_late=True)
def reconcile_kubernetes() -> dict:
    """Active leases against their pods (leasing.lifecycle.kubernetes)."""
    try:
        return kubernetes.kubernetes_reconcile()
    except BackendError as exc:
        # The next beat tries again; nothing was ended on a failed read.
        logger.warning("kubernetes reconcile skipped: %s", exc)
        return {"error": str(exc)}


@shared_task(name="leasing.tasks_kubernetes.mirror_kubernetes", acks_late=True)
def mirror_kubernetes() -> dict:
    """Teams' quotas and the priority classes written to the cluster."""
    try:
        return kubernetes.kubernetes_mirror()
    except BackendError as exc:
        logger.warning("kubernetes mirror skipped: %s", exc)
        return {"error": str(exc)}


# --- sessions and workspaces (leasing.workbench, lifecycle.session_steps) ----------------


@shared_task(name="leasing.tasks.session_start", bind=True, max_retries=5, acks_late=True)
def session_start(self, session_id: int) -> None:
    """Start a session's program through the lease's backend, then probe it until it answers."""
    try:
        outcome = session_steps.session_start_step(session_id=session_id)
    except TransientBackendError as exc:
        raise self.retry(exc=exc, countdown=_backoff(self.request.retries)) from exc
    if outcome == "check":
        enqueue("leasing.tasks.session_check", session_id, countdown=1)


@shared_task(name="leasing.tasks.session_check", acks_late=True)
def session_check(session_id: int) -> None:
    """Probe a started session once; again a second later until it answers or times out."""
    if session_steps.session_check_step(session_id=session_id) is None:
        enqueue("leasing.tasks.session_check", session_id, countdown=1)


@shared_task(name="leasing.tasks.session_stop", bind=True, max_retries=5, acks_late=True)
def session_stop(self, session_id: int) -> None:
    try:
        session_steps.session_stop_step(session_id=session_id)
    except TransientBackendError as exc:
        raise self.retry(exc=exc, countdown=_backoff(self.request.retries)) from exc


@shared_task(name="leasing.tasks.sessions_sweep")
def sessions_sweep() -> dict:
    return session_steps.sessions_sweep()


@shared_task(name="leasing.tasks.workspaces_measure")
def workspaces_measure() -> dict:
    return workspace.workspaces_measure()
