"""The planner's snapshot is read on a plain cursor with times as integers
(leasing/scheduler/rows.py): it must read exactly what the ORM reads, times to the
microsecond, on SQLite and on PostgreSQL."""

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from inventory.models import Card
from leasing.choices import LeaseStatus
from leasing.models import Allocation, Lease
from leasing.scheduler import snapshot
from leasing.scheduler.rows import EpochMicros, at, fetch, micros
from tests.leasing.conftest import T0

moments = st.datetimes(
    min_value=datetime(2001, 1, 1),  # noqa: DTZ001 (hypothesis takes naive bounds)
    max_value=datetime(2090, 12, 31),  # noqa: DTZ001
    timezones=st.just(UTC),
)


@pytest.mark.django_db
@settings(max_examples=25, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(start=moments, length=st.timedeltas(min_value=timedelta(microseconds=1),
                                            max_value=timedelta(days=400)))  # fmt: skip
def test_times_and_durations_come_back_to_the_microsecond(alice, vision, a100, start, length):
    lease = Lease.objects.create(
        user=alice, team=vision, card_model=a100, count=1, duration=length,
        start_at=start, end_at=start + length, status=LeaseStatus.QUEUED,
        status_changed_at=start, submitted_at=start, estimated_start=None,
    )  # fmt: skip
    rows = fetch(
        Lease.objects.filter(pk=lease.pk).values_list(
            EpochMicros("start_at"),
            EpochMicros("end_at"),
            EpochMicros("duration", duration=True),
            EpochMicros("estimated_start"),
        )
    )
    assert rows == [(micros(start), micros(start + length), length // timedelta(microseconds=1),
                     None)]  # fmt: skip
    assert at(rows[0][0]) == start and at(rows[0][1]) == start + length
    lease.delete()


def orm_timeline(model, now):
    busy = {}
    for card_id, start, end, preempt_at, preempt_cards in Allocation.objects.filter(
        card__card_model=model, end_at__gt=now
    ).values_list("card_id", "start_at", "end_at", "lease__preempt_at", "lease__preempt_cards"):
        if preempt_at is not None and preempt_cards is None:
            end = min(end, max(preempt_at, now))
        if end > max(start, now):
            busy.setdefault(card_id, []).append((max(start, now), end))
    return {c: sorted(p) for c, p in busy.items()}


def test_the_snapshot_reads_what_the_orm_reads(frozen, alice, vision, a100, small_pool):
    cards = list(Card.objects.filter(card_model=a100).order_by("pk"))
    odd = timedelta(minutes=37, seconds=5, microseconds=123_457)
    held = Lease.objects.create(
        user=alice, team=vision, card_model=a100, count=2, duration=odd,
        start_at=T0 - odd, end_at=T0 + odd, status=LeaseStatus.ACTIVE,
        status_changed_at=T0, submitted_at=T0 - odd,
        preempt_at=T0 + timedelta(minutes=5, microseconds=9),
    )  # fmt: skip
    later = Lease.objects.create(
        user=alice, team=vision, card_model=a100, count=1, duration=odd,
        start_at=T0 + odd, end_at=T0 + 3 * odd, status=LeaseStatus.SCHEDULED,
        status_changed_at=T0, submitted_at=T0,
    )  # fmt: skip
    Allocation.objects.bulk_create(
        [
            Allocation(card=cards[0], lease=held, start_at=T0 - odd, end_at=T0 + odd),
            Allocation(card=cards[1], lease=held, start_at=T0 - odd, end_at=T0 + odd),
            Allocation(card=cards[2], lease=later, start_at=T0 + odd, end_at=T0 + 3 * odd),
            Allocation(card=cards[3], lease=later, start_at=T0 - 2 * odd, end_at=T0 - odd),
        ]
    )
    waiting = Lease.objects.create(
        user=alice, team=vision, card_model=a100, count=3, duration=odd,
        start_at=T0 - odd, end_at=T0, status=LeaseStatus.QUEUED, status_changed_at=T0,
        submitted_at=T0 - timedelta(microseconds=1), same_node=False,
        estimated_start=T0 + odd, planned_cards=[cards[4].pk, cards[5].pk, cards[6].pk],
        stall_reason="", requirements={"region": "nowhere"},
    )  # fmt: skip
    now = T0
    got = snapshot.timeline_for(a100.pk, now=now)
    assert {c: p for c, p in got.busy.items() if p} == orm_timeline(a100, now)
    [w] = snapshot.waiting_for(a100.pk, now=now)
    assert w.request.lease_id == waiting.pk
    assert w.request.duration == odd and w.request.not_before == now
    assert w.request.same_node is False and w.request.count == 3
    assert w.request.nodes == frozenset()  # no node in region "nowhere"
    assert w.estimated_start == T0 + odd
    assert w.planned_cards == (cards[4].pk, cards[5].pk, cards[6].pk)
    slots = snapshot.card_slots(a100.pk, now=now)
    assert [s.card_id for s in slots] == sorted(c.pk for c in cards)


def test_asking_for_no_card_model_reads_nothing(db):
    assert snapshot.card_slots_of([], now=T0) == {}
    assert snapshot.timelines_of([], now=T0) == {}
    assert snapshot.waiting_of([], now=T0) == {}
