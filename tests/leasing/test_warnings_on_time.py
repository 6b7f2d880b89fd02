"""Warnings on time: each expiry warning is due at exactly its offset before the end, and the
2 s tick sends it (the 15 s sweep is only the safety net), so it goes out within a tick of its
offset instead of up to a sweep late (the 10-minute warning once came 12–13 s late)."""

from datetime import timedelta

from hypothesis import given
from hypothesis import strategies as st

from leasing.lifecycle import endings
from leasing.lifecycle import tasks as lease_tasks
from leasing.models import Lease, LeaseWarning, Notification
from tests.leasing.conftest import T0, ask, hours
from tests.leasing.test_endings import active

SECOND = timedelta(seconds=1)
OFFSETS = st.lists(st.integers(min_value=1, max_value=10080), min_size=1, max_size=5, unique=True)


@given(
    offsets=OFFSETS,
    end_s=st.integers(min_value=0, max_value=30 * 86400),
    data=st.data(),
)
def test_a_warning_is_due_at_exactly_its_offset(offsets, end_s, data):
    end = T0 + timedelta(seconds=end_s)
    offset = data.draw(st.sampled_from(offsets))
    due_at = end - timedelta(minutes=offset)
    assert offset in endings.warnings_due(end=end, offsets=offsets, sent=set(), now=due_at)
    early = due_at - timedelta(microseconds=1)
    assert offset not in endings.warnings_due(end=end, offsets=offsets, sent=set(), now=early)
    assert offset not in endings.warnings_due(end=end, offsets=offsets, sent={offset}, now=due_at)
    # The lease's next look (warn_at) is the first unsent offset's due time, never later.
    assert endings.next_warning_at(end=end, offsets=offsets, sent=set()) == min(
        end - timedelta(minutes=m) for m in offsets
    )
    assert endings.next_warning_at(end=end, offsets=offsets, sent=set(offsets)) == end


def _expiring(lease) -> int:
    return Notification.objects.filter(lease=lease, kind="lease_expiring").count()


def test_the_tick_sends_the_ten_minute_warning_within_a_tick(
    frozen, alice, vision, a100, small_pool
):
    lease = active(ask(alice, vision, a100, duration=timedelta(minutes=30)))
    lease_tasks.tick()  # works out when its first warning is due
    lease.refresh_from_db()
    due = lease.end_at - timedelta(minutes=10)
    assert lease.warn_at == due
    frozen.move_to(due - SECOND)
    lease_tasks.tick()
    assert _expiring(lease) == 0  # not a second early
    frozen.move_to(due + 2 * SECOND)  # the next 2 s tick, no sweep in between
    lease_tasks.tick()
    assert _expiring(lease) == 1
    assert LeaseWarning.objects.get(lease=lease).sent_at == due + 2 * SECOND
    lease.refresh_from_db()
    assert lease.warn_at == lease.end_at  # none left: the tick looks again at the end
    lease_tasks.tick()
    assert _expiring(lease) == 1  # once


def test_the_tick_reads_only_leases_whose_warning_is_due(
    frozen, alice, vision, a100, small_pool, django_assert_max_num_queries
):
    lease = active(ask(alice, vision, a100, duration=hours(3)))
    endings.warnings_send_ticked()
    with django_assert_max_num_queries(2):
        assert endings.warnings_send_ticked() == 0  # two index reads when nothing is due
    frozen.move_to(Lease.objects.get(pk=lease.pk).warn_at)
    assert endings.warnings_send_ticked() == 1


def test_an_extension_moves_the_next_warning(frozen, alice, vision, a100, small_pool):
    from leasing.lifecycle import changes

    lease = active(ask(alice, vision, a100, duration=hours(2)))
    lease_tasks.tick()
    changes.lease_extend(lease=lease, user=alice, minutes=60)
    lease.refresh_from_db()
    ten = LeaseWarning.objects.filter(lease=lease, offset_minutes=10)
    frozen.move_to(T0 + hours(2) - timedelta(minutes=10))  # the old end's 10-minute mark
    lease_tasks.tick()
    assert not ten.exists()  # the lease ends an hour later now
    frozen.move_to(T0 + hours(3) - timedelta(minutes=10))
    lease_tasks.tick()
    assert ten.get().sent_at == T0 + hours(3) - timedelta(minutes=10)
