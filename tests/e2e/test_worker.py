"""The whole path with a real worker on PostgreSQL + Redis: request → active → expiry/release."""

from datetime import timedelta

import pytest

from leasing.choices import EndReason, LeaseStatus
from leasing.lifecycle import changes
from leasing.lifecycle import requests as lease_requests
from leasing.models import Lease
from tests.e2e.conftest import wait_for
from tests.factories import CardModelFactory, make_node

pytestmark = [pytest.mark.postgres, pytest.mark.broker]


def status_of(pk):
    return Lease.objects.values_list("status", flat=True).get(pk=pk)


def test_request_becomes_active_then_expires_on_time(worker, alice, vision):
    model = CardModelFactory(slug="e2e-a100")
    make_node(model, cards=2, domains=1, hostname="e2e-node")
    lease = lease_requests.lease_request(
        user=alice, team=vision, card_model=model, count=2, duration=timedelta(seconds=4)
    )
    wait_for(lambda: status_of(lease.pk) == LeaseStatus.ACTIVE, timeout=5)
    lease.refresh_from_db()
    assert lease.access["nodes"][0]["env"] == {"CUDA_VISIBLE_DEVICES": "0,1"}
    # Reclaimed at its end by the beat's tick (every 2 s; the sweep is the safety net).
    wait_for(lambda: status_of(lease.pk) == LeaseStatus.ENDED, timeout=15)
    lease.refresh_from_db()
    assert lease.end_reason == EndReason.EXPIRED
    expire = lease.events.get(kind="expire")
    assert expire.at - lease.end_at < timedelta(seconds=5)


def test_release_starts_the_next_queued_lease(worker, alice, bob, vision, nlp):
    model = CardModelFactory(slug="e2e-910b")
    make_node(model, cards=1, domains=1, hostname="e2e-solo")
    first = lease_requests.lease_request(
        user=alice, team=vision, card_model=model, count=1, duration=timedelta(hours=1)
    )
    second = lease_requests.lease_request(
        user=bob, team=nlp, card_model=model, count=1, duration=timedelta(hours=1)
    )
    assert second.status == LeaseStatus.QUEUED
    wait_for(lambda: status_of(first.pk) == LeaseStatus.ACTIVE)
    changes.lease_release(lease=Lease.objects.get(pk=first.pk), user=alice)
    wait_for(lambda: status_of(second.pk) == LeaseStatus.ACTIVE)
    wait_for(lambda: status_of(first.pk) == LeaseStatus.ENDED)


def test_a_release_that_starts_many_hands_them_over_in_batches(worker, alice, bob, vision, nlp):
    """Several waiting leases start in one pass: one provision_batch message through Redis."""
    model = CardModelFactory(slug="e2e-batch")
    make_node(model, cards=4, domains=1, hostname="e2e-four")
    holder = lease_requests.lease_request(
        user=alice, team=vision, card_model=model, count=4, duration=timedelta(hours=1)
    )
    waiting = [
        lease_requests.lease_request(
            user=bob, team=nlp, card_model=model, count=1, duration=timedelta(hours=1)
        )
        for _ in range(4)
    ]
    assert {lease.status for lease in waiting} == {LeaseStatus.QUEUED}
    wait_for(lambda: status_of(holder.pk) == LeaseStatus.ACTIVE)
    changes.lease_release(lease=Lease.objects.get(pk=holder.pk), user=alice)
    for lease in waiting:
        wait_for(lambda pk=lease.pk: status_of(pk) == LeaseStatus.ACTIVE)
    assert all(Lease.objects.get(pk=lease.pk).access["nodes"] for lease in waiting)
