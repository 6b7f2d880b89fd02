"""plotly.js is the basic partial bundle, of the Python package's plotly.js version, loaded by
charts.js only where a chart is drawn, with the locale of the page's language."""

from pathlib import Path

import plotly
from django.contrib.staticfiles import finders

from portal.staticfinders import BUNDLE, bundle_version


def test_the_vendored_bundle_is_the_python_packages_plotly_js_version():
    """Figures are written by the Python package and drawn by the vendored bundle: a plotly
    upgrade must bring the bundle of the same version along (npm plotly.js-basic-dist-min)."""
    full = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"
    full_version = bundle_version(full.read_text(encoding="utf-8")[:400])
    assert full_version and bundle_version(BUNDLE.read_text(encoding="utf-8")) == full_version
    assert BUNDLE.stat().st_size < 1_300_000  # the partial bundle, not the 4.8 MB one
    assert finders.find("vendor/plotly-basic.min.js") and not any(
        finders.find("vendor/plotly.min.js")
    )


def test_chart_locale_follows_the_page_language(client, alice):
    client.force_login(alice)
    zh = client.get("/leases/", HTTP_ACCEPT_LANGUAGE="zh-hans").content.decode()
    assert 'data-plotly-locale="zh-CN"' in zh and "vendor/plotly-locale-zh-cn.js" in zh
    client.cookies["django_language"] = "en"
    en = client.get("/leases/", HTTP_ACCEPT_LANGUAGE="en").content.decode()
    assert 'data-plotly-locale=""' in en


def test_no_page_links_plotly_itself(client, alice):
    """plotly.js is never a <script> of a page: charts.js fetches it when a chart is there."""
    client.force_login(alice)
    for url in ("/", "/leases/", "/pool/", "/inventory/"):
        page = client.get(url).content.decode()
        assert '<script src="/static/vendor/plotly' not in page, url
