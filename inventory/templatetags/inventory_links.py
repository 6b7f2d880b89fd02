"""Links to inventory pages that never fail a page: ``{% load inventory_links %}``."""

from __future__ import annotations

from django import template
from django.urls import NoReverseMatch, reverse

register = template.Library()


@register.filter
def node_url(hostname: str) -> str:
    """The node page's address, or "" for a hostname no URL can hold (e.g. one with "/",
    stored before hostnames were validated): the lists show it without a link rather than
    failing for everyone."""
    try:
        return reverse("inventory:node", args=[hostname])
    except NoReverseMatch:
        return ""
