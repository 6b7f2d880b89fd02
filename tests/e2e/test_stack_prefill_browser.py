"""The request form in a browser: a stack pre-filled from the last lease is cleared when a
card model of another stack is chosen, and comes back with a model of that stack
(static/js/site.js, on a page shaped like the form's markup; no server needed)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.e2e.test_browser import CHROMIUM_ARGS

pytestmark = pytest.mark.browser

SITE_JS = Path(__file__).resolve().parents[2] / "static" / "js" / "site.js"
PAGE = """<form id="request-form">
<select name="card_model"><option value="">any</option>
<option value="a100" data-stack="cuda">A100</option>
<option value="ascend" data-stack="cann">Ascend</option></select>
<select name="stack"><option value="">—</option><option value="cuda" selected>CUDA</option>
<option value="cann">CANN</option></select>
<small data-default-stack="cuda">default</small></form>"""


def test_choosing_an_ascend_card_clears_the_cuda_default():
    if not shutil.which("chromium") and not Path("/usr/bin/chromium").exists():
        pytest.skip("needs Debian's chromium")
    sync_playwright = pytest.importorskip("playwright.sync_api").sync_playwright
    with sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS, headless=True
        )
        try:
            page = browser.new_page()
            page.set_content(PAGE)
            page.add_script_tag(content=SITE_JS.read_text())
            stack = page.locator("select[name=stack]")
            page.select_option("select[name=card_model]", "ascend")
            assert stack.input_value() == ""
            page.select_option("select[name=card_model]", "a100")
            assert stack.input_value() == "cuda"
            page.select_option("select[name=stack]", "cann")  # chosen by the person: kept
            page.select_option("select[name=card_model]", "a100")
            assert stack.input_value() == "cann"
        finally:
            browser.close()
