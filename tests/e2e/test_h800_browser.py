"""The demo's H800 case in a real browser, in Simplified Chinese and in English: bob waits for
all 8 cards for two days from the day after tomorrow's noon (lena's 4-card reservation is in
his way until then). alice sees his 8 planned cards on the pool timeline and the calendar;
the slot she picks inside them says, before she submits, that the cards are planned for a
waiting request and which stretch is really free next; bob's lease page says what he waits
for. Chromium via Playwright on the live server (PostgreSQL; no worker needed: a request
joins the queue in its own transaction).
"""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.utils import timezone

from leasing.choices import LeaseStatus
from leasing.lifecycle import requests as lease_requests
from tests.e2e.test_browser import chromium_page
from tests.e2e.test_team_lead_browser import in_language
from tests.factories import CardModelFactory, make_node

pytestmark = [pytest.mark.postgres, pytest.mark.browser]


@pytest.fixture
def h800(lena, bob, alice, vision, nlp):
    model = CardModelFactory(slug="e2e-h800", name="E2E H800")
    make_node(model, cards=8, domains=1, hostname="e2e-h800-01")
    tomorrow_9 = timezone.localtime().replace(hour=9, minute=0, second=0, microsecond=0)
    tomorrow_9 += timedelta(days=1)
    noon_after = tomorrow_9 + timedelta(days=1, hours=3)  # the day after tomorrow, 12:00
    reservation = lease_requests.lease_request(
        user=lena, team=vision, card_model=model, count=4,
        duration=noon_after - tomorrow_9, start_at=tomorrow_9,
    )  # fmt: skip
    assert reservation.status == LeaseStatus.SCHEDULED
    waiting = lease_requests.lease_request(
        user=bob, team=nlp, card_model=model, count=8,
        duration=timedelta(hours=48), start_at=tomorrow_9 + timedelta(hours=3),
    )  # fmt: skip
    waiting.refresh_from_db()
    assert waiting.status == LeaseStatus.QUEUED and waiting.estimated_start == noon_after
    return {"model": model, "waiting": waiting, "planned_from": noon_after}


def _sign_in(page, user, language):
    page.goto("/accounts/login/")
    page.locator("input[name=login]").fill(user)
    page.locator("input[name=password]").fill("pw-for-tests")
    page.locator("input[name=password]").press("Enter")
    page.wait_for_url(re.compile(r"^(?!.*/accounts/login/)"))
    if language == "en":
        with page.expect_navigation():
            page.locator("form.lang-switch button[value=en]").click()


@pytest.mark.parametrize("language", ["zh-hans", "en"])
def test_alice_sees_bobs_planned_cards_and_is_offered_the_next_free_stretch(
    live_server, h800, language
):
    from playwright.sync_api import expect

    model, planned_from = h800["model"], h800["planned_from"]
    inside = timezone.localtime(planned_from + timedelta(hours=12))  # 00:00 two days on
    free_again = timezone.localtime(planned_from + timedelta(hours=48))
    with chromium_page(live_server) as page:
        _sign_in(page, "alice", language)

        # The pool timeline draws bob's 8 planned cards as their own trace.
        page.goto(f"/leases/timeline/{model.slug}/?days=7")
        chart = page.locator("#pool-timeline .plotly-chart[data-ready]")
        expect(chart).to_have_count(1)
        expect(chart.locator(".ytick")).to_have_count(8)
        planned = in_language(language, "planned for a waiting request")
        expect(chart.locator(".legendtext", has_text=planned)).to_have_count(1)

        # The calendar counts them as taken, and says so on the slot.
        page.goto(f"/leases/calendar/{model.slug}/")
        cell = page.locator(f"td[data-slot='{inside:%Y-%m-%d %H:%M}']")
        expect(cell).to_have_text("0")
        expect(cell).to_have_attribute("data-planned", "8")
        expect(cell).to_have_attribute(
            "title",
            re.compile(
                re.escape(
                    in_language(language, "%(n)s cards planned for a waiting request", n=8)
                    if language == "en"
                    else "8 张卡已计划给排队中的申请"
                )
            ),
        )

        # alice asks for that slot anyway: the preview says why not, and what is free next.
        page.goto(
            f"/leases/new/?card_model={model.slug}&start=later&start_at={inside:%Y-%m-%dT%H:%M}"
        )
        page.locator("select[name=team]").select_option("vision")
        page.locator("select[name=unit]").select_option("hours")
        page.locator("input[name=count]").fill("4")
        page.locator("input[name=duration]").fill("24")
        taken = page.locator("#preview [data-taken]")
        expect(taken).to_have_attribute("data-taken", f"{inside:%Y-%m-%dT%H:%M}")
        expect(taken.locator("[data-way=planned]")).to_contain_text("8")
        expect(taken).to_contain_text(f"{free_again:%Y-%m-%d %H:%M}")

    # bob's lease page names what is in his way: lena's reservation, another team's lease.
    with chromium_page(live_server) as page:
        _sign_in(page, "bob", language)
        page.goto(f"/leases/{h800['waiting'].pk}/")
        reason = page.locator("[data-because-kind=cards_in_use]")
        expect(reason).to_have_count(1)
        expect(reason).to_contain_text(f"{planned_from:%m-%d}")
