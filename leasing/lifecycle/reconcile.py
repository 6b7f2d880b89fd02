"""Keeping Cardpool's leases and Slurm's ``cardpool-*`` jobs in step.

Two mismatches are possible and both are fixed here, by the periodic task
``leasing.tasks_slurm.reconcile_slurm``:

- an active lease whose Slurm job vanished (an operator's ``scancel``, a node failure):
  the lease ends — reason ``failed`` when its node is down in Slurm, else ``admin`` —
  and the holder is told why;
- a live ``cardpool-<id>`` job whose lease is not provisioning, active or releasing
  (a lost release, a crash between salloc and the database): the job is cancelled and
  logged.

Safe to run twice or concurrently: ends go through the compare-and-set transitions, the
notice has a per-lease key, and cancelling a cancelled job is harmless. The order of reads
matters: active leases are read *before* Slurm's queue (a lease active then had its job by
then), job owners *after* it (a job seen in the queue had its lease provisioning by then).
"""

from __future__ import annotations

import logging
from collections import defaultdict
from datetime import datetime

from django.conf import settings
from django.utils import timezone

from inventory.models import Node
from leasing.backends import NODE_LABEL
from leasing.backends.slurm import SlurmBackend
from leasing.backends.slurm_parse import lease_id_from_job_name
from leasing.choices import BACKEND_STATES, EndReason, LeaseStatus
from leasing.lifecycle.endings import lease_end_now
from leasing.models import Lease

logger = logging.getLogger(__name__)

BATCH = 500


def slurm_in_use() -> bool:
    """Whether any lease can be on Slurm: the default backend or a node labelled for it."""
    if settings.CARDPOOL["BACKEND"] == "slurm":
        return True
    return Node.objects.filter(**{f"labels__{NODE_LABEL}": "slurm"}).exists()


def _slurm_leases(now: datetime):
    leases = Lease.objects.filter(status=LeaseStatus.ACTIVE, end_at__gt=now)
    if settings.CARDPOOL["BACKEND"] != "slurm":
        leases = leases.filter(
            **{f"allocations__card__node__labels__{NODE_LABEL}": "slurm"}
        ).distinct()
    return leases.select_related("user", "card_model").order_by("pk")


def slurm_reconcile(*, now: datetime | None = None, backend: SlurmBackend | None = None) -> dict:
    """Compare active leases with Slurm's jobs and fix both kinds of mismatch (see above)."""
    now = now or timezone.now()
    done: dict = {"checked": 0, "ended": [], "cancelled": []}
    if not slurm_in_use():
        return done
    backend = backend or SlurmBackend()
    prefix = backend.config["JOB_PREFIX"]
    active = list(_slurm_leases(now)[:BATCH])
    jobs = backend.cli.queue()  # a Slurm error raises: nothing is ended on a failed read
    live: dict[int, list] = defaultdict(list)
    for job in jobs:
        lease_id = lease_id_from_job_name(job.name, prefix)
        if lease_id is not None and job.live:
            live[lease_id].append(job)
    done["checked"] = len(active)

    vanished = [lease for lease in active if lease.pk not in live]
    if vanished:
        down = {n.name for n in backend.cli.nodes() if n.availability == "down"}
        for lease in vanished:
            if _end_vanished(lease, down, now):
                done["ended"].append(lease.pk)

    owned = set(
        Lease.objects.filter(pk__in=list(live), status__in=BACKEND_STATES).values_list(
            "pk", flat=True
        )
    )
    for lease_id, orphan_jobs in sorted(live.items()):
        if lease_id in owned:
            continue
        ids = [j.job_id for j in orphan_jobs]
        logger.warning(
            "slurm: cancelling job(s) %s of lease %s, which holds no cards in Cardpool (users %s)",
            ids,
            lease_id,
            sorted({j.user for j in orphan_jobs}),
        )
        backend.cli.cancel(ids)
        done["cancelled"].extend(ids)
    return done


def _end_vanished(lease: Lease, down: set[str], now: datetime) -> bool:
    hosts = set(
        lease.allocations.filter(end_at__gt=now).values_list("card__node__hostname", flat=True)
    )
    failed = sorted(hosts & down)
    reason = EndReason.FAILED if failed else EndReason.ADMIN
    why = "slurm_down" if failed else "slurm_cancelled"
    if not lease_end_now(lease, reason, now, why=why, nodes=", ".join(failed)):
        return False
    logger.warning("slurm: lease %s ended (%s): %s", lease.pk, reason, why)
    return True


__all__ = ["slurm_in_use", "slurm_reconcile"]
