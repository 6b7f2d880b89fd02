"""``{% plotly_head %}``: plotly.js for a page with charts, under a CSP without inline styles."""

from django import template
from django.templatetags.static import static
from django.utils.html import format_html, format_html_join

from portal.staticfinders import CSS_NAME, PUBLIC_NAME, inline_style_ids

register = template.Library()


@register.simple_tag
def plotly_head() -> str:
    """plotly.js's own rules as a file, linked with the id plotly.js looks for (it then writes no
    <style> of its own); an empty element for each other style sheet it would inject (maplibre's:
    the portal draws no maps); then plotly.js."""
    return format_html(
        '<link rel="stylesheet" id="plotly.js-style-global" class="no-inline-styles" href="{}">'
        "{}"
        '<script src="{}"></script>',
        static(CSS_NAME),
        format_html_join(
            "", '<meta name="plotly-style" id="{}">', ((i,) for i in inline_style_ids())
        ),
        static(PUBLIC_NAME),
    )
