"""``{% plotly_assets %}``: where static/js/charts.js finds plotly.js, should a page draw a chart.

plotly.js is not in any page's head: charts.js loads it (with its style sheet, and the locale
matching the page's language) only when the page, or content htmx swaps in, holds a chart, so
pages without one download none of it.
"""

from django import template
from django.templatetags.static import static
from django.utils import translation
from django.utils.html import format_html

from portal.staticfinders import CSS_NAME, LOCALE_NAMES, PUBLIC_NAME, inline_style_ids

register = template.Library()


@register.simple_tag
def plotly_assets() -> str:
    """Attributes for charts.js's <script>: the bundle, plotly.js's own rules as a file (linked
    with the id plotly.js looks for, so it writes no <style>), the ids of the other style
    sheets it would inject (maplibre's: the portal draws no maps), the page's chart locale."""
    locale_name, locale_file = LOCALE_NAMES.get(translation.get_language() or "", ("", ""))
    return format_html(
        'data-plotly="{}" data-plotly-css="{}" data-plotly-style-ids="{}"'
        ' data-plotly-locale="{}" data-plotly-locale-src="{}"',
        static(PUBLIC_NAME),
        static(CSS_NAME),
        " ".join(inline_style_ids()),
        locale_name,
        static(locale_file) if locale_file else "",
    )
