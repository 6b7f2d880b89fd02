"""A worker killed during reclamation: once any worker runs again, nothing stays active past
its end for longer than a tick (the beat died with the worker; the new beat's tick finds the
lease)."""

import time
from datetime import timedelta

import pytest
from django.utils import timezone

from leasing.choices import EndReason, LeaseStatus
from leasing.lifecycle import requests as lease_requests
from leasing.models import Lease
from tests.e2e.conftest import kill_worker, purge_broker, start_worker, stop_worker, wait_for
from tests.factories import CardModelFactory, make_node

pytestmark = [pytest.mark.postgres, pytest.mark.broker]

TICK_SECONDS = 2  # start_worker's CARDPOOL_TICK_SECONDS


def test_killed_worker_leaves_no_lease_active_past_a_tick(
    transactional_db, tmp_path, alice, vision
):
    purge_broker()
    model = CardModelFactory(slug="crash-a100")
    make_node(model, cards=4, domains=1, hostname="crash-node")
    first = start_worker(tmp_path, "first")
    try:
        leases = [
            lease_requests.lease_request(
                user=alice, team=vision, card_model=model, count=1, duration=timedelta(seconds=6)
            )
            for _ in range(3)
        ]
        wait_for(lambda: Lease.objects.filter(status=LeaseStatus.ACTIVE).count() == 3, timeout=10)
        # The worker holds the expiry tasks (ETA = end time) in memory; kill it hard.
        kill_worker(first)
    finally:
        stop_worker(first)
    time.sleep(max((max(lease.end_at for lease in leases) - timezone.now()).total_seconds(), 0) + 3)
    assert (
        Lease.objects.filter(status=LeaseStatus.ACTIVE).count() == 3
    )  # nobody reclaims: no worker
    second = start_worker(tmp_path, "second")
    ready_at = timezone.now()
    try:
        wait_for(
            lambda: (
                not Lease.objects.filter(
                    status__in=[LeaseStatus.ACTIVE, LeaseStatus.RELEASING]
                ).exists()
            ),
            timeout=20,
        )
    finally:
        stop_worker(second)
    for lease in Lease.objects.all():
        assert lease.end_reason == EndReason.EXPIRED
        assert (
            lease.ended_at == lease.end_at
        )  # usage stops at the booked end, not at the late reclaim
        reclaimed = lease.events.get(kind="expire").at
        # Within a tick (and a little processing) of a worker being back.
        assert reclaimed - ready_at < timedelta(seconds=TICK_SECONDS + 5)
