"""Off-peak starts on the request form: offered only when an off-peak window is set (else one
line says why), and the preview says what the submit then does for each off-peak choice."""

import re

import pytest
from django.db import transaction
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from leasing.choices import LeaseStatus
from leasing.models import Environment, Lease, OffPeakWindow
from leasing.teams import services as team_services
from portal.models import Membership

# T0 is Tuesday 09:00 in Shanghai: off-peak Tuesday 22–24 and Wednesday 0–6.
WINDOWS = [(1, 22, 24), (2, 0, 6)]
VERDICT_STATUS = {
    "approval": {LeaseStatus.PENDING_APPROVAL},
    "now": {LeaseStatus.PROVISIONING, LeaseStatus.ACTIVE},
    "later": {LeaseStatus.QUEUED, LeaseStatus.SCHEDULED},
}


@pytest.fixture
def browser(client, alice):
    client.force_login(alice)
    client.cookies["django_language"] = "en"
    return client


@pytest.fixture
def nights(db):
    for weekday, start, end in WINDOWS:
        OffPeakWindow.objects.create(weekday=weekday, start_hour=start, end_hour=end)


def form(a100, **kw):
    return {
        "card_model": a100.slug,
        "count": 1,
        "duration": 2,
        "unit": "hours",
        "start": "now",
        "team": "vision",
        "priority": "normal",
        "purpose": "training",
        "same_node": "on",
    } | kw


def test_no_window_no_off_peak_choice_and_one_line_why(frozen, browser, a100, small_pool):
    page = browser.get("/leases/new/").content.decode()
    assert 'value="next_off_peak"' not in page and 'value="off_peak_only"' not in page
    assert "Off-peak starts are not offered: no off-peak window is set." in page
    data = form(a100, start="next_off_peak")
    preview = browser.get("/leases/preview/", data).content.decode()
    submitted = browser.post("/leases/new/", data)
    assert submitted.status_code == 200 and not Lease.objects.exists()
    assert "No off-peak window is set" in submitted.content.decode()
    assert 'data-verdict="refused"' in preview  # the preview says it as the submit does
    assert "No off-peak window is set" in preview


def test_with_windows_the_choices_are_offered(frozen, nights, browser, a100, small_pool):
    page = browser.get("/leases/new/").content.decode()
    assert 'value="next_off_peak"' in page and 'value="off_peak_only"' in page
    assert "Off-peak starts are not offered" not in page


@pytest.mark.parametrize("start", ["next_off_peak", "off_peak_only"])
@pytest.mark.parametrize("duration", [2, 8, 30])
@pytest.mark.parametrize("environment", ["", "cuda-env", "cann-env"])
def test_the_preview_says_what_the_submit_does_off_peak(
    frozen, nights, browser, alice, lena, vision, a100, small_pool, start, duration, environment
):
    Environment.objects.create(slug="cuda-env", name="CUDA env", stack_family="cuda")
    Environment.objects.create(slug="cann-env", name="CANN env", stack_family="cann")
    team_services.member_limit_set(
        user=lena,
        membership=Membership.objects.get(user=alice, team=vision),
        card_model=a100,
        max_lease_hours=24,
    )
    data = form(a100, start=start, duration=duration, environment=environment)
    preview = browser.get("/leases/preview/", data).content.decode()
    verdict = re.search(r'data-verdict="(\w+)"', preview).group(1)
    browser.post("/leases/new/", data)
    lease = Lease.objects.first()
    if verdict == "refused":
        assert lease is None
        return
    assert lease is not None and lease.status in VERDICT_STATUS[verdict], (verdict, lease.status)
    if verdict == "later":
        shown = re.search(r"Estimated start: ([\d-]+ [\d:]+)", preview).group(1)
        assert shown == f"{lease.start_at.astimezone(frozen_zone()):%Y-%m-%d %H:%M}"


def frozen_zone():
    from django.utils import timezone

    return timezone.get_current_timezone()


FORM_ASKS = st.fixed_dictionaries(
    {
        "count": st.sampled_from([1, 2, 3, 5]),
        "duration": st.sampled_from([1, 2, 8, 25, 30]),
        "unit": st.sampled_from(["hours", "minutes"]),
        "start": st.sampled_from(["now", "later", "next_off_peak", "off_peak_only"]),
        "start_at": st.sampled_from(["2026-12-01T10:00", "2026-12-01T23:00", "2026-12-02T13:00"]),
        "priority": st.sampled_from(["normal", "preemptible", "high"]),
        "environment": st.sampled_from(["", "cuda-env", "cann-env"]),
    }
)


@pytest.mark.django_db
@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(asks=st.lists(FORM_ASKS, min_size=1, max_size=3))
def test_the_page_preview_and_submit_agree(
    frozen, nights, browser, alice, lena, vision, a100, small_pool, asks
):
    """Through the form as a browser sends it: whatever the preview shows (refused, waits
    for the lead, free now, later at a time) is what the submit then makes."""
    Environment.objects.get_or_create(slug="cuda-env", name="CUDA env", stack_family="cuda")
    Environment.objects.get_or_create(slug="cann-env", name="CANN env", stack_family="cann")
    team_services.member_limit_set(
        user=lena,
        membership=Membership.objects.get(user=alice, team=vision),
        card_model=a100,
        max_lease_hours=24,
        max_concurrent_cards=4,
    )
    with transaction.atomic():
        for values in asks:
            data = form(a100, **values)
            preview = browser.get("/leases/preview/", data).content.decode()
            said = re.search(r'data-verdict="(\w+)"', preview)
            verdict = said.group(1) if said else "refused"  # the form itself says what is wrong
            before = set(Lease.objects.values_list("pk", flat=True))
            browser.post("/leases/new/", data)
            made = Lease.objects.exclude(pk__in=before).first()
            if verdict == "refused":
                assert made is None, (values, made.status)
                continue
            assert made is not None, (values, verdict)
            assert made.status in VERDICT_STATUS[verdict], (values, verdict, made.status)
        transaction.set_rollback(True)
