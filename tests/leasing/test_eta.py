"""The start a waiting lease is told (scheduler.eta): never before the plan's, the plan's
once nobody can pass it, and the room left for passing work only shrinks as time goes on."""

from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from leasing.scheduler.eta import PASSING_CAP, PASSING_FACTOR, told_start, virtual_submit
from leasing.scheduler.queueplan import service_key

T0 = datetime(2026, 12, 1, tzinfo=UTC)
minutes = st.integers(min_value=0, max_value=24 * 60).map(lambda m: timedelta(minutes=m))


@given(
    planned=minutes,
    duration=st.integers(min_value=1, max_value=48 * 60).map(lambda m: timedelta(minutes=m)),
    count=st.integers(min_value=1, max_value=64),
    since=minutes,
    later=minutes,
)
def test_told_start_counts_what_may_still_pass(planned, duration, count, since, later):
    virtual = virtual_submit(T0, duration, count)
    key = service_key(rank=0, submitted_at=T0, duration=duration, count=count, lease_id=1)
    assert virtual == key[1]  # the queue order's own virtual submit time
    now = T0 + since
    plan = now + planned
    told = told_start(plan, virtual_at=virtual, now=now)
    assert told >= plan
    assert told - plan == min(PASSING_FACTOR * max(virtual - now, timedelta(0)), PASSING_CAP)
    # later, with the same plan: never further out
    assert told_start(plan, virtual_at=virtual, now=now + later) <= told
    # past the virtual submit time nobody can pass: the plan's start itself
    assert told_start(plan, virtual_at=virtual, now=max(now, virtual)) == plan
    assert told_start(None, virtual_at=virtual, now=now) is None
