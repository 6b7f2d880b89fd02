"""A team lead's, finance's and an operator's main tasks, end to end in a real browser, in
Simplified Chinese and in English.

- lena (lead): her home leads with the request waiting for her; she approves it on the team
  page, adds bob to the team and removes him again (the page asks first), sets the team's
  idle policy, charts last month, switches the lease list to her team's, and reads the team
  page on a phone without sideways scrolling.
- fin (finance): her home shows the month's cost and last month's numbered statement; she
  opens it, then exports the month from the reports page as CSV (units and currency named,
  labels in the page's language) and XLSX (dates are dates).
- ops (operator): his menu fits one row at 1280 px; his home shows the pool's health; on a
  node's page he sees who holds which card, drains the node at a chosen time (asked first),
  undrains it, and marks a free card faulty; the pool page leads with its numbers.

Chromium via Playwright on the live server (PostgreSQL: the server thread must see the test's
data); no worker is needed. Selectors are ids, names and data attributes; wording is checked
against the catalogue's translation in the page's language.
"""

from __future__ import annotations

import csv
import io
import re
from datetime import datetime, timedelta
from decimal import Decimal

import openpyxl
import pytest
import time_machine
from django.utils import timezone, translation

from inventory.models import Card, Node
from leasing.billing import statements, usage
from leasing.choices import LeaseStatus
from leasing.lifecycle import changes, provisioning
from leasing.lifecycle import requests as lease_requests
from leasing.models import Lease, Statement
from leasing.periods import month_of, site_tz
from leasing.teams import services as team_services
from portal.models import Membership
from tests.e2e.test_browser import chromium_page, db_read
from tests.factories import CardModelFactory, make_node

pytestmark = [pytest.mark.postgres, pytest.mark.browser]
LANGUAGES = ["zh-hans", "en"]


def said(language: str, message: str, **params) -> str:
    """*message* as the page shows it in *language* (and a check that zh-hans has it)."""
    with translation.override(language):
        text = translation.gettext(message)
    if language != "en":
        assert text != message, f"“{message}” has no {language} translation"
    return text % params if params else text


def confirmed(page, button) -> None:
    """Press a destructive form's button and say yes when it asks: the browser's confirm
    (accepted by the page's dialog handler) or the page's own #confirm-dialog."""
    own_dialog = page.locator("#confirm-dialog").count() > 0
    asked: list[str] = []
    if not own_dialog:
        page.once("dialog", lambda dialog: (asked.append(dialog.message), dialog.accept()))
    with page.expect_navigation():
        button.click()
        if own_dialog:
            page.locator("#confirm-dialog [data-confirm-ok]").click()
    assert own_dialog or asked, "the destructive form was sent without asking"


def sign_in(page, username: str, language: str) -> None:
    page.goto("/accounts/login/")
    page.locator("input[name=login]").fill(username)
    page.locator("input[name=password]").fill("pw-for-tests")
    page.locator("input[name=password]").press("Enter")
    page.wait_for_url(re.compile(r"^(?!.*/accounts/login/)"))
    if language == "en":  # the header's language switcher (the browser asks for zh-CN)
        with page.expect_navigation():
            page.locator("form.lang-switch button[value=en]").click()


@pytest.fixture
def pool(ops):
    model = CardModelFactory(slug="e2e-p-a100", name="E2E A100", price_per_hour=Decimal(10))
    node = make_node(model, cards=4, domains=1, hostname="e2e-p-node1")
    make_node(model, cards=2, domains=1, hostname="e2e-p-node2", status=Node.Status.MAINTENANCE)
    return model, node


# --- the lead ----------------------------------------------------------------------------


@pytest.fixture
def lead_day(pool, lena, alice, bob, vision):
    model, _node = pool
    membership = Membership.objects.get(user=alice, team=vision)
    held = lease_requests.lease_request(
        user=alice, team=vision, card_model=model, count=1, duration=timedelta(hours=3)
    )
    provisioning.provision_step(lease_id=held.pk)
    team_services.member_limit_set(
        user=lena, membership=membership, card_model=None, max_concurrent_cards=1
    )
    waiting = lease_requests.lease_request(
        user=alice, team=vision, card_model=model, count=2, duration=timedelta(hours=1)
    )
    assert waiting.status == LeaseStatus.PENDING_APPROVAL
    return {"held": held, "waiting": waiting}


@pytest.mark.parametrize("language", LANGUAGES)
def test_lead_day(live_server, lead_day, language):
    from playwright.sync_api import expect

    held, waiting = lead_day["held"], lead_day["waiting"]
    with chromium_page(live_server) as page:
        sign_in(page, "lena", language)

        # Home: the request waiting for her comes first.
        page.goto("/")
        expect(page.locator("html")).to_have_attribute("lang", language)
        home = page.locator("#home-lead")
        expect(home.locator("h2")).to_contain_text(said(language, "Waiting for your approval"))
        # Approve it right there, on her home.
        request = home.locator(f'[data-lease="{waiting.pk}"]')
        request.locator(f"#home-reason-{waiting.pk}").fill("ok for the deadline")
        with page.expect_navigation():
            request.locator("button[name=approve]").click()
        expect(page.locator(".messages")).to_contain_text(
            said(language, "Approved lease %(id)s.", id=waiting.pk)
        )
        page.goto("/teams/vision/")

        # Add bob, then remove him (the page asks first; the dialog is accepted).
        page.locator("#member-form input[name=member-username]").fill("bob")
        with page.expect_navigation():
            page.locator("#member-form [type=submit]").click()
        expect(page.locator(".messages")).to_contain_text(
            said(language, "%(user)s joined the team.", user="bob")
        )
        expect(page.locator('#members [data-member="bob"]')).to_have_count(1)
        confirmed(page, page.locator('#members [data-member="bob"] button[name=remove]'))
        expect(page.locator(".messages")).to_contain_text(
            said(language, "%(user)s left the team.", user="bob")
        )
        expect(page.locator('#members [data-member="bob"]')).to_have_count(0)

        # The team's idle policy.
        form = page.locator("#idle-form")
        form.locator("input[name=idle-idle_threshold_pct]").fill("10")
        form.locator("input[name=idle-idle_minutes]").fill("30")
        form.locator("input[name=idle-idle_reclaim]").check()
        with page.expect_navigation():
            form.locator("[type=submit]").click()
        expect(page.locator(".messages")).to_contain_text(said(language, "Idle policy saved."))
        expect(page.locator("#idle-policy")).to_contain_text("10%")

        # The chart over last month.
        today = timezone.localdate()
        last_end = today.replace(day=1) - timedelta(days=1)
        with page.expect_navigation():
            page.locator("#chart-range .quick-ranges a").nth(1).click()
        expect(page.locator("#chart-head")).to_contain_text(f"{last_end.replace(day=1):%Y-%m-%d}")

        # The lease list: "mine" shows none of alice's; "my teams'" shows both.
        page.goto("/leases/")
        expect(page.locator(f'a[href="/leases/{held.pk}/"]')).to_have_count(0)
        with page.expect_navigation():
            page.locator('#scope-switch a[data-scope="team"]').click()
        expect(page.locator(f'a[href="/leases/{held.pk}/"]')).to_have_count(1)
        expect(page.locator("h1")).to_have_text(said(language, "My teams' leases"))

        # The team page on a phone: nothing wider than the screen.
        page.set_viewport_size({"width": 390, "height": 844})
        page.goto("/teams/vision/")
        overflow = page.evaluate(
            "document.documentElement.scrollWidth - document.documentElement.clientWidth"
        )
        assert overflow <= 1, f"the team page scrolls sideways by {overflow}px on a phone"

    team = db_read(lambda: Lease.objects.get(pk=waiting.pk).team)
    assert db_read(lambda: Lease.objects.get(pk=waiting.pk).status) != "pending_approval"
    assert (team.idle_threshold_pct, team.idle_minutes, team.idle_reclaim) == (10, 30, True)
    assert not db_read(lambda: Membership.objects.filter(team=team, user__username="bob").exists())


# --- finance -----------------------------------------------------------------------------


@pytest.fixture
def finance_day(pool, alice, vision, lena, fin):
    """Last month: alice held 2 cards for 3 hours (60.00 CNY); the month is closed and its
    statement issued. This month: she holds 1 card."""
    model, _node = pool
    now = timezone.now()
    last_month = month_of(month_of(now)[0] - timedelta(minutes=1))[0]
    start = last_month + timedelta(days=9, hours=10)
    with time_machine.travel(start, tick=False):
        lease = lease_requests.lease_request(
            user=alice, team=vision, card_model=model, count=2, duration=timedelta(hours=3)
        )
        provisioning.provision_step(lease_id=lease.pk)
    with time_machine.travel(start + timedelta(hours=3), tick=False):
        changes.lease_release(lease=lease, user=alice)
        provisioning.release_step(lease_id=lease.pk)
    usage.usage_record_lease(lease.pk)
    usage.usage_close_month(now=now)
    issued = statements.statements_issue(now=now)
    assert [s.cost for s in issued] == [Decimal("60.00")]
    running = lease_requests.lease_request(
        user=alice, team=vision, card_model=model, count=1, duration=timedelta(hours=2)
    )
    provisioning.provision_step(lease_id=running.pk)
    return {"statement": issued[0], "last_month": last_month.astimezone(site_tz()).date()}


@pytest.mark.parametrize("language", LANGUAGES)
def test_finance_day(live_server, finance_day, language, tmp_path):
    from playwright.sync_api import expect

    statement = finance_day["statement"]
    month = finance_day["last_month"]
    with chromium_page(live_server) as page:
        sign_in(page, "fin", language)
        page.goto("/")
        panel = page.locator("#home-finance")
        expect(panel.locator("h2")).to_contain_text(
            said(language, "Cost in %(month)s so far", month=f"{timezone.localdate():%Y-%m}")
        )
        expect(panel.locator('[data-stat="cost"] .stat__label')).to_contain_text("CNY")
        link = panel.locator(f'[data-statement="{statement.number}"]')
        expect(link).to_have_count(1)
        with page.expect_navigation():
            link.click()
        expect(page.locator("[data-statement-number]")).to_have_text(statement.number)
        expect(page.locator("#statement-issue")).to_contain_text(said(language, "Issued"))
        expect(page.locator(".statement-lines thead")).to_contain_text("CNY")

        # The month's report, then its files.
        end = (month.replace(day=28) + timedelta(days=4)).replace(day=1) - timedelta(days=1)
        page.goto(f"/reports/?start={month:%Y-%m-%d}&end={end:%Y-%m-%d}&group_by=team")
        with page.expect_download() as download:
            page.locator('[data-export="csv"]').click()
        text = (
            open(download.value.path(), encoding="utf-8-sig").read()  # noqa: SIM115
        )
        rows = list(csv.reader(io.StringIO(text)))
        assert rows[0][0] == said(language, "Month")
        assert rows[0][3] == said(language, "Cost (%(currency)s)", currency="CNY")
        assert rows[1][:4] == [f"{month:%Y-%m}", "Vision", "6.00", "60.00"]
        with page.expect_download() as download:
            page.locator('[data-export="detail-csv"]').click()
        detail = list(
            csv.reader(io.StringIO(open(download.value.path(), encoding="utf-8-sig").read()))  # noqa: SIM115
        )
        assert detail[0][12] == said(language, "Card-hours")
        assert detail[1][5] != "nvidia" and detail[1][8] != "normal"  # labels, not keys
        with page.expect_download() as download:
            page.locator('[data-export="xlsx"]').click()
        sheet = openpyxl.load_workbook(io.BytesIO(download.value.path().read_bytes())).worksheets[0]
        cells = [row for row in sheet.iter_rows() if row[0].value == said(language, "Month")]
        first = sheet.cell(row=cells[-1][0].row + 1, column=1)
        assert isinstance(first.value, datetime) and first.number_format == "yyyy-mm"


# --- the operator ------------------------------------------------------------------------


@pytest.fixture
def operator_day(pool, alice, vision):
    model, node = pool
    held = lease_requests.lease_request(
        user=alice, team=vision, card_model=model, count=1, duration=timedelta(hours=6)
    )
    provisioning.provision_step(lease_id=held.pk)
    card = held.allocations.get().card
    return {"node": node, "held": held, "card": card}


@pytest.mark.parametrize("language", LANGUAGES)
def test_operator_day(live_server, operator_day, language):
    from playwright.sync_api import expect

    node, held, card = operator_day["node"], operator_day["held"], operator_day["card"]
    with chromium_page(live_server) as page:
        sign_in(page, "ops", language)
        page.goto("/")
        # every link of the operator's menu (the longest: alerts and admin) on one row at 1280
        page.set_viewport_size({"width": 1280, "height": 800})
        tops = page.locator(".site-nav a").evaluate_all(
            "links => links.map(a => Math.round(a.getBoundingClientRect().top))"
        )
        assert len(tops) >= 10 and len(set(tops)) == 1, tops
        health = page.locator("#home-operator")
        expect(health.locator("h2")).to_have_text(said(language, "Pool health"))
        expect(health.locator('[data-stat="nodes-out"] .stat__value')).to_have_text("1")
        expect(health.locator('[data-node="e2e-p-node2"]')).to_have_count(1)

        page.goto(f"/inventory/nodes/{node.hostname}/")
        expect(page.locator(f'[data-holder="{card.index}"]')).to_contain_text(
            f"alice · Vision · #{held.pk}"
        )

        # Drain at a chosen time (an hour and a half from now, the operator's zone).
        at = timezone.localtime(timezone.now() + timedelta(minutes=90)).replace(
            second=0, microsecond=0
        )
        page.locator("#drain-form input[name=drain_at]").fill(f"{at:%Y-%m-%dT%H:%M}")
        confirmed(page, page.locator("#drain-form button[name=drain]"))
        with translation.override(language):
            drains = translation.ngettext(
                "Node %(node)s drains at %(at)s; %(n)s holder warned.",
                "Node %(node)s drains at %(at)s; %(n)s holders warned.",
                1,
            ) % {"node": node.hostname, "at": f"{at:%Y-%m-%d %H:%M}", "n": 1}
        expect(page.locator(".messages")).to_contain_text(drains)
        expect(page.locator("#drain-notice")).to_be_visible()
        drained = db_read(lambda: Node.objects.get(pk=node.pk))
        assert drained.status == Node.Status.DRAINING and drained.drain_at == at

        # Undrain.
        with page.expect_navigation():
            page.locator("#undrain-form button[name=undrain]").click()
        expect(page.locator(".messages")).to_contain_text(
            said(language, "Node %(node)s takes leases again.", node=node.hostname)
        )
        expect(page.locator("#drain-notice")).to_have_count(0)

        # Mark a free card faulty.
        free = db_read(
            lambda: Card.objects.filter(node=node).exclude(pk=card.pk).order_by("index").first()
        )
        form = page.locator(f'[data-card-faulty="{free.index}"]')
        form.locator("summary").click()  # folded away until asked for
        form.locator("input[name=note]").fill("fan failure")
        confirmed(page, form.locator("button[type=submit]"))
        expect(page.locator(".messages")).to_contain_text(said(language, "no lease held it"))
        expect(page.locator(f'[data-card-faulty="{free.index}"]')).to_have_count(0)

        # The pool page leads with its numbers; one utilisation chart.
        page.goto("/pool/")
        expect(page.locator('#pool-summary [data-stat="held"] .stat__value')).to_have_text("1")
        expect(page.locator('[data-chart="utilisation"]')).to_have_count(1)

    assert db_read(lambda: Card.objects.get(pk=free.pk).status) == Card.Status.FAULTY
    assert db_read(lambda: Node.objects.get(pk=node.pk).status) == Node.Status.ACTIVE
    assert db_read(lambda: Statement.objects.count()) == 0
