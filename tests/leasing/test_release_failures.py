"""A release the backend cannot do ends in ``release_failed`` (never a loop), keeps its cards
out of placement until an operator resolves it; end reasons live on the lease."""

from datetime import timedelta

import pytest
from django.conf import settings
from django.core.exceptions import PermissionDenied
from django.db import IntegrityError, transaction
from django.test import override_settings

from inventory.models import Card
from leasing.backends import PermanentBackendError, TransientBackendError
from leasing.backends.local import LocalBackend
from leasing.choices import EndReason, LeaseStatus
from leasing.lifecycle import changes, endings, provisioning, releases
from leasing.lifecycle import tasks as lease_tasks
from leasing.models import BackendCall, Lease, LeaseEvent, Notification
from leasing.scheduler.availability import card_models_with_counts
from portal.metrics import card_state
from tests.factories import make_node
from tests.leasing.conftest import T0, ask, hours


class RefusingBackend(LocalBackend):
    """Hands cards over, never takes them back."""

    name = "refusing"

    def release(self, holding):
        raise PermanentBackendError("scancel: Access/permission denied")


class BusyBackend(LocalBackend):
    name = "busy"

    def release(self, holding):
        raise TransientBackendError("slurmctld busy")


def backend(path):
    return override_settings(CARDPOOL={**settings.CARDPOOL, "BACKEND": path})


def active(lease):
    assert provisioning.provision_step(lease_id=lease.pk)
    lease.refresh_from_db()
    return lease


def released(lease, user, frozen, minutes=30):
    frozen.shift(timedelta(minutes=minutes))
    changes.lease_release(lease=lease, user=user)
    lease.refresh_from_db()
    return lease


def stuck_for_a_while(frozen):
    frozen.shift(timedelta(seconds=settings.CARDPOOL["STUCK_SECONDS"] + 1))


@backend("tests.leasing.test_release_failures.RefusingBackend")
def test_a_permanent_release_failure_ends_in_release_failed_and_is_never_resent(
    frozen, alice, vision, a100, ops, sent_tasks, django_capture_on_commit_callbacks
):
    make_node(a100, cards=2, domains=1, hostname="pair")
    lease = released(active(ask(alice, vision, a100, count=2)), alice, frozen)
    lease_tasks.release_lease(lease.pk, EndReason.RELEASED)
    lease.refresh_from_db()
    assert lease.status == LeaseStatus.RELEASE_FAILED
    assert "permission denied" in lease.failure_reason
    assert lease.end_reason == EndReason.RELEASED
    for _ in range(3):
        stuck_for_a_while(frozen)
        assert lease_tasks.sweep()["rereleased"] == 0
    assert not [t for t in sent_tasks if t.name == "leasing.tasks.release_lease"]
    assert BackendCall.objects.filter(lease=lease, action="release").count() == 1


@backend("tests.leasing.test_release_failures.BusyBackend")
def test_transient_release_failures_are_bounded_across_retries_and_sweeps(
    frozen, alice, vision, a100, small_pool
):
    lease = released(active(ask(alice, vision, a100)), alice, frozen)
    for _ in range(3 * provisioning.RELEASE_ATTEMPTS):
        stuck_for_a_while(frozen)
        lease_tasks.sweep()
        try:  # a retry (Celery raises the error when called directly) or the resend
            lease_tasks.release_lease(lease.pk, EndReason.RELEASED)
        except TransientBackendError:
            pass
    lease.refresh_from_db()
    assert lease.status == LeaseStatus.RELEASE_FAILED
    assert "kept failing" in lease.failure_reason
    calls = BackendCall.objects.filter(lease=lease, action="release").count()
    assert calls == provisioning.RELEASE_ATTEMPTS


@backend("tests.leasing.test_release_failures.RefusingBackend")
def test_a_failed_releases_cards_stay_out_of_placement_until_resolved(
    frozen, alice, bob, vision, nlp, a100, ops, sent_tasks, django_capture_on_commit_callbacks
):
    make_node(a100, cards=2, domains=1, hostname="pair")
    lease = active(ask(alice, vision, a100, count=2, duration=hours(4)))
    frozen.shift(timedelta(minutes=30))
    with django_capture_on_commit_callbacks(execute=False):
        changes.lease_release(lease=lease, user=alice)
    with django_capture_on_commit_callbacks(execute=True):
        provisioning.release_step(lease_id=lease.pk)
    lease.refresh_from_db()
    assert lease.status == LeaseStatus.RELEASE_FAILED
    # The backend may still hold them: neither the fast path nor the queue pass places there,
    # and the catalogue does not count them free.
    waiting = ask(bob, nlp, a100, count=1)
    assert waiting.status == LeaseStatus.QUEUED
    assert card_models_with_counts(frozen_now()).get(pk=a100.pk).available == 0
    states = Card.objects.annotate(state=card_state(frozen_now())).values_list("state", flat=True)
    assert set(states) == {"held"}  # /metrics
    # Operators hear of it; the holder hears the lease ended, with its own reason.
    for task in sent_tasks:
        if task.name == "leasing.tasks.notify_lease":
            lease_tasks.notify_lease(*task.args)
    notice = Notification.objects.get(user=ops, kind="release_failed")
    assert "permission denied" in notice.body
    ended = Notification.objects.get(user=alice, kind="lease_ended")
    assert ended.data["reason"] == EndReason.RELEASED

    with pytest.raises(PermissionDenied):
        releases.lease_release_resolve(lease=lease, user=alice)
    frozen.shift(hours(2))
    with django_capture_on_commit_callbacks(execute=True):
        releases.lease_release_resolve(lease=lease, user=ops, note="scancel'd by hand")
    lease.refresh_from_db()
    waiting.refresh_from_db()
    assert (lease.status, lease.end_reason) == (LeaseStatus.ENDED, EndReason.RELEASED)
    assert waiting.status == LeaseStatus.PROVISIONING  # the queue moved at once
    assert lease.events.get(kind="ended").actor == ops
    # Billed up to the moment the holder lost the lease, once: not the two hours after.
    (record,) = lease.usage_records.all()
    assert (record.cards, record.minutes) == (2, 30)


def frozen_now():
    from django.utils import timezone

    return timezone.now()


def test_an_operator_retries_a_failed_release(
    frozen, alice, bob, vision, nlp, a100, ops, sent_tasks, django_capture_on_commit_callbacks
):
    make_node(a100, cards=1, domains=1, hostname="one")
    with backend("tests.leasing.test_release_failures.RefusingBackend"):
        lease = released(active(ask(alice, vision, a100)), alice, frozen)
        provisioning.release_step(lease_id=lease.pk)
    lease.refresh_from_db()
    assert lease.status == LeaseStatus.RELEASE_FAILED
    waiting = ask(bob, nlp, a100)
    frozen.shift(hours(1))
    with django_capture_on_commit_callbacks(execute=True):
        releases.lease_release_retry(lease=lease, user=ops)
    lease.refresh_from_db()
    waiting.refresh_from_db()
    assert lease.status == LeaseStatus.RELEASING
    assert waiting.status == LeaseStatus.QUEUED  # held back until the retry is done
    assert sent_tasks[-1].name == "leasing.tasks.release_lease"
    # Fixed by the operator: the next attempt goes through, with the reason it began with,
    # and the card goes to the waiting lease at once.
    lease_tasks.release_lease(*sent_tasks[-1].args)
    lease.refresh_from_db()
    waiting.refresh_from_db()
    assert (lease.status, lease.end_reason) == (LeaseStatus.ENDED, EndReason.RELEASED)
    assert waiting.status == LeaseStatus.PROVISIONING
    assert lease.events.filter(kind="release_retried", actor=ops).exists()


def test_a_lost_release_ends_with_the_reason_it_began_with(
    frozen, alice, vision, a100, small_pool, sent_tasks, django_capture_on_commit_callbacks
):
    lease = active(ask(alice, vision, a100, duration=hours(1)))
    # Lines on the timeline that carry another reason must not matter.
    LeaseEvent.objects.create(lease=lease, at=T0, kind="note", data={"reason": "admin"})
    frozen.move_to(T0 + hours(1))
    endings.lease_expire(lease_id=lease.pk)  # its release task is lost
    lease.refresh_from_db()
    assert (lease.status, lease.end_reason) == (LeaseStatus.RELEASING, EndReason.EXPIRED)
    stuck_for_a_while(frozen)
    sent_tasks.clear()
    assert lease_tasks.sweep()["rereleased"] == 1
    (resend,) = [t for t in sent_tasks if t.name == "leasing.tasks.release_lease"]
    with django_capture_on_commit_callbacks(execute=True):
        lease_tasks.release_lease(*resend.args)
    lease.refresh_from_db()
    assert (lease.status, lease.end_reason) == (LeaseStatus.ENDED, EndReason.EXPIRED)
    notified = [t.args for t in sent_tasks if t.name == "leasing.tasks.notify_lease"]
    assert (lease.pk, "lease_ended") in notified


def test_end_reason_is_set_exactly_while_ending_or_ended(frozen, alice, vision, a100, small_pool):
    lease = active(ask(alice, vision, a100))
    assert lease.end_reason == ""
    with pytest.raises(IntegrityError), transaction.atomic():
        Lease.objects.filter(pk=lease.pk).update(status=LeaseStatus.RELEASING)
    with pytest.raises(IntegrityError), transaction.atomic():
        Lease.objects.filter(pk=lease.pk).update(end_reason=EndReason.ADMIN)
    lease = released(lease, alice, frozen)
    assert (lease.status, lease.end_reason) == (LeaseStatus.RELEASING, EndReason.RELEASED)


@backend("tests.leasing.test_release_failures.RefusingBackend")
def test_operators_see_failed_releases_and_resolve_them_from_the_pages(
    client, frozen, alice, vision, a100, ops
):
    make_node(a100, cards=2, domains=1, hostname="pair")
    lease = released(active(ask(alice, vision, a100, count=2)), alice, frozen)
    provisioning.release_step(lease_id=lease.pk)
    client.cookies["django_language"] = "en"

    client.force_login(alice)  # the holder sees the state, not the operator's buttons
    page = client.get(f"/leases/{lease.pk}/").content.decode()
    assert "Release failed" in page and "Retry the release" not in page
    assert "Releases that failed" not in client.get("/pool/").content.decode()
    client.post(f"/leases/{lease.pk}/release-resolve/")
    lease.refresh_from_db()
    assert lease.status == LeaseStatus.RELEASE_FAILED

    client.force_login(ops)
    pool = client.get("/pool/").content.decode()
    assert "Releases that failed" in pool and "pair:0,1" in pool
    node = client.get("/inventory/nodes/pair/").content.decode()
    assert f"Release of lease {lease.pk} failed" in node
    page = client.get(f"/leases/{lease.pk}/").content.decode()
    assert "Retry the release" in page and "permission denied" in page
    response = client.post(f"/leases/{lease.pk}/release-resolve/", {"note": "scancel by hand"})
    assert response.status_code == 302
    lease.refresh_from_db()
    assert lease.status == LeaseStatus.ENDED
    assert lease.events.get(kind="ended").message == "scancel by hand"
    assert "Releases that failed" not in client.get("/pool/").content.decode()


@backend("tests.leasing.test_release_failures.RefusingBackend")
def test_operators_resolve_a_failed_release_through_the_api(
    api, frozen, alice, vision, a100, ops, small_pool
):
    lease = released(active(ask(alice, vision, a100)), alice, frozen)
    provisioning.release_step(lease_id=lease.pk)
    api.force_authenticate(alice)
    body = api.get(f"/api/v1/leases/{lease.pk}/").json()
    assert (body["status"], body["end_reason"]) == ("release_failed", "released")
    assert api.post(f"/api/v1/leases/{lease.pk}/release-retry/").status_code == 403
    api.force_authenticate(ops)
    retried = api.post(f"/api/v1/leases/{lease.pk}/release-retry/")
    assert retried.status_code == 200 and retried.json()["status"] == "releasing"
    provisioning.release_step(lease_id=lease.pk)  # still refused: failed again
    resolved = api.post(f"/api/v1/leases/{lease.pk}/release-resolve/", {"note": "by hand"})
    assert resolved.status_code == 200 and resolved.json()["status"] == "ended"
    again = api.post(f"/api/v1/leases/{lease.pk}/release-resolve/", {"note": "twice"})
    assert again.status_code == 400
