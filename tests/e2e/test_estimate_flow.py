"""From a task profile to an active lease in one flow, in a real browser (zh-hans).

Log in → /leases/estimate/ → describe the job (QLoRA of a 7B model, one hour) → the page
ranks the cheaper 24 GB card first → "Request this" opens the request form pre-filled with
model, count, duration and purpose → submit → the lease turns active (real worker on
PostgreSQL + Redis). Selectors are names, ids and data attributes, never text.
"""

from __future__ import annotations

import re
from decimal import Decimal

import pytest

from inventory.models import InterconnectKind
from leasing.choices import LeaseStatus, Purpose
from leasing.models import Lease
from tests.e2e.test_browser import chromium_page, db_read
from tests.factories import CardModelFactory, make_node

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.broker,
    pytest.mark.browser,
]


def request_form_prefills_from_the_link(client, user) -> bool:
    """Whether /leases/new/ reads count, duration and unit from its query string."""
    client.force_login(user)
    page = client.get(
        "/leases/new/", {"card_model": "x", "count": "3", "duration": "7", "unit": "minutes"}
    ).content.decode()
    return bool(re.search(r'name="duration"[^>]*value="7"|value="7"[^>]*name="duration"', page))


def test_from_task_profile_to_active_lease(worker, live_server, client, alice, vision):
    from playwright.sync_api import expect

    if not request_form_prefills_from_the_link(client, alice):
        pytest.skip(
            "the request form does not pre-fill count/duration/unit/purpose from the link yet"
        )

    small = CardModelFactory(
        slug="e2e-est-24g",
        name="E2E 24GB",
        memory_gb=Decimal("24"),
        interconnect_kind=InterconnectKind.PCIE,
        price_per_hour=Decimal("3.50"),
    )
    big = CardModelFactory(slug="e2e-est-80g", name="E2E 80GB", price_per_hour=Decimal("12"))
    make_node(small, cards=2, hostname="e2e-est-small")
    make_node(big, cards=2, hostname="e2e-est-big")

    with chromium_page(live_server) as page:
        page.goto("/accounts/login/")
        page.locator("input[name=login]").fill("alice")
        page.locator("input[name=password]").fill("pw-for-tests")
        page.locator("input[name=password]").press("Enter")
        page.wait_for_url(re.compile(r"^(?!.*/accounts/login/)"))

        # Describe the job; htmx refreshes the ranking as the form changes.
        page.goto("/leases/estimate/")
        expect(page.locator("html")).to_have_attribute("lang", "zh-hans")
        page.locator("select[name=task]").select_option("qlora")
        page.locator("input[name=params_b]").fill("7")
        page.locator("input[name=duration]").fill("1")
        page.locator("input[name=duration]").press("Tab")
        first = page.locator("#estimate-result .option").first
        expect(first).to_have_attribute("data-card-model", small.slug)
        expect(first).to_have_attribute("data-count", "1")
        expect(page.locator("#estimate-result [data-part=weights]")).to_contain_text("NF4")
        expect(page.locator(".field--lora_rank")).to_be_visible()
        expect(page.locator(".field--scene_gb")).to_be_hidden()
        # htmx answers the duration change after the first render: wait for the ranking it
        # drew (its link carries the new duration), not the one before
        expect(first.locator("[data-action=request]")).to_have_attribute(
            "href", re.compile(r"[?&]duration=1(&|$)")
        )

        # "Request this" opens the request form pre-filled with the option.
        first.locator("[data-action=request]").click()
        page.wait_for_url(re.compile(r"/leases/new/\?"))
        expect(page.locator("select[name=card_model]")).to_have_value(small.slug)
        expect(page.locator("input[name=count]")).to_have_value("1")
        expect(page.locator("input[name=duration]")).to_have_value("1")
        expect(page.locator("select[name=unit]")).to_have_value("hours")
        expect(page.locator("select[name=purpose]")).to_have_value(Purpose.FINE_TUNING)
        page.locator("select[name=team]").select_option("vision")
        expect(page.locator("#preview [data-verdict]")).to_have_attribute("data-verdict", "now")

        page.locator("#request-form [type=submit]").click()
        page.wait_for_url(re.compile(r"/leases/\d+/$"))
        expect(page.locator("#lease-live [data-status=active]")).to_be_visible()
        lease_pk = int(re.search(r"/leases/(\d+)/$", page.url).group(1))

    lease = db_read(lambda: Lease.objects.select_related("card_model").get(pk=lease_pk))
    assert lease.status == LeaseStatus.ACTIVE
    assert (lease.card_model.slug, lease.count, lease.purpose) == (
        small.slug,
        1,
        Purpose.FINE_TUNING,
    )
