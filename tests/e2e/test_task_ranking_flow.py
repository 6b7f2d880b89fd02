"""Ask by task in zh-hans, read the ranked options and their reasons, request the top one,
see it active — in a real browser, with a real worker (PostgreSQL + Redis).

The pool is made of catalogue models: 7B full fine-tuning must rank the NVLink A100s first
(training speed), above cheaper but slower MLU370s and PCIe L40S; rendering must not offer
a compute-only card. Selectors are names, ids and data attributes; the reasons are read in
Chinese, as the user reads them.
"""

from __future__ import annotations

import re

import pytest

from inventory.models import CardModel
from leasing.choices import LeaseStatus
from leasing.models import Lease
from tests.e2e.test_browser import chromium_page, db_read
from tests.factories import make_node

pytestmark = [pytest.mark.postgres, pytest.mark.broker, pytest.mark.browser]


def test_ask_by_task_ranked_with_reasons_then_request_the_top_one(
    worker, live_server, alice, vision, tmp_path
):
    from playwright.sync_api import expect

    for slug, cards in (("a100-80g-sxm", 8), ("mlu370-x8", 8), ("l40s", 4)):
        make_node(CardModel.objects.get(slug=slug), cards=cards, hostname=f"e2e-{slug}")

    with chromium_page(live_server) as page:
        page.goto("/accounts/login/")
        page.locator("input[name=login]").fill("alice")
        page.locator("input[name=password]").fill("pw-for-tests")
        page.locator("input[name=password]").press("Enter")
        page.wait_for_url(re.compile(r"^(?!.*/accounts/login/)"))

        page.goto("/leases/estimate/")
        expect(page.locator("html")).to_have_attribute("lang", "zh-hans")
        page.locator("select[name=task]").select_option("full_finetune")
        page.locator("input[name=params_b]").fill("7")
        page.locator("input[name=duration]").fill("1")
        page.locator("input[name=duration]").press("Tab")

        options = page.locator("#estimate-result .option")
        first = options.first
        expect(first).to_have_attribute("data-card-model", "a100-80g-sxm")
        expect(first).to_have_attribute("data-count", "2")
        expect(first.locator("[data-reason]")).to_contain_text("排名第一")
        expect(first.locator("[data-reason]")).to_contain_text("NVLink")
        expect(options).to_have_count(3)
        ranked = [options.nth(i).get_attribute("data-card-model") for i in range(3)]
        assert ranked[0] == "a100-80g-sxm" and set(ranked) == {"a100-80g-sxm", "mlu370-x8", "l40s"}
        second = options.nth(1).locator("[data-reason]")
        expect(second).to_contain_text("排名第 2")
        expect(second).to_contain_text("训练速度")
        page.screenshot(path=str(tmp_path / "ranked.png"), full_page=True)

        # Rendering: the compute-only cards are left out with the reason.
        page.locator("select[name=task]").select_option("rendering")
        page.locator("input[name=scene_gb]").fill("10")
        page.locator("input[name=scene_gb]").press("Tab")
        expect(page.locator("#estimate-result .option").first).to_have_attribute(
            "data-card-model", "l40s"
        )
        expect(page.locator(".estimate-left-out li[data-card-model=mlu370-x8]")).to_contain_text(
            "图形"
        )

        # Back to training: request the top option.
        page.locator("select[name=task]").select_option("full_finetune")
        page.locator("input[name=duration]").press("Tab")
        expect(page.locator("#estimate-result .option").first).to_have_attribute(
            "data-card-model", "a100-80g-sxm"
        )
        page.locator("#estimate-result .option").first.locator("[data-action=request]").click()
        page.wait_for_url(re.compile(r"/leases/new/\?"))
        expect(page.locator("select[name=card_model]")).to_have_value("a100-80g-sxm")
        expect(page.locator("input[name=count]")).to_have_value("2")
        expect(page.locator("select[name=stack]")).to_have_value("")
        page.locator("select[name=team]").select_option("vision")
        expect(page.locator("#preview [data-verdict]")).to_have_attribute("data-verdict", "now")
        page.locator("#request-form [type=submit]").click()
        page.wait_for_url(re.compile(r"/leases/\d+/$"))
        expect(page.locator("#lease-live [data-status=active]")).to_be_visible()
        lease_pk = int(re.search(r"/leases/(\d+)/$", page.url).group(1))

    lease = db_read(lambda: Lease.objects.select_related("card_model").get(pk=lease_pk))
    assert lease.status == LeaseStatus.ACTIVE
    assert (lease.card_model.slug, lease.count) == ("a100-80g-sxm", 2)
