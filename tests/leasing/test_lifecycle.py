"""From placed to active to ended: tasks called as functions on a frozen clock."""

from datetime import timedelta

import pytest
from django.conf import settings
from django.core.exceptions import ValidationError
from django.test import override_settings

from leasing.backends import PermanentBackendError, TransientBackendError
from leasing.backends.local import LocalBackend
from leasing.choices import EndReason, LeaseStatus
from leasing.lifecycle import changes, provisioning
from leasing.lifecycle import tasks as lease_tasks
from leasing.models import Allocation, BackendCall, Lease
from tests.factories import make_node
from tests.leasing.conftest import T0, ask, hours


def activate(lease):
    assert provisioning.provision_step(lease_id=lease.pk)
    lease.refresh_from_db()
    return lease


def test_provisioning_gives_access_details_with_the_vendor_variable(
    frozen, alice, vision, a100, small_pool
):
    lease = activate(ask(alice, vision, a100, count=2))
    assert lease.status == LeaseStatus.ACTIVE and lease.activated_at == T0
    (node,) = lease.access["nodes"]
    assert node["env"] == {"CUDA_VISIBLE_DEVICES": ",".join(str(i) for i in node["devices"])}
    assert len(node["devices"]) == 2
    assert BackendCall.objects.filter(lease=lease, action="provision", ok=True).count() == 1
    # Idempotent: a second delivery of the task does nothing.
    assert provisioning.provision_step(lease_id=lease.pk) is False


def test_release_frees_cards_at_once_and_starts_the_next_queued(
    frozen, alice, bob, vision, nlp, a100
):
    make_node(a100, cards=2, domains=1, hostname="pair")
    holder = activate(ask(alice, vision, a100, count=2, duration=hours(8)))
    waiting = ask(bob, nlp, a100, count=2, duration=hours(1))
    assert waiting.status == LeaseStatus.QUEUED
    frozen.shift(timedelta(minutes=30))
    changes.lease_release(lease=holder, user=alice)
    holder.refresh_from_db()
    waiting.refresh_from_db()
    assert holder.status == LeaseStatus.RELEASING
    assert waiting.status == LeaseStatus.PROVISIONING
    assert set(holder.allocations.values_list("end_at", flat=True)) == {T0 + timedelta(minutes=30)}
    assert provisioning.release_step(lease_id=holder.pk)
    holder.refresh_from_db()
    assert (holder.status, holder.end_reason) == (LeaseStatus.ENDED, EndReason.RELEASED)


def test_advance_reservation_starts_on_time(frozen, alice, vision, a100, small_pool):
    start = T0 + hours(5)
    lease = ask(alice, vision, a100, count=2, start_at=start)
    assert lease.status == LeaseStatus.SCHEDULED
    frozen.move_to(start - timedelta(seconds=1))
    assert provisioning.lease_start(lease_id=lease.pk) is False
    frozen.move_to(start)
    lease_tasks.start_lease(lease.pk)
    lease.refresh_from_db()
    assert lease.status == LeaseStatus.PROVISIONING
    assert activate(lease).status == LeaseStatus.ACTIVE


def test_the_tick_ends_leases_and_starts_reservations_when_due(
    frozen, alice, bob, vision, nlp, a100, django_capture_on_commit_callbacks, sent_tasks
):
    make_node(a100, cards=2, domains=1, hostname="two")
    with django_capture_on_commit_callbacks(execute=True):
        held = activate(ask(alice, vision, a100, duration=hours(1)))
    # No ETA task is queued for the end (Redis would redeliver it every visibility timeout).
    assert [task.name for task in sent_tasks] == ["leasing.tasks.provision_lease"]
    assert "eta" not in sent_tasks[0].options and "countdown" not in sent_tasks[0].options
    booked = ask(bob, nlp, a100, start_at=T0 + hours(1) + timedelta(seconds=1))
    assert booked.status == LeaseStatus.SCHEDULED
    frozen.move_to(T0 + hours(1) - timedelta(seconds=1))
    # (the 10-minute warning, due since 50 minutes in, goes out on this first tick)
    assert lease_tasks.tick() == {"expired": 0, "started": 0, "drained": 0, "warned": 1}
    frozen.move_to(T0 + hours(1) + timedelta(seconds=1))
    assert lease_tasks.tick() == {"expired": 1, "started": 1, "drained": 0, "warned": 0}
    assert lease_tasks.tick() == {"expired": 0, "started": 0, "drained": 0, "warned": 0}  # once
    held.refresh_from_db()
    booked.refresh_from_db()
    assert held.status == LeaseStatus.RELEASING  # cards free; the backend is told next
    assert booked.status == LeaseStatus.PROVISIONING
    tick = settings.CELERY_BEAT_SCHEDULE["leasing-tick"]
    assert tick["task"] == "leasing.tasks.tick" and tick["schedule"] <= 5


def test_expiry_reclaims_at_end_time_once(frozen, alice, bob, vision, nlp, a100):
    make_node(a100, cards=1, domains=1, hostname="one")
    lease = activate(ask(alice, vision, a100, duration=hours(1)))
    waiting = ask(bob, nlp, a100, duration=hours(1))
    frozen.move_to(T0 + hours(1) - timedelta(seconds=1))
    lease_tasks.expire_lease(lease.pk)
    lease.refresh_from_db()
    assert lease.status == LeaseStatus.ACTIVE  # a task that comes early does nothing
    frozen.move_to(T0 + hours(1) + timedelta(seconds=3))
    lease_tasks.expire_lease(lease.pk)
    lease_tasks.expire_lease(lease.pk)  # twice: still one reclaim
    lease.refresh_from_db()
    assert lease.status == LeaseStatus.RELEASING and lease.ended_at == T0 + hours(1)
    assert lease.events.filter(kind="expire").count() == 1
    waiting.refresh_from_db()
    assert waiting.status == LeaseStatus.PROVISIONING
    lease_tasks.release_lease(lease.pk, EndReason.EXPIRED)
    lease.refresh_from_db()
    assert lease.end_reason == EndReason.EXPIRED


def test_sweep_reclaims_what_a_lost_task_missed_and_skips_the_rest(
    frozen, alice, vision, a100, small_pool
):
    later = activate(ask(alice, vision, a100, duration=hours(3)))  # must be skipped
    due = activate(ask(alice, vision, a100, duration=hours(1)))  # must be processed
    frozen.move_to(T0 + hours(2))
    result = lease_tasks.sweep()
    later.refresh_from_db()
    due.refresh_from_db()
    assert result["expired"] == 1
    assert later.status == LeaseStatus.ACTIVE
    assert due.status == LeaseStatus.RELEASING
    assert lease_tasks.sweep()["expired"] == 0


def with_backend(path):
    return {**settings.CARDPOOL, "BACKEND": path}


class FlakyBackend(LocalBackend):
    name = "flaky"

    def provision(self, holding):
        raise TransientBackendError("controller busy")


class BrokenBackend(LocalBackend):
    name = "broken"

    def provision(self, holding):
        raise PermanentBackendError("node gpu9 has no such device")


@override_settings(CARDPOOL=with_backend("tests.leasing.test_lifecycle.BrokenBackend"))
def test_permanent_backend_failure_fails_the_lease_and_frees_the_cards(
    frozen, alice, bob, vision, nlp, a100
):
    make_node(a100, cards=1, domains=1, hostname="one")
    lease = ask(alice, vision, a100)
    waiting = ask(bob, nlp, a100)
    lease_tasks.provision_lease.apply(args=(lease.pk,))
    lease.refresh_from_db()
    waiting.refresh_from_db()
    assert lease.status == LeaseStatus.FAILED
    assert "no such device" in lease.failure_reason
    assert not Allocation.objects.filter(lease=lease, end_at__gt=T0).exists()
    assert waiting.status == LeaseStatus.PROVISIONING


@override_settings(CARDPOOL=with_backend("tests.leasing.test_lifecycle.FlakyBackend"))
def test_transient_failures_are_retried_then_fail(
    frozen, alice, vision, a100, small_pool, monkeypatch
):
    lease = ask(alice, vision, a100)
    lease_tasks.provision_lease.apply(args=(lease.pk,))  # eager apply runs the retries in-line
    lease.refresh_from_db()
    assert lease.status == LeaseStatus.FAILED
    assert (
        BackendCall.objects.filter(lease=lease, ok=False).count()
        == lease_tasks.MAX_BACKEND_RETRIES + 1
    )


def test_extend_when_free_and_nobody_waits(frozen, alice, vision, a100, small_pool):
    lease = activate(ask(alice, vision, a100, duration=hours(1)))
    lease = changes.lease_extend(lease=lease, user=alice, minutes=90)
    assert lease.end_at == T0 + hours(2.5)
    assert set(lease.allocations.values_list("end_at", flat=True)) == {T0 + hours(2.5)}


def test_extend_refused_when_it_would_delay_a_waiting_request(
    frozen, alice, bob, vision, nlp, a100
):
    make_node(a100, cards=1, domains=1, hostname="one")
    lease = activate(ask(alice, vision, a100, duration=hours(1)))
    ask(bob, nlp, a100, duration=hours(1))
    with pytest.raises(ValidationError, match="waiting"):
        changes.lease_extend(lease=lease, user=alice, minutes=30)


def test_extend_refused_when_cards_are_booked_after(frozen, alice, bob, vision, nlp, a100):
    make_node(a100, cards=1, domains=1, hostname="one")
    lease = activate(ask(alice, vision, a100, duration=hours(1)))
    ask(bob, nlp, a100, duration=hours(1), start_at=T0 + hours(1))
    with pytest.raises(ValidationError, match="booked"):
        changes.lease_extend(lease=lease, user=alice, minutes=30)


def test_cancel_a_queued_or_scheduled_lease_but_not_an_active_one(
    frozen, alice, vision, a100, small_pool
):
    booked = ask(alice, vision, a100, start_at=T0 + hours(3))
    assert changes.lease_cancel(lease=booked, user=alice).status == LeaseStatus.CANCELLED
    assert not booked.allocations.exists()
    active = activate(ask(alice, vision, a100))
    with pytest.raises(ValidationError, match="Release it instead"):
        changes.lease_cancel(lease=active, user=alice)


def test_someone_else_cannot_release_your_lease(frozen, alice, bob, vision, a100, small_pool):
    from django.core.exceptions import PermissionDenied

    lease = activate(ask(alice, vision, a100))
    with pytest.raises(PermissionDenied):
        changes.lease_release(lease=lease, user=bob)


def test_lead_may_release_a_member_lease(frozen, alice, lena, vision, a100, small_pool):
    lease = activate(ask(alice, vision, a100))
    assert changes.lease_release(lease=lease, user=lena).status == LeaseStatus.RELEASING


def test_a_queue_that_drains_at_once_is_handed_over_in_batches(
    frozen,
    alice,
    bob,
    vision,
    nlp,
    a100,
    django_capture_on_commit_callbacks,
    monkeypatch,
    sent_tasks,
):
    from leasing import transitions

    make_node(a100, cards=4, domains=1, hostname="four")
    holder = activate(ask(alice, vision, a100, count=4, duration=hours(8)))
    waiting = [ask(bob, nlp, a100, duration=hours(1)) for _ in range(3)]
    monkeypatch.setattr(transitions, "PROVISION_BATCH", 2)
    with django_capture_on_commit_callbacks(execute=True):
        changes.lease_release(lease=holder, user=alice)
    ids = [lease.pk for lease in waiting]
    batches = [task.args[0] for task in sent_tasks if task.name == "leasing.tasks.provision_batch"]
    assert batches == [ids[:2], ids[2:]]
    for batch in batches:
        lease_tasks.provision_batch(batch)
    assert set(Lease.objects.filter(pk__in=ids).values_list("status", flat=True)) == {
        LeaseStatus.ACTIVE
    }


@override_settings(CARDPOOL=with_backend("tests.leasing.test_lifecycle.FlakyBackend"))
def test_a_lease_failing_in_a_batch_is_retried_on_its_own(
    frozen, alice, vision, a100, small_pool, sent_tasks
):
    lease = ask(alice, vision, a100)
    lease_tasks.provision_batch([lease.pk])
    lease.refresh_from_db()
    assert lease.status == LeaseStatus.PROVISIONING
    assert [(task.name, task.args) for task in sent_tasks] == [
        ("leasing.tasks.provision_lease", (lease.pk,))
    ]


@override_settings(CARDPOOL=with_backend("tests.leasing.test_lifecycle.BrokenBackend"))
def test_a_lease_refused_in_a_batch_fails_with_its_cards_freed(frozen, alice, vision, a100):
    make_node(a100, cards=1, domains=1, hostname="one")
    lease = ask(alice, vision, a100)
    lease_tasks.provision_batch([lease.pk])
    lease.refresh_from_db()
    assert lease.status == LeaseStatus.FAILED and "no such device" in lease.failure_reason
    assert not Allocation.objects.filter(lease=lease, end_at__gt=T0).exists()
