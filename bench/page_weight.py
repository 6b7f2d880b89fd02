"""Page weight and first load, in Chromium, over every page of a running portal (the demo).

For each persona (alice the researcher, lena the lead, fin, ops) and language (zh-hans, en),
every page of their day is opened in a fresh browser context (a cold cache: the first load),
and the script prints one row per page: the bytes of scripts and styles the page loaded
(decoded, and as sent over the wire: whitenoise serves them compressed), the time to the
``load`` event (navigation start → loadEventEnd), and, on a page with charts, the time until
every chart is drawn (charts.js loads plotly.js only then). Not a test; run by hand against
the demo (bench/README.md):

    CARDPOOL_PORT=8121 .venv/bin/python cardpool.py demo &      # in another shell
    .venv/bin/python bench/page_weight.py --url http://127.0.0.1:8121

The goal (issue #20): no page loads more than 1.5 MB of scripts and styles, and the first
load of every page is under 1 s.
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
from urllib.parse import urljoin

CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking"]
LIMIT_BYTES = 1_500_000
PERSONAS = ("alice", "lena", "fin", "ops")

# Each persona's pages; "{...}" parts are found on the pages themselves (first link matching).
PAGES = {
    "alice": [
        "/",
        "/inventory/",
        "{model}",
        "/inventory/nodes/",
        "{node}",
        "/leases/",
        "/leases/new/",
        "{lease}",
        "/leases/calendar/",
        "/leases/timeline/",
        "/leases/estimate/",
        "/pool/",
        "/teams/",
        "/notifications/",
        "/notifications/settings/",
        "/accounts/profile/",
        "/api/v1/docs/",
    ],
    "lena": ["/", "/teams/vision/", "/leases/", "/reports/", "/pool/"],
    "fin": ["/", "/reports/", "{statement}", "/pool/"],
    "ops": ["/", "/pool/", "/inventory/nodes/", "{node}", "/admin/"],
}
FINDERS = {
    "{model}": ("/inventory/", r'href="(/inventory/models/[^"/]+/)"'),
    "{node}": ("/inventory/nodes/", r'href="(/inventory/nodes/[^"/]+/)"'),
    "{lease}": ("/leases/", r'href="(/leases/\d+/)"'),
    "{statement}": ("/reports/", r'href="(/reports/statements/[^"]+/)"'),
}


def sign_in(browser, base: str, user: str, password: str, language: str):
    context = browser.new_context(base_url=base, locale="zh-CN")
    page = context.new_page()
    page.goto("/accounts/login/")
    page.locator("input[name=login]").fill(user)
    page.locator("input[name=password]").fill(password)
    with page.expect_navigation():
        page.locator("input[name=password]").press("Enter")
    if language == "en":
        with page.expect_navigation():
            page.locator("form.lang-switch button[value=en]").click()
    state = context.storage_state()
    finds = {}
    for key, (where, pattern) in FINDERS.items():
        html = page.goto(where).text() if page.goto(where) else ""
        found = re.search(pattern, html)
        finds[key] = found.group(1) if found else None
    context.close()
    return state, finds


def measure(browser, base: str, state, path: str) -> dict:
    """One first load (a new context: nothing cached) of *path*."""
    context = browser.new_context(base_url=base, locale="zh-CN", storage_state=state)
    page = context.new_page()
    assets = []
    page.on("requestfinished", lambda request: assets.append(request))
    response = page.goto(path, wait_until="load")
    charts = page.locator(".plotly-chart").count()
    drawn_ms = None
    if charts:
        page.wait_for_function(
            "n => document.querySelectorAll('.plotly-chart[data-ready]').length >= n",
            arg=charts,
            timeout=30_000,
        )
        drawn_ms = page.evaluate("performance.now()")
    page.wait_for_load_state("networkidle")
    timing = page.evaluate(
        "(() => { const n = performance.getEntriesByType('navigation')[0];"
        " return {load: n.loadEventEnd - n.startTime, server: n.responseStart - n.requestStart}; })()"
    )
    decoded = wire = 0
    for request in assets:
        if request.resource_type not in ("script", "stylesheet"):
            continue
        sizes = request.sizes()
        wire += sizes["responseBodySize"]
        got = request.response()
        decoded += len(got.body()) if got is not None else 0
    context.close()
    return {
        "status": response.status if response else 0,
        "decoded": decoded,
        "wire": wire,
        "load_ms": timing["load"],
        "server_ms": timing["server"],
        "drawn_ms": drawn_ms,
        "charts": charts,
    }


def main() -> int:
    from playwright.sync_api import sync_playwright

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--url", default="http://127.0.0.1:8000")
    parser.add_argument("--password", default="cardpool-demo")
    parser.add_argument("--languages", default="zh-hans,en")
    parser.add_argument("--personas", default=",".join(PERSONAS))
    args = parser.parse_args()
    rows = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
        for language in args.languages.split(","):
            for persona in args.personas.split(","):
                state, finds = sign_in(browser, args.url, persona, args.password, language)
                for path in PAGES[persona]:
                    path = finds.get(path, path) if path.startswith("{") else path
                    if path is None:
                        continue
                    got = measure(browser, args.url, state, urljoin("/", path))
                    rows.append((language, persona, path, got))
        browser.close()
    print(
        "| lang | who | page | status | scripts+styles KB (wire KB) | charts | server ms "
        "| load ms | charts drawn ms |"
    )
    print("| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for language, persona, path, got in rows:
        drawn = f"{got['drawn_ms']:.0f}" if got["drawn_ms"] is not None else "—"
        print(
            f"| {language} | {persona} | `{path}` | {got['status']} | "
            f"{got['decoded'] / 1000:,.0f} ({got['wire'] / 1000:,.0f}) | {got['charts']} | "
            f"{got['server_ms']:.0f} | {got['load_ms']:.0f} | {drawn} |"
        )
    heaviest = max(rows, key=lambda r: r[3]["decoded"])
    slowest = max(rows, key=lambda r: max(r[3]["load_ms"], r[3]["drawn_ms"] or 0))
    loads = [r[3]["load_ms"] for r in rows]
    print()
    print(
        f"pages: {len(rows)}; heaviest: {heaviest[2]} ({heaviest[0]}, {heaviest[1]}) "
        f"{heaviest[3]['decoded'] / 1000:,.0f} KB; slowest: {slowest[2]} ({slowest[0]}, "
        f"{slowest[1]}) {max(slowest[3]['load_ms'], slowest[3]['drawn_ms'] or 0):.0f} ms; "
        f"median load {statistics.median(loads):.0f} ms"
    )
    over = [r for r in rows if r[3]["decoded"] > LIMIT_BYTES]
    slow = [r for r in rows if max(r[3]["load_ms"], r[3]["drawn_ms"] or 0) > 1000]
    print(f"over 1.5 MB: {len(over)}; first load over 1 s: {len(slow)}")
    return 1 if over or slow else 0


if __name__ == "__main__":
    sys.exit(main())
