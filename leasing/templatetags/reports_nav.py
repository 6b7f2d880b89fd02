"""``user|may_see_reports``: whether the header shows the Reports link (finance, operators, leads)."""

from __future__ import annotations

from django import template

from leasing.billing import reports

register = template.Library()


@register.filter
def may_see_reports(user) -> bool:
    if not getattr(user, "is_authenticated", False):
        return False
    return reports.may_see_reports(user)
