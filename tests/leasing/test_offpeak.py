"""Off-peak windows (issue #18): prices by time of day in the price book (bills, accrued
usage, estimates), requests that start in the next off-peak window or only off-peak, the
queue and the preview keeping to them, and reports split peak / off-peak. Frozen clock."""

from datetime import date, datetime, timedelta
from decimal import Decimal
from zoneinfo import ZoneInfo

import pytest
from django.core.exceptions import ValidationError
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from leasing.billing import prices, reports
from leasing.billing.usage import usage_pieces, usage_record_lease
from leasing.choices import LeaseStatus, Priority, StartPolicy
from leasing.lifecycle import provisioning
from leasing.lifecycle.changes import lease_release
from leasing.models import OffPeakWindow, UsageRecord
from leasing.periods import offpeak_cuts, offpeak_factor, offpeak_start
from leasing.scheduler.preview import lease_preview
from leasing.scheduler.run import queue_advance
from tests.factories import make_node
from tests.leasing.conftest import T0, ask, hours

SH = ZoneInfo("Asia/Shanghai")
# T0 is Tuesday 2026-12-01 09:00 in Shanghai. Off-peak: Tuesday 22–24 and Wednesday 0–6
# (one night across midnight), at 40% of the list price.
NIGHT = Decimal("0.4")
SPANS = [(1, 22, 24, NIGHT), (2, 0, 6, NIGHT)]


def sh(day, hour, minute=0):
    return datetime(2026, 12, day, hour, minute, tzinfo=SH)


@pytest.fixture
def nights(db):
    for weekday, start, end, factor in SPANS:
        OffPeakWindow.objects.create(
            weekday=weekday, start_hour=start, end_hour=end, price_factor=factor
        )


@pytest.fixture
def two(a100):
    return make_node(a100, cards=2, domains=1, hostname="o2")


def test_window_helpers():
    assert offpeak_factor(sh(1, 21, 59), SPANS) is None
    assert offpeak_factor(sh(1, 22), SPANS) == NIGHT
    assert offpeak_factor(sh(2, 5, 59), SPANS) == NIGHT
    assert offpeak_factor(sh(2, 6), SPANS) is None
    assert offpeak_cuts(sh(1, 20), sh(2, 8), SPANS) == [sh(1, 22), sh(2, 0), sh(2, 6)]
    assert offpeak_start(sh(1, 9), SPANS) == sh(1, 22)
    assert offpeak_start(sh(2, 1), SPANS) == sh(2, 1)  # already off-peak
    # Eight hours fit the joined night; from 01:00 only five are left, so the next one
    # (a week later: the windows are weekly).
    assert offpeak_start(sh(1, 9), SPANS, fits=hours(8)) == sh(1, 22)
    assert offpeak_start(sh(2, 1), SPANS, fits=hours(6)) == sh(8, 22)
    assert offpeak_start(sh(1, 9), SPANS, fits=hours(9)) is None


@given(
    start=st.integers(0, 7 * 24 * 60 - 1),
    minutes=st.integers(1, 3 * 24 * 60),
    factor=st.sampled_from([Decimal("0"), Decimal("0.25"), Decimal("0.5")]),
)
@hsettings(max_examples=150, deadline=None)
def test_cost_adds_each_minute_at_the_tariff_in_force(start, minutes, factor):
    """The price book's cost equals, minute by minute, list price × tariff at that minute."""
    spans = [(1, 22, 24, factor), (2, 0, 6, factor), (5, 12, 14, factor)]
    book = prices.PriceBook(default=Decimal("12.00"), list_prices=[], team_prices=[], offpeak=spans)
    lo = sh(1, 0) + timedelta(minutes=start)
    hi = lo + timedelta(minutes=minutes)

    def tariff(t):
        found = offpeak_factor(t, spans)
        return Decimal(1) if found is None else found

    expected = sum(
        (Decimal("12.00") * tariff(lo + timedelta(minutes=m)) / 60 for m in range(minutes)),
        Decimal(0),
    )
    assert abs(book.cost(count=1, start=lo, end=hi) - expected) < Decimal("0.000001")


def test_bill_accrued_and_estimate_follow_the_tariff(nights, frozen, bob, nlp, a100, two):
    frozen.move_to(sh(1, 20))
    # 20:00 → 02:00: two peak hours, four off-peak (across midnight).
    quote = prices.estimate(
        card_model=a100,
        team_id=nlp.pk,
        count=2,
        start=sh(1, 20),
        end=sh(2, 2),
        priority=Priority.NORMAL,
    )
    assert quote == Decimal("2") * (2 * Decimal(10) + 4 * Decimal(10) * NIGHT)
    lease = ask(bob, nlp, a100, count=2, duration=hours(6))
    provisioning.provision_step(lease_id=lease.pk)
    frozen.move_to(sh(2, 2))
    lease.refresh_from_db()
    accrued = usage_pieces(lease, before=sh(2, 2))
    assert sum(p.cost for p in accrued) == quote
    lease_release(lease=lease, user=bob)
    provisioning.release_step(lease_id=lease.pk)
    usage_record_lease(lease.pk)
    rows = list(UsageRecord.objects.filter(lease=lease).order_by("start_at"))
    assert [(r.start_at.astimezone(SH).hour, r.off_peak, r.tariff) for r in rows] == [
        (20, False, Decimal(1)),
        (22, True, NIGHT),
        (0, True, NIGHT),
    ]
    assert sum(r.cost for r in rows) == quote
    assert rows[1].price == Decimal("4.0000") and rows[1].list_price == Decimal("10.00")

    report = reports.usage_report(
        reports.ReportFilter(start=date(2026, 12, 1), end=date(2026, 12, 2), group_by="tariff")
    )
    split = {row["label"]: (row["card_hours"], row["cost"]) for row in report["rows"]}
    assert split == {
        "Peak": (Decimal("4.00"), Decimal("40.00")),
        "Off-peak": (Decimal("8.00"), Decimal("32.00")),
    }


def test_preemptible_discount_and_tariff_multiply(nights):
    book = prices.PriceBook(default=Decimal("10.00"), list_prices=[], team_prices=[], offpeak=SPANS)
    assert book.price_at(sh(1, 23), Decimal("0.5")) == Decimal("2.0000")
    assert book.price_at(sh(1, 12), Decimal("0.5")) == Decimal("5.0000")


def test_next_off_peak_books_the_night(nights, frozen, bob, nlp, a100, two):
    lease = ask(bob, nlp, a100, count=2, duration=hours(3), start_policy=StartPolicy.NEXT_OFF_PEAK)
    assert lease.status == LeaseStatus.SCHEDULED
    assert lease.start_at == sh(1, 22) and lease.start_policy == "next_off_peak"


def test_off_peak_only_must_fit_a_night(nights, frozen, bob, nlp, a100, two):
    with pytest.raises(ValidationError) as caught:
        ask(bob, nlp, a100, duration=hours(9), start_policy=StartPolicy.OFF_PEAK_ONLY)
    assert "start_policy" in caught.value.message_dict
    lease = ask(bob, nlp, a100, duration=hours(8), start_policy=StartPolicy.OFF_PEAK_ONLY)
    assert lease.start_at == sh(1, 22) and lease.end_at == sh(2, 6)


def test_no_windows_no_off_peak_requests(frozen, bob, nlp, a100, two):
    with pytest.raises(ValidationError, match="No off-peak windows"):
        ask(bob, nlp, a100, start_policy=StartPolicy.NEXT_OFF_PEAK)


def test_queue_keeps_an_off_peak_only_lease_inside_a_night(
    nights, frozen, alice, bob, vision, nlp, a100, two
):
    # The cards are busy until 03:00: a 4-hour off-peak-only lease would end at 07:00, in
    # peak time, so it waits for the next night (a week later) instead of starting at 03:00.
    busy = ask(alice, vision, a100, count=2, duration=sh(2, 3) - T0)
    assert busy.status == LeaseStatus.PROVISIONING
    night = ask(bob, nlp, a100, count=2, duration=hours(4), start_policy=StartPolicy.OFF_PEAK_ONLY)
    assert night.status == LeaseStatus.QUEUED
    night.refresh_from_db()
    assert night.start_at == sh(8, 22)
    assert night.estimated_start == sh(8, 22)
    # A lease that only asked for the next window may start at 03:00: still off-peak.
    later = ask(bob, nlp, a100, count=1, duration=hours(1), start_policy=StartPolicy.NEXT_OFF_PEAK)
    later.refresh_from_db()
    assert later.estimated_start == sh(2, 3)
    # At 03:00 the queue pass starts the second and leaves the first booked for next week.
    frozen.move_to(sh(2, 3))
    busy.refresh_from_db()
    queue_advance(card_model_ids=[a100.pk])
    later.refresh_from_db()
    night.refresh_from_db()
    assert later.status == LeaseStatus.PROVISIONING
    assert night.status in (LeaseStatus.QUEUED, LeaseStatus.SCHEDULED)
    assert night.start_at == sh(8, 22)


def test_preview_shows_the_off_peak_start_and_price(nights, frozen, bob, nlp, a100, two, client):
    assert lease_preview(
        card_model=a100, count=1, duration=hours(2), start_policy=StartPolicy.NEXT_OFF_PEAK
    ) == sh(1, 22)
    client.force_login(bob)
    page = client.get(
        "/leases/preview/",
        {
            "card_model": a100.slug,
            "count": 1,
            "duration": 2,
            "unit": "hours",
            "start": "next_off_peak",
            "team": nlp.slug,
            "priority": "normal",
            "purpose": "training",
            "same_node": "on",
        },
    )
    body = page.content.decode()
    assert page.status_code == 200
    assert "2026-12-01 22:00" in body
    assert 'data-offpeak="yes"' in body
    assert "CNY 8.00" in body  # two hours at 40% of 10.00


def test_form_books_an_off_peak_lease(nights, frozen, bob, nlp, a100, two, client):
    client.force_login(bob)
    response = client.post(
        "/leases/new/",
        {
            "card_model": a100.slug,
            "count": 1,
            "duration": 2,
            "unit": "hours",
            "start": "off_peak_only",
            "team": nlp.slug,
            "priority": "normal",
            "purpose": "training",
            "same_node": "on",
            "request_key": "k1",
        },
    )
    assert response.status_code == 302
    lease = nlp.leases.get()
    assert lease.start_at == sh(1, 22) and lease.start_policy == "off_peak_only"


def test_the_estimator_starts_and_prices_off_peak(nights, frozen, bob, nlp, two, api):
    from leasing.advisor.estimator import TaskProfile
    from leasing.advisor.recommend import recommend

    profile = TaskProfile(task="inference", params_b=1)
    now = recommend(profile=profile, duration=hours(2))
    night = recommend(profile=profile, duration=hours(2), start_policy=StartPolicy.NEXT_OFF_PEAK)
    assert [o.start for o in night.options] == [sh(1, 22)]
    assert night.options[0].off_peak and not now.options[0].off_peak
    assert night.options[0].cost == now.options[0].cost * NIGHT
    api.force_authenticate(bob)
    body = api.post(
        "/api/v1/estimate/",
        {
            "profile": {"task": "inference", "params_b": 1},
            "duration_minutes": 120,
            "start_policy": "off_peak_only",
        },
        format="json",
    ).json()
    assert body["options"][0]["off_peak"] is True
    assert body["options"][0]["start"].startswith("2026-12-01T22:00")


def test_api_requests_off_peak_and_reports_split_it(nights, frozen, bob, nlp, a100, two, api, fin):
    api.force_authenticate(bob)
    made = api.post(
        "/api/v1/leases/",
        {
            "card_model": a100.slug,
            "count": 2,
            "duration_minutes": 240,
            "start_policy": "next_off_peak",
        },
        format="json",
    )
    assert made.status_code == 201, made.content
    body = made.json()
    assert body["start_policy"] == "next_off_peak" and body["status"] == "scheduled"
    assert body["start_at"] == "2026-12-01T22:00:00+08:00"
    bad = api.post(
        "/api/v1/leases/",
        {"card_model": a100.slug, "count": 1, "duration_minutes": 60, "start_policy": "cheap"},
        format="json",
    )
    assert bad.status_code == 400 and "start_policy" in bad.json()

    frozen.move_to(sh(2, 2, 30))
    queue_advance(card_model_ids=[a100.pk])
    api.force_authenticate(fin)
    csv = api.get(
        "/api/v1/reports/usage/?start=2026-12-01&end=2026-12-02&group_by=tariff&format=csv"
    )
    assert csv.status_code == 200
    text = b"".join(csv.streaming_content).decode() if csv.streaming else csv.content.decode()
    assert "Off-peak" in text or "低峰" in text
