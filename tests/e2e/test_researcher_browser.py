"""A researcher's day in a real browser, in Simplified Chinese and in English.

alice finds a model in the catalogue (only what this pool has), opens its page and asks for
cards from its Request button; the live preview tells her, as the submit would, that a
30-hour lease waits for her lead and a 72-hour one is refused (on the duration), and offers
no priority that is not hers. She submits a request that is free now, watches it become
active, reads its cost so far, and releases it after a confirmation she first declines.
She opens the pool timeline (plotly drawn, in the page's locale) and the calendar, picks a
free slot there and books a reservation from it.

Chromium via Playwright on the live server with a real worker (PostgreSQL and Redis).
"""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.utils import timezone

from leasing.choices import LeaseStatus
from leasing.lifecycle import requests as lease_requests
from leasing.models import Lease
from leasing.teams import services as team_services
from portal.models import Membership
from tests.e2e.test_browser import chromium_page, db_read
from tests.e2e.test_team_lead_browser import in_language
from tests.factories import CardModelFactory, make_node

pytestmark = [pytest.mark.postgres, pytest.mark.browser]


@pytest.fixture
def pool(ops, lena, alice, vision):
    """A model with 4 cards; the team may lease it 48 h at a time, alice 24 h; lena holds a
    reservation of 2 cards tomorrow 09:00–12:00."""
    model = CardModelFactory(slug="e2e-res-a800", name="E2E A800")
    make_node(model, cards=4, domains=1, hostname="e2e-res-node")
    team_services.quota_set(user=ops, team=vision, card_model=model, max_lease_hours=48)
    team_services.member_limit_set(
        user=lena,
        membership=Membership.objects.get(user=alice, team=vision),
        card_model=model,
        max_lease_hours=24,
    )
    tomorrow_9 = timezone.localtime().replace(hour=9, minute=0, second=0, microsecond=0)
    tomorrow_9 += timedelta(days=1)
    reservation = lease_requests.lease_request(
        user=lena,
        team=vision,
        card_model=model,
        count=2,
        duration=timedelta(hours=3),
        start_at=tomorrow_9,
    )
    assert reservation.status == LeaseStatus.SCHEDULED
    return {"model": model, "reservation": reservation, "tomorrow_9": tomorrow_9}


def _sign_in(page, language):
    page.goto("/accounts/login/")
    page.locator("input[name=login]").fill("alice")
    page.locator("input[name=password]").fill("pw-for-tests")
    page.locator("input[name=password]").press("Enter")
    page.wait_for_url(re.compile(r"^(?!.*/accounts/login/)"))
    if language == "en":
        with page.expect_navigation():
            page.locator("form.lang-switch button[value=en]").click()


@pytest.mark.parametrize("language", ["zh-hans", "en"])
def test_researcher_asks_watches_pays_releases_and_reserves(worker, live_server, pool, language):
    from playwright.sync_api import expect

    model = pool["model"]
    with chromium_page(live_server) as page:
        _sign_in(page, language)

        # The catalogue lists what this pool has; the model page leads to the request form.
        page.goto("/inventory/")
        expect(page.locator("html")).to_have_attribute("lang", language)
        page.locator(f"a[href='/inventory/models/{model.slug}/']").first.click()
        page.wait_for_url(f"**/inventory/models/{model.slug}/")
        with page.expect_navigation():
            page.locator("[data-action=request]").click()
        expect(page.locator("select[name=card_model]")).to_have_value(model.slug)

        # Priorities offered are the ones a member may ask for.
        offered = page.locator("select[name=priority] option").evaluate_all(
            "options => options.map(o => o.value)"
        )
        assert "critical" not in offered and "high" not in offered and "normal" in offered

        # The preview says what the submit would do, on the limits.
        page.locator("select[name=team]").select_option("vision")
        page.locator("select[name=unit]").select_option("hours")
        verdict = page.locator("#preview [data-verdict]")
        page.locator("input[name=duration]").fill("30")
        expect(verdict).to_have_attribute("data-verdict", "approval")
        expect(verdict).to_contain_text(
            in_language(
                language,
                "This request is above your limits: it waits for your team lead's approval.",
            )
        )
        page.locator("input[name=duration]").fill("72")
        expect(verdict).to_have_attribute("data-verdict", "refused")
        with page.expect_navigation():
            page.locator("#request-form [type=submit]").click()
        expect(page.locator(".field--duration .errorlist")).to_contain_text("48")
        expect(page.locator(".field--count .errorlist")).to_have_count(0)

        # Free now: submitted, it becomes active; the page shows what it costs so far.
        page.locator("input[name=count]").fill("1")
        page.locator("input[name=duration]").fill("2")
        expect(page.locator("#preview [data-verdict]")).to_have_attribute("data-verdict", "now")
        page.locator("#request-form [type=submit]").click()
        page.wait_for_url(re.compile(r"/leases/\d+/$"))
        lease_pk = int(re.search(r"/leases/(\d+)/$", page.url).group(1))
        expect(page.locator("#lease-live [data-status=active]")).to_be_visible()
        expect(page.locator("[data-cost=so-far]")).to_contain_text("CNY ")
        # The access command has a copy button (in the page's language), also after the poll.
        copy = page.locator("#lease-live button.copy-button").first
        expect(copy).to_have_text(in_language(language, "Copy"))
        page.wait_for_timeout(2500)  # a status poll swaps #lease-live in again
        expect(page.locator("#lease-live button.copy-button")).to_have_count(1)
        expect(page.locator("[data-cost=to-end]")).to_contain_text("CNY ")

        # Releasing asks first: declined, nothing happens; confirmed, the cards go back.
        page.locator("form[action$='/release/'] [type=submit]").click()
        dialog = page.locator("#confirm-dialog")
        expect(dialog).to_be_visible()
        expect(dialog).to_contain_text(f"{lease_pk}")
        dialog.locator("button[value=cancel]").click()
        expect(dialog).to_be_hidden()
        assert db_read(lambda: Lease.objects.get(pk=lease_pk).status) == LeaseStatus.ACTIVE
        page.locator("form[action$='/release/'] [type=submit]").click()
        with page.expect_navigation():
            dialog.locator("[data-confirm-ok]").click()
        expect(page.locator("#lease-live [data-status=ended]")).to_be_visible()

        # The pool timeline: plotly (the partial bundle, in the page's locale) draws the
        # model's cards, lena's reservation among them.
        page.goto(f"/leases/timeline/{model.slug}/")
        chart = page.locator("#pool-timeline .plotly-chart[data-ready]")
        expect(chart).to_have_count(1)
        expect(chart.locator(".main-svg").first).to_be_visible()
        loaded = page.evaluate(
            "Array.from(document.scripts).map(s => s.src).filter(s => s.includes('plotly'))"
        )
        assert any("plotly-basic" in src for src in loaded)
        assert any("locale-zh-cn" in src for src in loaded) == (language == "zh-hans")
        expect(chart.locator(".ytick")).to_have_count(4)  # one row per card
        # A free stretch (the second trace's bars) opens the form for a reservation.
        free_bar = chart.locator("g.trace.bars").nth(1).locator("path").first
        with page.expect_navigation():
            free_bar.click(force=True)
        assert re.search(rf"/leases/new/\?card_model={model.slug}", page.url)

        # The calendar: every row from 00:00; a free slot opens the form as a reservation.
        page.goto(f"/leases/calendar/{model.slug}/")
        slot = pool["tomorrow_9"]
        reserved = page.locator(f"td[data-slot='{slot:%Y-%m-%d %H:%M}']")
        expect(reserved).to_have_text("2")  # lena holds 2 of the 4 then
        later = slot + timedelta(hours=3)
        with page.expect_navigation():
            page.locator(f"td[data-slot='{later:%Y-%m-%d %H:%M}'] a").click()
        expect(page.locator("input[name=start_at]")).to_have_value(f"{later:%Y-%m-%dT%H:%M}")
        expect(page.locator("input[name=start][value=later]")).to_be_checked()
        page.locator("select[name=team]").select_option("vision")
        page.locator("input[name=duration]").fill("2")
        page.locator("select[name=unit]").select_option("hours")
        expect(page.locator("#preview [data-verdict]")).to_have_attribute("data-verdict", "later")
        page.locator("#request-form [type=submit]").click()
        page.wait_for_url(re.compile(r"/leases/\d+/$"))
        expect(page.locator("#lease-live [data-status=scheduled]")).to_be_visible()
        booked_pk = int(re.search(r"/leases/(\d+)/$", page.url).group(1))

    booked = db_read(lambda: Lease.objects.get(pk=booked_pk))
    assert booked.status == LeaseStatus.SCHEDULED and booked.start_at == later
