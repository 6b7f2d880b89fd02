"""A team lead's day in a real browser, in Simplified Chinese and in English.

lena signs in, opens her team's page, reads the quota use and alice's two requests above
her member limit, approves one, rejects the other with a reason, and sets alice a limit
through the form; the page shows each change. Chromium via Playwright on the live server
(PostgreSQL: the server thread must see the test's data); no worker is needed.

Selectors are ids, names and data attributes; the language is checked on <html lang>, on
known headings and on the confirmation messages, each against the catalogue's translation.
"""

from __future__ import annotations

import re
from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import translation

from leasing.choices import LeaseStatus
from leasing.lifecycle import requests as lease_requests
from leasing.models import Lease, MemberLimit
from leasing.teams import services as team_services
from portal.models import Membership
from tests.e2e.test_browser import chromium_page, db_read
from tests.factories import CardModelFactory, make_node

pytestmark = [pytest.mark.postgres, pytest.mark.browser]


def in_language(language: str, message: str, **params) -> str:
    """*message* as the page shows it in *language*."""
    with translation.override(language):
        text = translation.gettext(message)
    if language != "en":
        assert text != message, f"“{message}” has no {language} translation"
    return text % params if params else text


@pytest.fixture
def team_with_requests(ops, lena, alice, vision):
    """vision: a quota on one model, alice holding one card, and two requests of hers above
    the member limit lena set (one card at a time), waiting for lena."""
    model = CardModelFactory(slug="e2e-lead-l40s", name="E2E L40S")
    make_node(model, cards=4, domains=1, hostname="e2e-lead-node")
    team_services.quota_set(
        user=ops,
        team=vision,
        card_model=model,
        max_concurrent_cards=8,
        card_hours_per_month=Decimal(100),
    )
    membership = Membership.objects.get(user=alice, team=vision)

    def ask(count):
        return lease_requests.lease_request(
            user=alice, team=vision, card_model=model, count=count, duration=timedelta(hours=1)
        )

    held = ask(1)
    team_services.member_limit_set(
        user=lena, membership=membership, card_model=None, max_concurrent_cards=1
    )
    first, second = ask(2), ask(2)
    assert first.status == second.status == LeaseStatus.PENDING_APPROVAL
    return {"model": model, "membership": membership, "held": held, "requests": (first, second)}


@pytest.mark.parametrize("language", ["zh-hans", "en"])
def test_lead_approves_rejects_and_sets_a_limit(live_server, team_with_requests, language):
    from playwright.sync_api import expect

    model = team_with_requests["model"]
    first, second = team_with_requests["requests"]
    membership = team_with_requests["membership"]

    with chromium_page(live_server) as page:  # the browser asks for zh-CN
        page.goto("/accounts/login/")
        page.locator("input[name=login]").fill("lena")
        page.locator("input[name=password]").fill("pw-for-tests")
        page.locator("input[name=password]").press("Enter")
        page.wait_for_url(re.compile(r"^(?!.*/accounts/login/)"))
        if language == "en":  # the header's language switcher
            with page.expect_navigation():
                page.locator("form.lang-switch button[value=en]").click()

        page.goto("/teams/vision/")
        expect(page.locator("html")).to_have_attribute("lang", language)
        expect(page.locator("#quota-use h2")).to_have_text(
            in_language(language, "Quota use this month")
        )
        expect(page.locator("#approvals h2")).to_have_text(
            in_language(language, "Waiting for approval")
        )

        # Quota use: alice's card is held now; the month's budget is 100 card-hours.
        row = page.locator(f'#quota-use [data-quota-row="{model.slug}"]')
        expect(row).to_contain_text("1 / 8")
        expect(row).to_contain_text(" / 100.0")
        expect(page.locator("#holders")).to_contain_text("alice")

        # Both requests wait, each saying which member limit it breaks.
        for lease in (first, second):
            request = page.locator(f'#approvals [data-lease="{lease.pk}"]')
            expect(request).to_contain_text("alice")
            expect(request).to_contain_text(f"2 × {model.name}")

        # Approve the first with a note.
        request = page.locator(f'#approvals [data-lease="{first.pk}"]')
        request.locator(f"#reason-{first.pk}").fill("deadline on Friday")
        with page.expect_navigation():
            request.locator("button[name=approve]").click()
        expect(page.locator(".messages")).to_contain_text(
            in_language(language, "Approved lease %(id)s.", id=first.pk)
        )
        expect(page.locator(f'#approvals [data-lease="{first.pk}"]')).to_have_count(0)

        # Reject the second, saying why.
        request = page.locator(f'#approvals [data-lease="{second.pk}"]')
        request.locator(f"#reason-{second.pk}").fill("one big job at a time")
        with page.expect_navigation():
            request.locator("button[name=reject]").click()
        expect(page.locator(".messages")).to_contain_text(
            in_language(language, "Rejected lease %(id)s.", id=second.pk)
        )
        expect(page.locator("#approvals [data-lease]")).to_have_count(0)

        # A member limit for this model, through the form.
        form = page.locator("#limit-form")
        form.locator("select[name=limit-member]").select_option(str(membership.pk))
        form.locator("select[name=limit-card_model]").select_option(model.slug)
        form.locator("input[name=limit-max_concurrent_cards]").fill("2")
        form.locator("input[name=limit-card_hours_per_month]").fill("40")
        with page.expect_navigation():
            form.locator("[type=submit]").click()
        expect(page.locator(".messages")).to_contain_text(
            in_language(language, "Limit saved for %(user)s.", user="alice")
        )
        expect(page.locator("#member-limits h2")).to_have_text(
            in_language(language, "Member limits")
        )
        limit_row = page.locator("#member-limits tbody tr", has_text=model.name)
        expect(limit_row).to_have_count(1)
        expect(limit_row.locator("td")).to_have_text(["alice", model.name, "2", "40.0", "—"])

    statuses = db_read(
        lambda: dict(Lease.objects.filter(pk__in=[first.pk, second.pk]).values_list("pk", "status"))
    )
    assert statuses[first.pk] != LeaseStatus.PENDING_APPROVAL  # approved: queued or started
    assert statuses[second.pk] == LeaseStatus.REJECTED
    limit = db_read(lambda: MemberLimit.objects.get(membership=membership, card_model=model))
    assert (limit.max_concurrent_cards, limit.card_hours_per_month) == (2, Decimal(40))
