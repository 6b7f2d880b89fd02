"""The states the backend drives (start, activate, fail, finish a release), and the calls to
the provisioning backend, one durable BackendCall row per attempt.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from datetime import datetime

from django.db import transaction
from django.db.models import Exists, OuterRef
from django.utils import timezone

from leasing.backends import (
    Holding,
    NodeCards,
    PermanentBackendError,
    TransientBackendError,
    backend_name_for,
    get_backend,
)
from leasing.billing import usage
from leasing.choices import (
    ENDING_STATES,
    RUNNING_STATES,
    EndReason,
    Kind,
    LeaseStatus,
)
from leasing.enqueue import enqueue, enqueue_after_commit
from leasing.locking import lock_card_models
from leasing.models import (
    Allocation,
    BackendCall,
    Lease,
    LeaseEvent,
    Session,
)
from leasing.notify import wording
from leasing.notify.messages import notice_send
from leasing.scheduler.run import (
    release_begin,
    replan,
)
from leasing.transitions import (
    cards_free,
    event_record,
    notify_after_commit,
    transition,
)

logger = logging.getLogger(__name__)

# Attempts at a release (the task's retries and the sweep's resends together) before it
# fails for good and waits for an operator.
RELEASE_ATTEMPTS = 6
# The same for telling the backend a running lease's cards changed; then the lease fails.
CHANGE_ATTEMPTS = 6
# Key in Lease.access while the backend has not yet answered a change of cards.
PENDING_CHANGE = "pending_change"


# --- start, activate, fail ---------------------------------------------------------------


def lease_start(*, lease_id: int, now: datetime | None = None) -> bool:
    """A scheduled lease's start time has come: hand its cards over."""

    now = now or timezone.now()
    with transaction.atomic():
        lease = Lease.objects.filter(
            pk=lease_id, status=LeaseStatus.SCHEDULED, start_at__lte=now
        ).first()
        if lease is None:
            return False
        if not transition(
            lease_id,
            frm=[LeaseStatus.SCHEDULED],
            to=LeaseStatus.PROVISIONING,
            kind="starting",
            at=now,
        ):
            return False
        enqueue_after_commit("leasing.tasks.provision_lease", lease_id)
    return True


def lease_activate(*, lease_id: int, access: dict, now: datetime | None = None) -> bool:
    """The backend has handed the cards over: the lease is active until its end."""

    now = now or timezone.now()
    with transaction.atomic():
        replaces_id, before = Lease.objects.filter(pk=lease_id).values_list(
            "replaces_id", "access"
        ).first() or (None, {})
        pending = (before or {}).get(PENDING_CHANGE)
        if pending:
            # Its cards changed while it was handed over (a swap): the backend may have handed
            # over the old ones, so the change is still to be made once it is active.
            access = {**access, PENDING_CHANGE: pending}
            enqueue_after_commit("leasing.tasks.change_lease", lease_id)
        ok = transition(
            lease_id,
            frm=[LeaseStatus.PROVISIONING],
            to=LeaseStatus.ACTIVE,
            kind="active",
            at=now,
            access=access,
            activated_at=now,
        )
        if ok:
            # The tick (tasks.tick) expires it at its end.
            waited = LeaseEvent.objects.filter(lease_id=lease_id, kind="queued").exists()
            kind = "lease_started_from_queue" if waited else "lease_active"
            transaction.on_commit(lambda: notify_here(lease_id, kind), robust=True)
            if replaces_id:
                # A resize to another model: the old cards go only now that the new ones are held.
                old = Lease.objects.filter(pk=replaces_id).first()
                if old is not None:
                    lock_card_models([old.card_model_id])
                    release_begin(old, reason=EndReason.RELEASED, now=now, kind="resized")
    return ok


def lease_fail(*, lease_id: int, reason: str, now: datetime | None = None) -> bool:
    """Provisioning failed for good: the lease is failed, its cards free, the user told why."""

    now = now or timezone.now()
    with transaction.atomic():
        lease = Lease.objects.select_related("card_model").filter(pk=lease_id).first()
        if lease is None:
            return False
        lock_card_models([lease.card_model_id])
        if not transition(
            lease_id,
            frm=[LeaseStatus.SCHEDULED, LeaseStatus.PROVISIONING, LeaseStatus.ACTIVE],
            to=LeaseStatus.FAILED,
            kind="failed",
            at=now,
            message=reason,
            failure_reason=reason,
            ended_at=now,
        ):
            return False
        Session.objects.end_for_lease(lease_id, at=now, reason="lease_failed")
        cards_free(lease, now)
        replan(lease.card_model_id, now=now)
        usage.usage_record_after_commit(lease_id)
        notify_after_commit(lease_id, "failed")
    return True


def lease_finish_release(
    *,
    lease_id: int,
    now: datetime | None = None,
    frm: tuple[str, ...] = (LeaseStatus.RELEASING,),
    actor=None,
    message: str = "",
    data: dict | None = None,
) -> bool:
    """The backend has taken the cards back: releasing (or, *frm* the operator's
    ``lifecycle.releases``, a failed release cleaned up by hand) → ended, with the reason
    the release began with (``Lease.end_reason``, never recovered from events)."""
    assert set(frm) <= set(ENDING_STATES)
    now = now or timezone.now()
    with transaction.atomic():
        row = (
            Lease.objects.filter(pk=lease_id, status__in=frm)
            .values_list("end_reason", "failure_reason", "card_model_id")
            .first()
        )
        if row is None:
            return False
        reason, release_failed_before, card_model_id = row
        if release_failed_before:
            lock_card_models([card_model_id])
        ended = transition(
            lease_id,
            frm=frm,
            to=LeaseStatus.ENDED,
            kind="ended",
            at=now,
            actor=actor,
            message=message,
            data=data,
        )
        if ended and release_failed_before:
            # Its cards were held back while the release had failed: they are free only now.
            replan(card_model_id, now=now)
        if ended:
            usage.usage_record_after_commit(lease_id)
        if ended and reason != EndReason.RELEASED:  # the holder released it: no need to say so
            notify_after_commit(lease_id, "lease_ended")
    return ended


def lease_release_fail(*, lease_id: int, reason: str, now: datetime | None = None) -> bool:
    """The backend could not take the cards back, for good: releasing → release_failed.

    Nothing resends it (the sweep re-finds only ``releasing``); its last cards stay out of
    placement (``Allocation.objects.held_back``) until an operator retries the release or
    marks it done by hand (``lifecycle.releases``). Operators are told; the holder, whose
    usage stopped when the release began, hears that the lease ended."""
    now = now or timezone.now()
    with transaction.atomic():
        failed = transition(
            lease_id,
            frm=[LeaseStatus.RELEASING],
            to=LeaseStatus.RELEASE_FAILED,
            kind="release_failed",
            at=now,
            message=reason,
            failure_reason=reason,
        )
        if failed:
            notify_after_commit(lease_id, "release_failed")
            notify_after_commit(lease_id, "lease_ended")
    return failed


def notify_here(lease_id: int, kind: str, lease: Lease | None = None) -> None:
    """Word and write the notice in this process, after the commit: the caller is a worker
    already, and a second task per lease for an in-app notice costs more than the notice
    (email and webhooks still go out as their own tasks). If it fails, it is queued instead."""
    try:
        wording.notify_lease_event(lease_id=lease_id, kind=kind, lease=lease)
    except Exception:
        logger.exception("notice %s for lease %s failed here; queued instead", kind, lease_id)
        enqueue("leasing.tasks.notify_lease", lease_id, kind, inline_if_down=False)


# --- the backend ------------------------------------------------------------------------


def holding_of(lease: Lease, *, now: datetime | None = None) -> Holding:
    """What the backend needs to know about *lease*, as plain data: who holds it, the cards it
    holds now, per node (a swapped-out card no longer counts), and the backend of the nodes
    it was placed on (from all its periods: a release runs after its cards are cut)."""
    now = now or timezone.now()
    per_node: dict[int, list[int]] = defaultdict(list)
    nodes: dict[int, tuple[str, dict]] = {}  # node id → hostname, labels
    loaded = getattr(lease, "_prefetched_objects_cache", {}).get("allocations")
    if loaded is not None:  # prefetched with their card and node (provision_here)
        rows = [
            (a.card.node_id, a.card.node.hostname, a.card.node.labels, a.card.index, a.end_at)
            for a in loaded
        ]
    else:  # one query: the periods with their card's node (there are few per lease)
        rows = Allocation.objects.filter(lease=lease).values_list(
            "card__node_id", "card__node__hostname", "card__node__labels", "card__index", "end_at"
        )
    for node_id, hostname, labels, index, end_at in rows:
        nodes[node_id] = (hostname, labels or {})
        if end_at > now:
            per_node[node_id].append(index)
    by_hostname = sorted(nodes, key=lambda node_id: nodes[node_id][0])
    profile = getattr(lease.user, "profile", None)
    backend = backend_name_for(lease.pk, [nodes[node_id][1] for node_id in by_hostname])
    return Holding(
        lease_id=lease.pk,
        username=lease.user.get_username(),
        slurm_user=(getattr(profile, "slurm_user", "") or lease.user.get_username()).strip(),
        status=lease.status,
        card_model_slug=lease.card_model.slug,
        devices_env=lease.card_model.devices_env,
        end_at=lease.end_at,
        nodes=tuple(
            NodeCards(nodes[node_id][0], tuple(sorted(per_node[node_id])), nodes[node_id][1])
            for node_id in by_hostname
            if per_node[node_id]
        ),
        backend=backend,
        **(_placement_context(lease) if backend == "kubernetes" else {}),
    )


def _placement_context(lease: Lease) -> dict:
    """The team, priority, environment and vendor of *lease*: what the kubernetes backend's
    pod needs besides the cards (read only for it, so other hand-overs cost no query more)."""
    environment = lease.environment.slug if lease.environment_id else ""
    return {
        "team": lease.team.slug if lease.team_id else "",
        "priority": lease.priority,
        "environment": environment,
        "vendor": lease.card_model.vendor,
    }


def backend_change_after_commit(lease: Lease, *, now: datetime) -> None:
    """The running lease's cards changed (a faulty card swapped, a resize in place): once the
    transaction commits, its backend is told (``change_step``) and the access details are
    rewritten from the backend's answer. Until then the lease keeps the access the backend
    still gives, marked ``pending_change`` (the sweep re-sends a change whose task was lost)."""
    access = {**(lease.access or {}), PENDING_CHANGE: now.isoformat()}
    Lease.objects.filter(pk=lease.pk).update(access=access)
    enqueue_after_commit("leasing.tasks.change_lease", lease.pk)


def changes_pending(*, older_than: datetime, batch: int) -> list[int]:
    """Running leases whose backend change has waited since before *older_than* (lost task)."""
    rows = Lease.objects.filter(
        status=LeaseStatus.ACTIVE, access__has_key=PENDING_CHANGE
    ).values_list("pk", "access")[:batch]
    return [
        pk for pk, access in rows if datetime.fromisoformat(access[PENDING_CHANGE]) < older_than
    ]


def change_step(*, lease_id: int) -> bool:
    """Tell the backend a running lease's cards changed and write the access it answers.

    A no-op unless the lease is active with a change pending. A permanent backend error, or
    a transient one at the last of ``CHANGE_ATTEMPTS``, fails the lease (the backend's
    holding no longer matches the records, as when a hand-over fails); an earlier transient
    error is raised for the task to retry."""
    lease = Lease.objects.select_related("card_model", "user").filter(pk=lease_id).first()
    if lease is None or lease.status != LeaseStatus.ACTIVE:
        return False
    since = (lease.access or {}).get(PENDING_CHANGE)
    if since is None:
        return False
    attempt = (
        BackendCall.objects.filter(
            lease=lease, action="change", started_at__gte=datetime.fromisoformat(since)
        ).count()
        + 1
    )
    if attempt == 1:
        _tell_restart(lease, since)
    try:
        access = _call(lease, "change", attempt, lambda backend, holding: backend.change(holding))
    except PermanentBackendError as exc:
        return lease_fail(
            lease_id=lease_id, reason=f"The backend could not change the cards: {exc}"
        )
    except TransientBackendError as exc:
        if attempt < CHANGE_ATTEMPTS:
            raise
        return lease_fail(
            lease_id=lease_id,
            reason=f"The backend kept failing to change the cards ({attempt} attempts): {exc}",
        )
    with transaction.atomic():
        # Only the change this answer is for: a newer one has its own task.
        changed = Lease.objects.filter(
            pk=lease_id, status=LeaseStatus.ACTIVE, **{f"access__{PENDING_CHANGE}": since}
        ).update(access=access)
        if changed:
            event_record(
                lease_id,
                kind="backend_changed",
                at=timezone.now(),
                data={"backend": access.get("backend", "")},
            )
    return bool(changed)


def _tell_restart(lease: Lease, since: str) -> None:
    """A backend that replaces what holds the cards on a change (Kubernetes: the pod) stops
    what runs there: the holder is told before it happens, once per change. When the backend
    cannot say (its API is down), the holder is told anyway."""
    holding = holding_of(lease)
    restarts = getattr(get_backend(holding=holding), "change_restarts", None)
    if restarts is None:
        return
    try:
        if not restarts(holding):
            return
    except (TransientBackendError, PermanentBackendError):
        pass
    notice_send(
        lease,
        kind=Kind.LEASE_RESTARTING,
        message="restarting",
        params={"id": lease.pk, "n": lease.count},
        key=f"lease:{lease.pk}:restarting:{since}",
    )


def _call(lease: Lease, action: str, attempt: int, fn):
    holding = holding_of(lease)
    backend = get_backend(holding=holding)
    call = BackendCall.objects.create(
        lease=lease, backend=backend.name, action=action, attempt=attempt, started_at=timezone.now()
    )
    try:
        result = fn(backend, holding)
    except Exception as exc:
        BackendCall.objects.filter(pk=call.pk).update(
            finished_at=timezone.now(), ok=False, detail=str(exc)[:2000]
        )
        raise
    BackendCall.objects.filter(pk=call.pk).update(finished_at=timezone.now(), ok=True)
    return result


def checkpoints_unsent(*, now: datetime, older_than: datetime, batch: int) -> list[int]:
    """Leases still in their preemption grace that declared a checkpoint, marked before
    *older_than*, with no checkpoint attempt recorded: their task was lost (the sweep sends
    it again)."""
    return list(
        Lease.objects.filter(status__in=RUNNING_STATES, preempt_at__gt=now)
        .exclude(checkpoint_signal="", checkpoint_command="")
        .filter(
            Exists(
                LeaseEvent.objects.filter(
                    lease=OuterRef("pk"), kind="preemption_scheduled", at__lt=older_than
                )
            )
        )
        .exclude(Exists(BackendCall.objects.filter(lease=OuterRef("pk"), action="checkpoint")))
        .order_by("preempt_at")
        .values_list("pk", flat=True)[:batch]
    )


def checkpoint_step(*, lease_id: int, attempt: int = 1) -> bool:
    """Deliver a preempted lease's checkpoint signal or command through its backend (Slurm:
    ``scancel --signal``; local: the node's agent picks it up), once its grace has begun; a
    no-op for a lease that is not running, not marked for preemption or declared nothing.
    The attempt is a ``BackendCall`` row (action ``checkpoint``) and an event on the
    timeline; a transient error is raised for the task to retry."""
    lease = Lease.objects.select_related("card_model", "user").filter(pk=lease_id).first()
    if (
        lease is None
        or lease.status not in RUNNING_STATES
        or lease.preempt_at is None
        or not (lease.checkpoint_signal or lease.checkpoint_command)
    ):
        return False
    try:
        done = _call(
            lease,
            "checkpoint",
            attempt,
            lambda backend, holding: backend.checkpoint(
                holding, signal=lease.checkpoint_signal, command=lease.checkpoint_command
            ),
        )
    except PermanentBackendError as exc:
        event_record(lease_id, kind="checkpoint_failed", at=timezone.now(), message=str(exc)[:500])
        return False
    # The local backend only leaves it to the node's agent: "sent" waits for the agent's word
    # (lifecycle/checkpoints.py); Slurm's answer is the delivery itself.
    kind = "checkpoint_handed" if (done or {}).get("via") == "agent" else "checkpoint_signal"
    event_record(lease_id, kind=kind, at=timezone.now(), data=done)
    return True


def provision_step(*, lease_id: int, attempt: int = 1) -> bool:
    """Provision a lease that is waiting for its cards; a no-op in any other state."""
    lease = Lease.objects.select_related("card_model", "user").filter(pk=lease_id).first()
    if lease is None or lease.status != LeaseStatus.PROVISIONING:
        return False
    access = _call(lease, "provision", attempt, lambda backend, holding: backend.provision(holding))
    return lease_activate(lease_id=lease_id, access=access)


def release_attempts(lease: Lease) -> int:
    """Attempts at releasing *lease* since its release began (or was retried): one budget for
    the task's retries and the sweep's resends together."""
    return BackendCall.objects.filter(
        lease=lease, action="release", started_at__gte=lease.status_changed_at
    ).count()


def release_step(*, lease_id: int) -> bool:
    """Take back the cards of a releasing lease; a no-op in any other state.

    A permanent backend error, or a transient one at the last of ``RELEASE_ATTEMPTS``,
    fails the release for good (``lease_release_fail``); an earlier transient error is
    raised for the task to retry."""
    lease = Lease.objects.select_related("card_model", "user").filter(pk=lease_id).first()
    if lease is None or lease.status != LeaseStatus.RELEASING:
        return False
    attempt = release_attempts(lease) + 1
    try:
        _call(lease, "release", attempt, lambda backend, holding: backend.release(holding))
    except PermanentBackendError as exc:
        lease_release_fail(lease_id=lease_id, reason=str(exc))
        return False
    except TransientBackendError as exc:
        if attempt < RELEASE_ATTEMPTS:
            raise
        lease_release_fail(
            lease_id=lease_id, reason=f"The backend kept failing ({attempt} attempts): {exc}"
        )
        return False
    return lease_finish_release(lease_id=lease_id)
