"""Template filters that word stored parameters for the reader (the active language and zone)."""

from django import template

from leasing.notify.messages import breaches_text

register = template.Library()


@register.filter
def breaches(stored, fallback: str = "") -> str:
    """Limits broken, stored as parameters (``Breach.stored``), one per line; *fallback*: the
    text kept before they were (older rows)."""
    return breaches_text(stored) or fallback
