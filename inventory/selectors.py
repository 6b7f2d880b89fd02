"""Reads of the inventory that are more than a ``.get``.

What is free now depends on the leases too: those reads live in
``leasing.scheduler.availability``; the filters of each list in ``inventory.filters``.
"""

from __future__ import annotations

from django.db.models import Count, IntegerField, OuterRef, QuerySet, Subquery, Value
from django.db.models.functions import Coalesce


def count_per_row(rows: QuerySet, outer_field: str) -> Coalesce:
    """Count of *rows* whose ``outer_field`` is the outer row, as one correlated subquery."""
    counted = (
        rows.filter(**{outer_field: OuterRef("pk")})
        .order_by()
        .values(outer_field)
        .annotate(n=Count("pk"))
        .values("n")
    )
    return Coalesce(Subquery(counted, output_field=IntegerField()), Value(0))
