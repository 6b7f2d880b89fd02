"""The whole path in a real browser, in Simplified Chinese (the default language).

Log in → request cards with the live preview → the lease page turns active by itself (htmx
polling, no reload) with the access details → release → ended. Chromium via Playwright, the
live server and a real Celery worker on PostgreSQL + Redis. Selectors are names, ids and data
attributes, never English text, so the test holds in any language.
"""

from __future__ import annotations

import os
import re
import signal
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

import pytest
from django.db import connections

from leasing.choices import EndReason, LeaseStatus
from leasing.models import Lease
from tests.factories import CardModelFactory, make_node

pytestmark = [pytest.mark.postgres, pytest.mark.broker, pytest.mark.browser]

CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking"]
# The lease page polls every 2 s; the worker needs well under a second per step.
STATUS_TIMEOUT_MS = 10_000


@contextmanager
def chromium_page(live_server):
    """A headless Chromium page on the live server, asking for Simplified Chinese."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS, headless=True
        )
        # zh-CN in Accept-Language: the site answers in zh-hans, as for most of its users.
        context = browser.new_context(base_url=live_server.url, locale="zh-CN")
        context.set_default_timeout(STATUS_TIMEOUT_MS)
        try:
            yield context.new_page()
        finally:
            context.close()
            browser.close()


def db_read(fn):
    """Run an ORM read in a plain thread and close its connection.

    Playwright's sync API keeps an event loop running in the test thread; there Django refuses
    the ORM (and would open a connection per context that nobody closes).
    """

    def run():
        try:
            return fn()
        finally:
            connections.close_all()

    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(run).result()


@contextmanager
def worker_paused(worker):
    """Hold the worker (SIGSTOP) so the page is seen before the worker acts; always resumed."""
    os.kill(worker.pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(worker.pid, signal.SIGCONT)


def mark_document(page) -> None:
    """Tag the loaded document; a reload or navigation loses the tag."""
    page.evaluate("window.__cardpoolNoReload = true")


def assert_not_reloaded(page) -> None:
    assert page.evaluate("window.__cardpoolNoReload === true"), "the page was reloaded"


def status_of(pk: int) -> str:
    return db_read(lambda: Lease.objects.values_list("status", flat=True).get(pk=pk))


def test_request_watch_active_and_release_in_the_browser(worker, live_server, alice, vision):
    model = CardModelFactory(slug="e2e-browser-h100", name="E2E H100")
    make_node(model, cards=2, domains=1, hostname="e2e-browser-node")
    with chromium_page(live_server) as page:
        lease_pk = request_watch_and_release(page, worker, model)
    lease = Lease.objects.get(pk=lease_pk)
    assert (lease.status, lease.end_reason) == (LeaseStatus.ENDED, EndReason.RELEASED)


def request_watch_and_release(page, worker, model) -> int:
    from playwright.sync_api import expect

    # Log in.
    page.goto("/accounts/login/")
    expect(page.locator("html")).to_have_attribute("lang", "zh-hans")
    page.locator("input[name=login]").fill("alice")
    page.locator("input[name=password]").fill("pw-for-tests")
    page.locator("input[name=password]").press("Enter")
    page.wait_for_url(re.compile(r"^(?!.*/accounts/login/)"))

    # Request cards: the live preview says they are free now.
    page.goto("/leases/new/")
    page.locator("select[name=card_model]").select_option(model.slug)
    page.locator("input[name=count]").fill("2")
    page.locator("input[name=duration]").fill("1")
    page.locator("select[name=unit]").select_option("hours")
    page.locator("select[name=team]").select_option("vision")
    verdict = page.locator("#preview [data-verdict]")
    expect(verdict).to_have_attribute("data-verdict", "now")
    expect(verdict).to_contain_text(f"2 × {model.name}")

    # Submit while the worker is held, so the page first shows the lease before it is active.
    with worker_paused(worker):
        page.locator("#request-form [type=submit]").click()
        page.wait_for_url(re.compile(r"/leases/\d+/$"))
        badge = page.locator("#lease-live [data-status]")
        expect(badge).to_have_attribute("data-status", "provisioning")
        expect(page.locator("#lease-live pre.access")).to_have_count(0)
        mark_document(page)
    lease_pk = int(re.search(r"/leases/(\d+)/$", page.url).group(1))

    # The htmx poll turns it active without a reload; the access details come with it,
    # and the timeline follows.
    expect(page.locator("#lease-live [data-status=active]")).to_be_visible()
    assert_not_reloaded(page)
    assert status_of(lease_pk) == LeaseStatus.ACTIVE
    access = page.locator("#lease-live pre.access")
    expect(access).to_have_text(
        "ssh -t alice@e2e-browser-node 'export CUDA_VISIBLE_DEVICES=0,1; exec $SHELL -l'"
    )
    expect(page.locator("#lease-timeline [data-kind=active]")).to_have_count(1)
    expect(page.locator("form[action$='/extend/']")).to_be_visible()

    # Release now: it asks first; confirmed, the form posts, the page comes back releasing
    # (or already ended), and the poll shows it ended; polling stops once the lease is over.
    page.locator("form[action$='/release/'] [type=submit]").click()
    with page.expect_navigation():
        page.locator("#confirm-dialog [data-confirm-ok]").click()
    expect(page.locator("#lease-live [data-status]")).to_have_attribute(
        "data-status", re.compile(r"^(releasing|ended)$")
    )
    mark_document(page)
    expect(page.locator("#lease-live [data-status=ended]")).to_be_visible()
    assert_not_reloaded(page)
    expect(page.locator("#lease-live")).not_to_have_attribute("hx-trigger", re.compile(".+"))
    # An ended lease offers no actions any more, even on a page that was not reloaded.
    expect(page.locator("form[action$='/release/']")).to_be_hidden()
    expect(page.locator("form[action$='/extend/']")).to_be_hidden()
    expect(page.locator("#lease-timeline [data-kind=ended]")).to_have_count(1)
    return lease_pk
