"""The start a waiting lease is told (scheduler.eta): never before the plan's, the plan's
once nobody can pass it, and the room left for passing work only shrinks as time goes on."""

import math
from datetime import UTC, datetime, timedelta

from django.utils.dateparse import parse_datetime
from hypothesis import given
from hypothesis import strategies as st

from leasing.scheduler.eta import (
    PASSING_CAP,
    PASSING_FACTOR,
    PASSING_STRETCH,
    told_start,
    virtual_of,
    virtual_submit,
)
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
    assert virtual == virtual_of(key)  # the queue order's own virtual submit time
    now = T0 + since
    plan = now + planned
    told = told_start(plan, virtual_at=virtual, now=now)
    assert told >= plan
    if now < virtual:  # it can still be passed: room for the work and the holes it cuts
        margin = min(PASSING_FACTOR * (virtual - now), PASSING_CAP)
        stretch = timedelta(minutes=math.floor(PASSING_STRETCH * planned.total_seconds() / 60))
        assert told - plan == margin + stretch
    else:
        assert told == plan
    # later, with the same plan: never further out
    assert told_start(plan, virtual_at=virtual, now=now + later) <= told
    # past the virtual submit time nobody can pass: the plan's start itself
    assert told_start(plan, virtual_at=virtual, now=max(now, virtual)) == plan
    assert told_start(None, virtual_at=virtual, now=now) is None


def test_the_queued_notice_and_the_event_tell_the_start_told(frozen, alice, bob, vision, nlp, a100):
    from leasing.choices import LeaseStatus
    from leasing.lifecycle import provisioning
    from leasing.lifecycle import tasks as lease_tasks
    from leasing.models import LeaseEvent, Notification
    from tests.factories import make_node
    from tests.leasing.conftest import T0 as NOW
    from tests.leasing.conftest import ask, hours

    make_node(a100, cards=1, domains=1, hostname="e1")
    provisioning.provision_step(lease_id=ask(alice, vision, a100, duration=hours(8)).pk)
    waiting = ask(bob, nlp, a100, duration=hours(2))
    assert waiting.status == LeaseStatus.QUEUED and waiting.estimated_start == NOW + hours(8)
    # 2 x the 30 min of slack of 1 card x 2 h, all still ahead, and 1 % of the 8 h wait
    # (4.8 min: whole minutes, rounded down)
    told = NOW + hours(9) + timedelta(minutes=4)
    lease_tasks.notify_lease(waiting.pk, "lease_queued")
    notice = Notification.objects.get(lease=waiting, kind="lease_queued")
    assert parse_datetime(notice.data["params"]["estimated_start"]) == told
    queued = LeaseEvent.objects.get(lease=waiting, kind="queued")
    assert parse_datetime(queued.data["estimated_start"]) == told
    waiting.refresh_from_db()
    assert waiting.estimated_start == NOW + hours(8)  # the plan's start is kept as it is


def test_the_lease_page_says_when_the_plan_has_cards_and_that_the_rest_is_room(
    frozen, alice, bob, vision, nlp, a100, client
):
    """A queued lease told a later start than its place in the plan says both (why the start
    it is told is later), in the reader's language; once nobody can pass it they are one."""
    import re

    from leasing.lifecycle import provisioning
    from tests.factories import make_node
    from tests.leasing.conftest import ask, hours

    make_node(a100, cards=1, domains=1, hostname="e1")
    provisioning.provision_step(lease_id=ask(alice, vision, a100, duration=hours(8)).pk)
    waiting = ask(bob, nlp, a100, duration=hours(2))
    client.force_login(bob)

    def shown(language):
        page = client.get(f"/leases/{waiting.pk}/", HTTP_ACCEPT_LANGUAGE=language).content.decode()
        told = re.search(r"<dd>(\d{4}-\d\d-\d\d \d\d:\d\d)", page.split("data-planned")[0][-400:])
        planned = re.search(r"data-planned>[^<]*?(\d{4}-\d\d-\d\d \d\d:\d\d)", page)
        return page, told, planned

    page, told, planned = shown("en")
    assert "the rest is room for requests that may still go ahead of it" in page
    # the plan's start (8 h from now) and the start told (1 h of room and 1 % of the wait
    # later), in one time zone
    gap = datetime.fromisoformat(told.group(1)) - datetime.fromisoformat(planned.group(1))
    assert gap == timedelta(hours=1, minutes=4)
    page, _told, planned = shown("zh-hans")
    assert "队列计划从" in page and planned is not None
    # past its virtual submit time (30 min of slack) nobody can pass: no room, no note
    frozen.shift(timedelta(minutes=31))
    page, _told, planned = shown("en")
    assert "data-planned" not in page and "Estimated start" in page
