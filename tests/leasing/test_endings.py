"""Warnings before the end, idle cards, preemption with grace, draining and faulty cards."""

import threading
from datetime import timedelta

import pytest
from django.db import connections

from inventory.models import Card, CardSample, Node
from leasing.choices import EndReason, LeaseStatus, Priority, WarningKind
from leasing.lifecycle import endings, maintenance, provisioning
from leasing.lifecycle import tasks as lease_tasks
from leasing.models import LeaseWarning, Notification
from tests.factories import make_node
from tests.leasing.conftest import T0, ask, hours


class Told:
    """What the holders were told so far, read from the notification centre's rows:
    (kind, lease id) per warning or end notice, oldest first."""

    KINDS = ("lease_expiring", "idle_warning", "preemption_warning", "drain_warning", "lease_ended")

    def _rows(self) -> list[tuple[str, int]]:
        notices = Notification.objects.filter(kind__in=self.KINDS).order_by("pk")
        return list(notices.values_list("kind", "lease_id"))

    def __iter__(self):
        return iter(self._rows())

    def __len__(self) -> int:
        return len(self._rows())

    def __eq__(self, other) -> bool:
        return self._rows() == list(other)

    def __repr__(self) -> str:
        return repr(self._rows())


@pytest.fixture
def told(db) -> Told:
    return Told()


def active(lease):
    provisioning.provision_step(lease_id=lease.pk)
    lease.refresh_from_db()
    return lease


# --- warnings -------------------------------------------------------------------------------


def test_each_offset_warned_once_and_only_those_that_fit(
    frozen, told, alice, vision, a100, small_pool
):
    long = active(ask(alice, vision, a100, duration=hours(30)))  # 24 h, 1 h and 10 min fit
    short = active(ask(alice, vision, a100, duration=timedelta(minutes=50)))  # only 10 min fits
    frozen.move_to(T0 + hours(6))  # 24 h before long's end
    assert endings.warnings_send_due() == 1
    assert endings.warnings_send_due() == 0  # the next sweep: nothing new
    frozen.move_to(T0 + timedelta(minutes=41))  # short: 9 min left
    endings.warnings_send_due()
    frozen.move_to(T0 + hours(29))  # long: 1 h left
    endings.warnings_send_due()
    frozen.move_to(T0 + hours(29) + timedelta(minutes=51))
    endings.warnings_send_due()
    offsets = set(LeaseWarning.objects.values_list("lease_id", "offset_minutes"))
    assert offsets == {(long.pk, 1440), (long.pk, 60), (long.pk, 10), (short.pk, 10)}
    assert len(told) == 4 and all(kind == "lease_expiring" for kind, _ in told)


def test_user_adjusted_offsets(frozen, told, alice, vision, a100, small_pool):
    alice.profile.warning_offsets = [30]
    alice.profile.save()
    lease = active(ask(alice, vision, a100, duration=hours(2)))
    frozen.move_to(T0 + hours(1.5))
    endings.warnings_send_due()
    assert list(lease.warnings.values_list("offset_minutes", flat=True)) == [30]


@pytest.mark.postgres
def test_two_sweeps_at_once_send_each_warning_once(transactional_db, told, alice, vision, a100):
    make_node(a100, cards=2, domains=1, hostname="w")
    leases = [active(ask(alice, vision, a100, duration=timedelta(minutes=30))) for _ in range(2)]
    import time_machine

    with time_machine.travel(leases[0].end_at - timedelta(minutes=5), tick=False):
        barrier = threading.Barrier(2)

        def run():
            barrier.wait()
            endings.warnings_send_due()
            connections.close_all()

        threads = [threading.Thread(target=run) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert LeaseWarning.objects.count() == 2
    assert len(told) == 2


# --- idle ---------------------------------------------------------------------------------


def samples(lease, start, minutes, util):
    cards = [a.card for a in lease.allocations.select_related("card")]
    CardSample.objects.bulk_create(
        CardSample(card=c, at=start + timedelta(minutes=m), utilization_pct=util)
        for c in cards
        for m in range(0, minutes, 5)
    )


def test_idle_lease_is_warned_then_reclaimed_where_policy_says(
    frozen, told, alice, vision, a100, small_pool
):
    vision.idle_reclaim, vision.idle_minutes, vision.idle_threshold_pct = True, 60, 5
    vision.save()
    busy = active(ask(alice, vision, a100, duration=hours(8)))
    idle = active(ask(alice, vision, a100, duration=hours(8)))
    samples(busy, T0, 240, 80.0)
    samples(idle, T0, 240, 1.0)
    frozen.move_to(T0 + hours(1) + timedelta(minutes=1))
    assert endings.idle_check() == {"warned": 1, "reclaimed": 0}
    assert told == [("idle_warning", idle.pk)]
    frozen.move_to(T0 + hours(1) + timedelta(minutes=20))  # inside the grace period
    assert endings.idle_check()["reclaimed"] == 0
    frozen.move_to(T0 + hours(2))
    assert endings.idle_check()["reclaimed"] == 1
    idle.refresh_from_db()
    busy.refresh_from_db()
    assert idle.status == LeaseStatus.RELEASING and busy.status == LeaseStatus.ACTIVE
    lease_tasks.release_lease(idle.pk, EndReason.IDLE)
    idle.refresh_from_db()
    assert idle.end_reason == EndReason.IDLE


def test_idle_without_reclaim_policy_only_warns(frozen, told, alice, vision, a100, small_pool):
    lease = active(ask(alice, vision, a100, duration=hours(8)))
    samples(lease, T0, 300, 0.0)
    frozen.move_to(T0 + hours(3))
    endings.idle_check()
    frozen.move_to(T0 + hours(4))
    assert endings.idle_check() == {"warned": 0, "reclaimed": 0}
    lease.refresh_from_db()
    assert lease.status == LeaseStatus.ACTIVE and told == [("idle_warning", lease.pk)]


def test_no_telemetry_is_not_idle(frozen, told, alice, vision, a100, small_pool):
    active(ask(alice, vision, a100, duration=hours(8)))
    frozen.move_to(T0 + hours(3))
    assert endings.idle_check() == {"warned": 0, "reclaimed": 0}


# --- preemption ---------------------------------------------------------------------------


def test_preemption_with_grace_ends_only_preemptible_leases(
    frozen, told, alice, lena, bob, vision, nlp, a100
):
    make_node(a100, cards=4, domains=1, hostname="p")
    normal = active(ask(alice, vision, a100, count=2, duration=hours(8)))
    cheap_big = active(
        ask(bob, nlp, a100, count=1, duration=hours(8), priority=Priority.PREEMPTIBLE)
    )
    frozen.shift(timedelta(minutes=5))
    cheap_new = active(
        ask(bob, nlp, a100, count=1, duration=hours(8), priority=Priority.PREEMPTIBLE)
    )
    urgent = ask(lena, vision, a100, count=1, duration=hours(1), priority=Priority.HIGH)
    # One card is needed: the preemptible lease with the least elapsed work goes.
    assert urgent.status == LeaseStatus.QUEUED
    cheap_new.refresh_from_db()
    assert cheap_new.preempt_at == T0 + timedelta(minutes=15)
    assert urgent.estimated_start == cheap_new.preempt_at
    assert told == [("preemption_warning", cheap_new.pk)] or told == []  # sent on commit
    frozen.move_to(T0 + timedelta(minutes=14))
    assert endings.preemptions_due() == 0
    frozen.move_to(T0 + timedelta(minutes=15))
    lease_tasks.sweep()
    cheap_new.refresh_from_db()
    urgent.refresh_from_db()
    normal.refresh_from_db()
    cheap_big.refresh_from_db()
    assert cheap_new.status == LeaseStatus.RELEASING
    assert urgent.status == LeaseStatus.PROVISIONING
    assert normal.status == cheap_big.status == LeaseStatus.ACTIVE


def test_never_preempts_a_non_preemptible_lease(frozen, told, alice, lena, vision, a100):
    make_node(a100, cards=1, domains=1, hostname="p1")
    holder = active(ask(alice, vision, a100, duration=hours(8)))
    urgent = ask(lena, vision, a100, duration=hours(1), priority=Priority.HIGH)
    holder.refresh_from_db()
    assert holder.preempt_at is None and urgent.estimated_start == T0 + hours(8)


# --- maintenance --------------------------------------------------------------------------


def test_drain_warns_holders_and_ends_what_runs_at_the_drain_time(
    frozen, told, alice, ops, vision, a100
):
    node = make_node(a100, cards=2, domains=1, hostname="d")
    past = active(ask(alice, vision, a100, duration=hours(5)))
    inside = active(ask(alice, vision, a100, duration=hours(1)))
    warned = maintenance.node_drain(user=ops, node=node, drain_at=T0 + hours(2))
    assert warned == 1
    assert LeaseWarning.objects.get(kind=WarningKind.DRAIN).lease_id == past.pk
    late = ask(alice, vision, a100, duration=hours(3))  # would outlive the drain: waits
    assert late.status == LeaseStatus.QUEUED
    frozen.move_to(T0 + hours(2))
    assert maintenance.drains_due() == 1
    node.refresh_from_db()
    past.refresh_from_db()
    inside.refresh_from_db()
    assert node.status == Node.Status.MAINTENANCE
    assert (
        past.status == LeaseStatus.RELEASING and inside.status == LeaseStatus.ACTIVE
    )  # inside already expired later by sweep


def test_faulty_card_moves_the_lease_or_ends_it(frozen, told, alice, ops, vision, a100):
    make_node(a100, cards=3, domains=1, hostname="f")
    lease = active(ask(alice, vision, a100, count=2))
    held = list(lease.allocations.values_list("card_id", flat=True))
    frozen.shift(timedelta(minutes=10))
    assert (
        maintenance.card_mark_faulty(user=ops, card=Card.objects.get(pk=held[0]), note="XID 79")
        == "moved"
    )
    now_held = set(
        lease.allocations.filter(end_at__gt=T0 + timedelta(minutes=10)).values_list(
            "card_id", flat=True
        )
    )
    assert held[0] not in now_held and len(now_held) == 2
    assert provisioning.change_step(lease_id=lease.pk)  # the backend answers the new access
    lease.refresh_from_db()
    assert len(lease.access["nodes"][0]["devices"]) == 2
    # No spare left: the next fault ends the lease.
    assert maintenance.card_mark_faulty(user=ops, card=Card.objects.get(pk=held[1])) == "ended"
    lease.refresh_from_db()
    assert lease.status == LeaseStatus.RELEASING


def test_only_operators_drain_or_mark_faulty(alice, vision, a100):
    from django.core.exceptions import PermissionDenied

    node = make_node(a100, cards=1, domains=1, hostname="x")
    with pytest.raises(PermissionDenied):
        maintenance.node_drain(user=alice, node=node, drain_at=T0 + hours(30 * 24 * 12))
    with pytest.raises(PermissionDenied):
        maintenance.card_mark_faulty(user=alice, card=node.cards.get())
    assert not Node.objects.filter(status=Node.Status.DRAINING).exists()


def test_warnings_reach_the_notification_centre_once(frozen, alice, vision, a100, small_pool):
    from leasing.models import Notification

    lease = active(ask(alice, vision, a100, duration=hours(2)))
    frozen.move_to(T0 + hours(1) + timedelta(minutes=1))
    endings.warnings_send_due()
    endings.warnings_send_due()
    notes = Notification.objects.filter(user=alice, kind="lease_expiring", lease=lease)
    assert notes.count() == 1 and notes.get().url.endswith("#extend")


def test_lifecycle_events_notify_the_holder(
    frozen, alice, bob, vision, nlp, a100, sent_tasks, django_capture_on_commit_callbacks
):
    from leasing.notify.wording import notify_lease_event

    make_node(a100, cards=1, domains=1, hostname="n1")
    with django_capture_on_commit_callbacks(execute=True):
        first = active(ask(alice, vision, a100, duration=hours(1)))
        second = ask(bob, nlp, a100, duration=hours(1))
    frozen.move_to(T0 + hours(1))
    with django_capture_on_commit_callbacks(execute=True):
        endings.lease_expire(lease_id=first.pk)
        provisioning.lease_finish_release(lease_id=first.pk)
        provisioning.provision_step(lease_id=second.pk)
    # Notices of events are queued as tasks; the activation notice is written by the worker
    # itself (no second task for it).
    queued = [task.args for task in sent_tasks if task.name == "leasing.tasks.notify_lease"]
    assert (first.pk, "lease_ended") in queued and (second.pk, "lease_queued") in queued
    for lease_id, kind in queued:
        notify_lease_event(lease_id=lease_id, kind=kind)
    mine = set(Notification.objects.filter(user=alice).values_list("kind", flat=True))
    assert {"lease_active", "lease_ended"} <= mine
    kinds = set(Notification.objects.filter(user=bob).values_list("kind", flat=True))
    assert kinds == {"lease_queued", "lease_started_from_queue"}
