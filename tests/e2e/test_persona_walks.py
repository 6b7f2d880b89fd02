"""Issue #32 walked by each person in a real browser, in Simplified Chinese and in English:
what a page says is what the system did.

- alice (researcher): her home; the request form and its live preview (the price in the
  configured currency); her lease page (cost so far and to the end in that currency, the
  access line ``ssh -t <account>@host '…; exec $SHELL -l'``, the extend box); her preempted
  job, whose checkpoint says "waiting" while the node's agent has not answered, "not
  delivered" once the bound passes without its word, and "delivered" only after it.
- lena (lead): her home lists every pending item it counts (a request, an extension, a
  resize), each with approve and reject; the team page's "used" is the report's figure
  (recorded + accrued; waiting requests apart).
- fin (finance): her home and the month's report, money in the configured currency.
- ops (operator): his home leads with the open alerts (worst first) and the nav's alerts
  link carries a badge; a node drained (its holders' cards show the drain time, not their
  booked end) and undrained; the pool page, the pool timeline and the calendar.

On every page: the page's language (no Chinese on an English page outside names, no
English catalogue phrase on a Chinese one, checked on the text the browser shows, charts
included: axis titles and ticks in the page's language) and no currency sign but the
configured code. Screenshots of every step go to ``$CARDPOOL_WALK_SHOTS`` (else the test's
temporary folder) for a person to look at.

Chromium via Playwright on the live server (PostgreSQL); no worker is needed.
"""

from __future__ import annotations

import os
import re
from contextlib import contextmanager
from datetime import timedelta
from decimal import Decimal
from pathlib import Path

import pytest
import time_machine
from django.utils import timezone

from leasing.billing import usage
from leasing.choices import AlertKind, AlertSeverity, LeaseStatus, Priority
from leasing.lifecycle import changes, checkpoints, provisioning, resize
from leasing.lifecycle import requests as lease_requests
from leasing.lifecycle.validation import Checkpoint
from leasing.models import Alert
from leasing.periods import month_of
from leasing.teams import services as team_services
from portal.models import Membership
from tests.e2e.test_browser import CHROMIUM_ARGS, STATUS_TIMEOUT_MS, db_read
from tests.e2e.test_personas_browser import confirmed, said, sign_in
from tests.factories import CardModelFactory, make_node
from tests.test_page_text import ALLOWED_ZH, problems_in

pytestmark = [pytest.mark.postgres, pytest.mark.browser]

LANGUAGES = ["zh-hans", "en"]
CURRENCY = "EUR"  # not the default (CNY): every amount must name it, none may write ¥
ACK_SECONDS = 30
CJK = re.compile(r"[\u3000-\u303f\u4e00-\u9fff\uff00-\uffef]")
ACCESS = re.compile(r"^ssh -t [a-z_][\w.-]*@\S+ '[^']*; exec \$SHELL -l'$")
# A time tick plotly writes in words: "Dec 1", "Mon 15", or its zh-CN "十二 1, 2026".
WORDY_TICK = re.compile(
    r"\b(Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec|Mon|Tue|Wed|Thu|Fri|Sat|Sun)\b"
    r"|[\u4e00-\u9fff]+ \d{1,2}, \d{4}"
)
SETTLED = """() => document.readyState === "complete"
    && !document.querySelector(".htmx-request, [hx-trigger='load']")
    && [...document.querySelectorAll("div.plotly-chart[data-figure]")]
        .every(chart => chart.dataset.ready)"""
SAVE = Checkpoint(signal="usr1", seconds=900, requeue=False)


def ask(user, team, model, count=1, hours=2, **kw):
    return lease_requests.lease_request(
        user=user, team=team, card_model=model, count=count, duration=timedelta(hours=hours), **kw
    )


@pytest.fixture
def world(settings, ops, fin, lena, alice, bob, vision, nlp):
    """Two models on two nodes, priced; alice's preemptible job on the A100s taken back for
    lena's high-priority request (its checkpoint handed to the node's agent); alice holds
    two L40 leases, one asks for more time and one for more cards above her limits, and a
    third request waits for lena; an ended lease earlier today (recorded usage); two open
    alerts."""
    settings.CARDPOOL_CURRENCY = CURRENCY
    settings.CARDPOOL = {**settings.CARDPOOL, "CHECKPOINT_ACK_SECONDS": ACK_SECONDS}
    big = CardModelFactory(slug="walk-a100", name="Walk A100", price_per_hour=Decimal(10))
    small = CardModelFactory(slug="walk-l40", name="Walk L40", price_per_hour=Decimal(4))
    big_node = make_node(big, cards=4, domains=1, hostname="walk-a1")
    small_node = make_node(small, cards=4, domains=1, hostname="walk-l1")

    now = timezone.now()
    if now - month_of(now)[0] > timedelta(hours=3):  # usage recorded this month already
        with time_machine.travel(now - timedelta(hours=3), tick=False):
            done = ask(alice, vision, small, count=2, hours=1)
            provisioning.provision_step(lease_id=done.pk)
        with time_machine.travel(now - timedelta(hours=2), tick=False):
            changes.lease_release(lease=done, user=alice)
            provisioning.release_step(lease_id=done.pk)
        usage.usage_record_lease(done.pk)

    job = ask(alice, vision, big, count=4, priority=Priority.PREEMPTIBLE, checkpoint=SAVE)
    provisioning.provision_step(lease_id=job.pk)
    ask(lena, vision, big, count=2, priority=Priority.HIGH)
    job.refresh_from_db()
    assert job.preempt_at is not None, "the job was not marked for preemption"
    assert provisioning.checkpoint_step(lease_id=job.pk)

    held = ask(alice, vision, small, count=1, hours=4)
    provisioning.provision_step(lease_id=held.pk)
    other = ask(alice, vision, small, count=1, hours=4)
    provisioning.provision_step(lease_id=other.pk)
    team_services.member_limit_set(
        user=lena,
        membership=Membership.objects.get(user=alice, team=vision),
        card_model=small,
        max_concurrent_cards=2,
        max_lease_hours=4,
    )
    extension = changes.lease_extend(lease=held, user=alice, minutes=120).pending_change
    more = resize.lease_resize(lease=other, user=alice, count=2).pending_change
    waiting = ask(alice, vision, small, count=1, hours=2)
    assert extension is not None and more is not None
    assert waiting.status == LeaseStatus.PENDING_APPROVAL

    big_card = big_node.cards.order_by("index").first()
    alerts = [
        Alert.objects.create(
            kind=kind,
            severity=severity,
            subject=f"card:{big_card.pk}:{kind}",
            card=big_card,
            opened_at=now - timedelta(minutes=minutes),
            last_seen_at=now,
        )
        for kind, severity, minutes in (
            (AlertKind.MEMORY_FULL, AlertSeverity.WARNING, 1),
            (AlertKind.CARD_HOT, AlertSeverity.CRITICAL, 5),
        )
    ]
    return {
        "big": big,
        "small": small,
        "big_node": big_node,
        "small_node": small_node,
        "job": job,
        "held": held,
        "waiting": waiting,
        "changes": [extension, more],
        "critical": alerts[1],
        "warning": alerts[0],
    }


class Walk:
    """One person's pages: each step is shot and its text checked for the page's language
    and for money written only in the configured currency."""

    def __init__(self, page, language: str, who: str, shots: Path):
        self.page, self.language, self.who, self.shots = page, language, who, shots
        self.step = 0
        self.problems: list[str] = []
        self.chart_texts = 0  # axis titles and ticks read: the chart check saw charts

    def look(self, name: str) -> None:
        from playwright.sync_api import expect

        page = self.page
        expect(page.locator("html")).to_have_attribute("lang", self.language)
        page.wait_for_function(SETTLED)  # no htmx request under way, every chart drawn
        self.step += 1
        page.screenshot(
            path=str(self.shots / f"{self.language}-{self.who}-{self.step:02d}-{name}.png"),
            full_page=True,
        )
        where = f"{self.who} {name} ({page.url})"
        text = page.evaluate("document.body.innerText")
        if "¥" in text or "￥" in text:
            self.problems.append(f"{where}: a currency sign, not {CURRENCY}")
        chinese = self.language == "zh-hans"
        self.problems += [p for p in problems_in(where, text, chinese=chinese)]
        titles = page.locator(".main-svg text.xtitle, .main-svg text.ytitle, .main-svg text.gtitle")
        ticks = page.locator(".main-svg .xtick text, .main-svg .ytick text")
        titles, ticks = titles.all_text_contents(), ticks.all_text_contents()
        self.chart_texts += len(titles) + len(ticks)
        self.problems += chart_problems(titles, ticks, where, chinese=chinese)


def chart_problems(titles: list[str], ticks: list[str], where: str, *, chinese: bool) -> list[str]:
    """Drawn charts: axis and chart titles, and the ticks, in the page's language."""
    found = []
    for title in titles:
        if chinese and re.search(r"[A-Za-z]{3}", title) and not CJK.search(title):
            found.append(f"{where}: English chart title {title!r}")
        if not chinese and CJK.search(ALLOWED_ZH.sub("", title)):
            found.append(f"{where}: Chinese chart title {title!r}")
    for tick in ticks:
        if WORDY_TICK.search(tick):
            found.append(f"{where}: a tick in words {tick!r}")
        if not chinese and CJK.search(ALLOWED_ZH.sub("", tick)):
            found.append(f"{where}: Chinese tick {tick!r}")
    return found


def number(text: str) -> Decimal:
    return Decimal(text.strip().replace(",", ""))


def _researcher(walk: Walk, world) -> None:
    from playwright.sync_api import expect

    page, language = walk.page, walk.language
    page.goto("/")
    expect(page.locator("#home-mine")).to_be_visible()
    walk.look("home")

    # The request form: the live preview prices the request in the site's currency.
    page.goto(f"/leases/new/?card_model={world['small'].slug}")
    page.locator("select[name=team]").select_option("vision")
    page.locator("select[name=unit]").select_option("hours")
    page.locator("input[name=count]").fill("1")
    page.locator("input[name=duration]").fill("2")
    expect(page.locator("#preview [data-verdict]")).to_have_count(1)
    expect(page.locator("#preview")).to_contain_text(f"{CURRENCY} 8.00")  # 2 h × 4.00
    walk.look("request-preview")

    # Her lease: cost in the currency, the access line that works, the extend box.
    held = world["held"]
    page.goto(f"/leases/{held.pk}/")
    expect(page.locator("[data-cost=so-far]")).to_contain_text(f"{CURRENCY} ")
    expect(page.locator("[data-cost=to-end]")).to_contain_text(f"{CURRENCY} ")
    access = page.locator("#lease-live pre.access").first.inner_text().strip()
    assert ACCESS.match(access), f"the access line does not log in with the cards: {access!r}"
    assert "&& export" not in access
    expect(page.locator("#extend")).to_be_visible()
    walk.look("lease")

    # The preempted job: its checkpoint is not "sent" before the agent says so.
    job = world["job"]
    note = page.locator('[data-note="checkpoint"] [data-checkpoint]')
    page.goto(f"/leases/{job.pk}/")
    expect(note).to_have_attribute("data-checkpoint", "waiting")
    expect(note).to_contain_text(
        said(language, "checkpoint waiting for the node's agent: not delivered yet")
    )
    expect(page.locator('[data-kind="checkpoint_signal"]')).to_have_count(0)
    walk.look("checkpoint-waiting")

    later = timezone.now() + timedelta(seconds=ACK_SECONDS + 1)
    assert db_read(lambda: checkpoints.checkpoints_unacknowledged(now=later, batch=10)) == 1
    page.reload()
    expect(note).to_have_attribute("data-checkpoint", "failed")
    expect(note).to_contain_text(
        said(
            language,
            "checkpoint not delivered: the node's agent did not confirm it within %(s)s s",
            s=ACK_SECONDS,
        )
    )
    walk.look("checkpoint-not-delivered")

    node = world["big_node"]
    assert db_read(
        lambda: checkpoints.checkpoint_delivered(
            node=node, lease_id=job.pk, ok=True, detail="1 process", now=later
        )
    )
    page.reload()
    expect(note).to_have_attribute("data-checkpoint", "sent")
    expect(page.locator('[data-kind="checkpoint_delivered"]')).to_have_count(1)
    walk.look("checkpoint-delivered")

    page.goto(f"/leases/calendar/{world['small'].slug}/")
    walk.look("calendar")


def _lead(walk: Walk, world) -> None:
    """Her home lists every pending item with its buttons; the team page's "used" is the
    report's figure."""
    from playwright.sync_api import expect

    page = walk.page
    page.goto("/")
    home = page.locator("#home-lead")
    expect(home.locator("[data-approvals]")).to_have_text("3")  # 1 request + 2 changes
    waiting = home.locator(f'[data-lease="{world["waiting"].pk}"]')
    expect(waiting.locator("button[name=approve]")).to_have_count(1)
    expect(waiting.locator("button[name=reject]")).to_have_count(1)
    for change in world["changes"]:
        listed = home.locator(f'[data-change="{change.pk}"]')
        expect(listed).to_have_count(1)
        for decision in ("approve", "reject"):
            button = listed.locator(f'button[name={decision}][formaction$="/{decision}/"]')
            expect(button).to_have_count(1)
    walk.look("home")

    page.goto("/teams/vision/")
    expect(page.locator("#quota-use thead")).to_contain_text(CURRENCY)
    used = number(page.locator('[data-quota-row="all"] [data-used]').get_attribute("data-used"))
    walk.look("team")
    # "Used" is the report's figure (recorded + accrued), the waiting request (2 card-hours)
    # shown apart; the two pages are seconds apart, in which 6 held cards accrue a little.
    reported = _month_report(walk)
    assert abs(used - reported) <= Decimal("0.25"), (used, reported)


def _month_report(walk: Walk) -> Decimal:
    """This month's report (every team); returns its card-hours."""
    from playwright.sync_api import expect

    page = walk.page
    start = month_of(timezone.now())[0].astimezone(timezone.get_current_timezone()).date()
    today = timezone.localdate()
    page.goto(f"/reports/?start={start:%Y-%m-%d}&end={today:%Y-%m-%d}&group_by=team")
    total = page.locator("tr.totals[data-report-total] td.num").first
    expect(total).to_be_visible()
    walk.look("report")
    return number(total.inner_text())


def _finance(walk: Walk, world) -> None:
    """Her home and this month's report, money in the configured currency."""
    from playwright.sync_api import expect

    page = walk.page
    page.goto("/")
    expect(page.locator('#home-finance [data-stat="cost"] .stat__label')).to_contain_text(CURRENCY)
    walk.look("home")
    _month_report(walk)
    expect(page.locator("main")).to_contain_text(CURRENCY)


def _operator(walk: Walk, world) -> None:
    from playwright.sync_api import expect

    page, language = walk.page, walk.language
    page.goto("/")
    expect(page.locator("#home-operator > h2 + #home-alerts")).to_have_attribute("data-alerts", "2")
    order = page.locator("#home-alerts [data-alert]").evaluate_all(
        "items => items.map(i => i.dataset.alert)"
    )
    assert order == [str(world["critical"].pk), str(world["warning"].pk)], order
    expect(page.locator('.site-nav [data-alerts-open="2"]')).to_be_visible()
    walk.look("home")

    node = world["small_node"]
    page.goto(f"/inventory/nodes/{node.hostname}/")
    at = timezone.localtime(timezone.now() + timedelta(minutes=90)).replace(second=0, microsecond=0)
    page.locator("#drain-form input[name=drain_at]").fill(f"{at:%Y-%m-%dT%H:%M}")
    confirmed(page, page.locator("#drain-form button[name=drain]"))
    expect(page.locator("#drain-notice")).to_be_visible()
    # alice's cards there are held until the drain, not to their booked end.
    expect(page.locator('[data-busy-until="drain"]')).to_have_count(2)
    expect(page.locator('[data-busy-until="drain"]').first).to_contain_text(f"{at:%m-%d %H:%M}")
    walk.look("node-drained")
    with page.expect_navigation():
        page.locator("#undrain-form button[name=undrain]").click()
    expect(page.locator(".messages")).to_contain_text(
        said(language, "Node %(node)s takes leases again.", node=node.hostname)
    )
    expect(page.locator("#drain-notice")).to_have_count(0)
    walk.look("node-undrained")

    page.goto("/pool/")
    expect(page.locator('[data-chart="utilisation"]')).to_have_count(1)
    walk.look("pool")
    page.goto(f"/leases/timeline/{world['big'].slug}/")
    expect(page.locator("#pool-timeline .plotly-chart[data-ready]")).to_have_count(1)
    walk.look("timeline")
    page.goto(f"/leases/calendar/{world['big'].slug}/")
    walk.look("calendar")


def _shots(tmp_path) -> Path:
    folder = Path(os.environ.get("CARDPOOL_WALK_SHOTS") or tmp_path / "shots")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@contextmanager
def chromium(live_server):
    """One headless Chromium for the whole walk; each person gets a context of their own
    (their own cookies), asking for Simplified Chinese as most users' browsers do."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS, headless=True
        )

        def page_for():
            context = browser.new_context(base_url=live_server.url, locale="zh-CN")
            context.set_default_timeout(STATUS_TIMEOUT_MS)
            return context, context.new_page()

        try:
            yield page_for
        finally:
            browser.close()


@pytest.mark.parametrize("language", LANGUAGES)
def test_each_person_walks_their_pages(live_server, world, language, tmp_path):
    shots = _shots(tmp_path)
    problems: list[str] = []
    chart_texts = 0
    with chromium(live_server) as page_for:
        for who, walk_through in (
            ("alice", _researcher),
            ("lena", _lead),
            ("fin", _finance),
            ("ops", _operator),
        ):
            context, page = page_for()
            try:
                sign_in(page, who, language)
                walk = Walk(page, language, who, shots)
                walk_through(walk, world)
            finally:
                context.close()
            problems += walk.problems
            chart_texts += walk.chart_texts
    assert chart_texts > 20, "no chart was read: the chart check checked nothing"
    assert problems == [], "\n".join(problems)
