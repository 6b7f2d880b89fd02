"""The request form's preview and the submit agree: refused (with the same messages on the
same fields), waits for the lead, starts now, or the start it estimated — on the limits
(the member's and the team's concurrent cards and longest lease, priorities), off-peak starts
(with and without windows) and environments, through any sequence of requests. Both run the
same steps (``lifecycle.request_steps``)."""

from datetime import timedelta

import pytest
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from leasing.choices import LeaseStatus, Priority, StartPolicy
from leasing.lifecycle import request_steps
from leasing.lifecycle import requests as lease_requests
from leasing.models import Environment, OffPeakWindow
from leasing.scheduler.eta import lease_told_start
from leasing.teams import services as team_services
from portal.models import Membership
from tests.leasing.conftest import T0, hours

# Around the limits set below: member 4 cards / 24 h, team 6 cards / 48 h.
ASKS = st.tuples(
    st.sampled_from([1, 2, 3, 4, 5, 6, 7]),  # cards
    st.sampled_from([1, 23, 24, 25, 47, 48, 49, 60, 72]),  # hours
    st.sampled_from([Priority.NORMAL, Priority.PREEMPTIBLE, Priority.HIGH, Priority.CRITICAL]),
    st.sampled_from([None, 0, 30]),  # start: now, or that many hours ahead
)


def _outcome(call):
    try:
        return "ok", call()
    except ValidationError as exc:
        return "refused", exc.message_dict if hasattr(exc, "message_dict") else exc.messages
    except PermissionDenied as exc:
        return "denied", str(exc)


@pytest.fixture
def limits(alice, lena, ops, vision, a100, small_pool):
    team_services.quota_set(
        user=ops, team=vision, card_model=a100, max_concurrent_cards=6, max_lease_hours=48
    )
    team_services.member_limit_set(
        user=lena,
        membership=Membership.objects.get(user=alice, team=vision),
        card_model=a100,
        max_concurrent_cards=4,
        max_lease_hours=24,
    )


def _agree(alice, vision, a100, asks) -> None:
    """Each ask previewed, then submitted: the same outcome, the same start."""
    with transaction.atomic():
        for count, length, priority, ahead, *rest in asks:
            policy, environment = rest if rest else ("", None)
            values = {
                "user": alice,
                "team": vision,
                "card_model": a100,
                "count": count,
                "duration": hours(length),
                "priority": priority,
                "start_at": None if ahead is None else T0 + timedelta(hours=ahead),
                "start_policy": policy,
                "environment": environment and Environment.objects.get(slug=environment),
            }
            said, outlook = _outcome(lambda v=values: request_steps.lease_request_check(**v))
            did, lease = _outcome(lambda v=values: lease_requests.lease_request(**v))
            assert said == did, (values, outlook, lease)
            if said != "ok":
                assert outlook == lease  # the same messages on the same fields
                continue
            expected = {
                "approval": {LeaseStatus.PENDING_APPROVAL},
                "now": {LeaseStatus.PROVISIONING},
                "later": {LeaseStatus.QUEUED, LeaseStatus.SCHEDULED},
            }[outlook.outcome]
            assert lease.status in expected, (values, outlook.outcome, lease.status)
            if lease.status == LeaseStatus.SCHEDULED:
                assert lease.start_at == outlook.start
            if lease.status == LeaseStatus.QUEUED:
                # the start told, as the lease page will say it (scheduler.eta)
                assert lease.estimated_start == outlook.start
                assert lease_told_start(lease, now=T0) == outlook.told
        transaction.set_rollback(True)


HYPOTHESIS = settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@pytest.mark.django_db
@HYPOTHESIS
@given(asks=st.lists(ASKS, min_size=1, max_size=5))
def test_preview_says_what_the_submit_does(frozen, limits, alice, vision, a100, asks):
    _agree(alice, vision, a100, asks)


# T0 is Tuesday 09:00 in Shanghai: a night window from 22:00 to Wednesday 06:00, and a
# short one at noon (so off_peak_only fits some lengths and not others).
WINDOWS = [(1, 12, 14), (1, 22, 24), (2, 0, 6)]
OFF_PEAK_ASKS = st.tuples(
    st.sampled_from([1, 2, 3, 4, 5]),  # cards
    st.sampled_from([1, 2, 7, 8, 9, 23, 25]),  # hours
    st.sampled_from([Priority.NORMAL, Priority.PREEMPTIBLE, Priority.HIGH]),
    st.sampled_from([None, 0, 5, 14, 30]),  # start: now, or that many hours ahead
    st.sampled_from([StartPolicy.AS_ASKED, StartPolicy.NEXT_OFF_PEAK, StartPolicy.OFF_PEAK_ONLY]),
    st.sampled_from([None, "cuda-env", "cann-env"]),  # an environment that fits, one that does not
)


@pytest.fixture
def environments(db):
    Environment.objects.create(slug="cuda-env", name="CUDA env", stack_family="cuda")
    Environment.objects.create(slug="cann-env", name="CANN env", stack_family="cann")


@pytest.mark.django_db
@pytest.mark.parametrize("windows", [True, False], ids=["windows", "no-window"])
@HYPOTHESIS
@given(asks=st.lists(OFF_PEAK_ASKS, min_size=1, max_size=4))
def test_preview_and_submit_agree_on_off_peak_starts_and_environments(
    frozen, limits, environments, alice, vision, a100, windows, asks
):
    OffPeakWindow.objects.all().delete()
    if windows:
        for weekday, start, end in WINDOWS:
            OffPeakWindow.objects.create(weekday=weekday, start_hour=start, end_hour=end)
    _agree(alice, vision, a100, asks)


def test_the_examples_from_the_walk_through(frozen, limits, alice, vision, a100):
    """What a researcher met: 60 h over her 24 h limit waits for the lead (not "free now");
    72 h over the team's 48 h is refused on the duration, not on the card count; critical is
    not hers to ask for."""
    check = request_steps.lease_request_check
    outlook = check(user=alice, team=vision, card_model=a100, count=1, duration=hours(30))
    assert outlook.outcome == "approval"
    assert "at most 24 hours" in outlook.verdict.member_breaches[0].message
    with pytest.raises(ValidationError) as refused:
        check(user=alice, team=vision, card_model=a100, count=1, duration=hours(72))
    assert list(refused.value.message_dict) == ["duration_minutes"]
    assert "at most 48 hours" in refused.value.message_dict["duration_minutes"][0]
    with pytest.raises(PermissionDenied):
        check(
            user=alice,
            team=vision,
            card_model=a100,
            count=1,
            duration=hours(2),
            priority="critical",
        )
    assert (
        check(user=alice, team=vision, card_model=a100, count=2, duration=hours(2)).outcome == "now"
    )
