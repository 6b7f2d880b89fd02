"""A worker killed (SIGKILL, pool children too) in the middle of provisioning: once a worker
runs again, the sweep re-sends the stuck hand-over, every lease becomes active exactly once,
and no card is held by a lease that does not hold it in our records."""

import time
from datetime import timedelta

import pytest

from inventory.models import Card
from leasing.choices import HOLDING_STATES, LeaseStatus
from leasing.lifecycle import requests as lease_requests
from leasing.models import Allocation, BackendCall, Lease
from tests.e2e.conftest import kill_worker, purge_broker, start_worker, stop_worker, wait_for
from tests.factories import CardModelFactory, make_node

pytestmark = [pytest.mark.postgres, pytest.mark.broker]

SLOW = {
    "CARDPOOL_BACKEND": "tests.e2e.slow_backend.SlowLocalBackend",
    "CARDPOOL_TEST_PROVISION_SECONDS": "3",
    # Re-send a hand-over stuck this long (production: 60 s); longer than one provisioning.
    "CARDPOOL_STUCK_SECONDS": "5",
}


def test_a_worker_killed_mid_provision_leaves_every_lease_active_once(
    transactional_db, tmp_path, alice, vision
):
    purge_broker()
    model = CardModelFactory(slug="crash-prov-a100")
    make_node(model, cards=4, domains=1, hostname="crash-prov-node")
    first = start_worker(tmp_path, "first", env=SLOW)
    try:
        leases = [
            lease_requests.lease_request(
                user=alice, team=vision, card_model=model, count=1, duration=timedelta(hours=1)
            )
            for _ in range(2)
        ]
        # Both provisionings have started (2 pool children) and none has finished.
        wait_for(lambda: BackendCall.objects.filter(action="provision").count() == 2, timeout=10)
        assert not BackendCall.objects.filter(ok=True).exists()
        kill_worker(first)
    finally:
        stop_worker(first)
    time.sleep(1)
    assert Lease.objects.filter(status=LeaseStatus.PROVISIONING).count() == 2
    second = start_worker(tmp_path, "second", env=SLOW)
    try:
        wait_for(
            lambda: Lease.objects.filter(status=LeaseStatus.ACTIVE).count() == 2,
            timeout=30,
        )
        time.sleep(4)  # a few more sweeps: nothing is provisioned a second time
    finally:
        stop_worker(second)
    for lease in leases:
        lease.refresh_from_db()
        assert lease.status == LeaseStatus.ACTIVE
        assert lease.access["nodes"][0]["host"] == "crash-prov-node"
        calls = BackendCall.objects.filter(lease=lease, action="provision")
        assert calls.filter(ok=True).count() == 1
        # The killed attempt stays on record, unfinished.
        assert calls.filter(finished_at__isnull=True).count() == 1
    # No orphaned allocation: each belongs to a lease that holds cards, over a sane period.
    for allocation in Allocation.objects.select_related("lease"):
        assert allocation.lease.status in HOLDING_STATES
        assert allocation.start_at < allocation.end_at <= allocation.lease.end_at
    assert Allocation.objects.values("card").distinct().count() == 2
    assert Card.objects.filter(node__hostname="crash-prov-node").count() == 4
