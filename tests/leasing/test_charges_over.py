"""One read of a team's charges for several ranges (``quotas.charges_over``, the team page's
month and chart) finds, for each range, what a read of that range alone finds."""

from collections import Counter
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from leasing.choices import EndReason, LeaseStatus
from leasing.models import Allocation, Lease
from leasing.teams import quotas, selectors
from tests.factories import make_node
from tests.leasing.conftest import T0, hours


def _lease(user, team, model, *, count, start, end, status, ended=None):
    more = {"ended_at": ended, "end_reason": EndReason.RELEASED} if ended else {}
    return Lease.objects.create(
        user=user,
        team=team,
        card_model=model,
        count=count,
        duration=end - start,
        start_at=start,
        end_at=end,
        status=status,
        submitted_at=start - hours(1),
        **more,
    )


@pytest.fixture
def leases(alice, bob, vision, nlp, a100):
    """Leases of every shape a charge window takes: cards swapped and added later, ended
    early, waiting, holding with no allocation yet or only from later on, and another
    team's."""
    cards = list(make_node(a100, cards=8, hostname="c1").cards.order_by("pk"))
    swapped = _lease(alice, vision, a100, count=2, start=T0 - hours(10), end=T0 + hours(10),
                     status=LeaseStatus.ACTIVE)  # fmt: skip
    for card, s, e in [(0, -10, 10), (1, -10, -2), (2, -2, 10), (3, 3, 8)]:
        Allocation.objects.create(
            lease=swapped, card=cards[card], start_at=T0 + hours(s), end_at=T0 + hours(e)
        )
    early = _lease(alice, vision, a100, count=1, start=T0 - hours(30), end=T0 + hours(5),
                   status=LeaseStatus.ENDED, ended=T0 - hours(20))  # fmt: skip
    Allocation.objects.create(
        lease=early, card=cards[4], start_at=T0 - hours(30), end_at=T0 - hours(20)
    )
    _lease(alice, vision, a100, count=3, start=T0 + hours(2), end=T0 + hours(6),
           status=LeaseStatus.QUEUED)  # fmt: skip
    late = _lease(alice, vision, a100, count=1, start=T0, end=T0 + hours(10),
                  status=LeaseStatus.ACTIVE)  # fmt: skip
    Allocation.objects.create(  # its cards only from +2 h: before that, its booked window
        lease=late, card=cards[6], start_at=T0 + hours(2), end_at=T0 + hours(10)
    )
    _lease(alice, vision, a100, count=2, start=T0 - hours(1), end=T0 + hours(4),
           status=LeaseStatus.PROVISIONING)  # fmt: skip
    other = _lease(bob, nlp, a100, count=1, start=T0 - hours(5), end=T0 + hours(5),
                   status=LeaseStatus.ACTIVE)  # fmt: skip
    Allocation.objects.create(
        lease=other, card=cards[5], start_at=T0 - hours(5), end_at=T0 + hours(5)
    )
    return vision


edges = st.integers(min_value=-36, max_value=14).map(lambda h: T0 + hours(h))
ranges = st.tuples(edges, edges).filter(lambda r: r[0] < r[1])


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(first=ranges, second=ranges, cut=st.booleans())
# a lease whose cards come only after the first range: its booked window there
@example(first=(T0 - hours(1), T0 + hours(1)), second=(T0, T0 + hours(5)), cut=False)
def test_each_range_finds_what_its_own_read_finds(leases, first, second, cut):
    team = leases
    cut_at = None
    if cut:  # one lease's window cut where another takes it over (a move to another model)
        swapped = Lease.objects.filter(team=team, count=2, status=LeaseStatus.ACTIVE).first()
        cut_at = (swapped.pk, T0 + hours(1))
    together = quotas.charges_over(team.pk, [first, second], cut=cut_at)
    alone = [quotas.charges(team.pk, *r, cut=cut_at) for r in (first, second)]
    assert [Counter(c) for c in together] == [Counter(c) for c in alone]
    assert quotas.charges_over(team.pk, []) == []


def test_the_team_page_reads_them_once_and_shows_what_each_read_shows(
    leases, frozen, django_assert_num_queries
):
    team, now = leases, T0
    since, until = T0 - timedelta(days=29), T0 + timedelta(days=1)
    overview, daily = selectors.team_page(team, now=now, since=since, until=until)
    assert daily == selectors.team_daily_hours(team, since=since, until=until, now=now)
    alone = selectors.team_overview(team, now=now)
    assert [vars(r) for r in overview["rows"]] == [vars(r) for r in alone["rows"]]
    assert daily  # the chart has days, the month its rows: not an empty comparison
    assert any(r.used_hours or r.booked_hours or r.waiting_hours for r in overview["rows"])
    # a chart of days still to come: no days, the month as ever, and nothing read for it
    later = (T0 + timedelta(days=40), T0 + timedelta(days=42))  # next month
    with CaptureQueriesContext(connection) as month_alone:
        selectors.team_overview(team, now=now)
    with django_assert_num_queries(len(month_alone)):
        ahead, none = selectors.team_page(team, now=now, since=later[0], until=later[1])
    assert none == {} and [vars(r) for r in ahead["rows"]] == [vars(r) for r in alone["rows"]]
