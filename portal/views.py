"""The site shell: the dashboard everyone lands on."""

from django.contrib.auth.decorators import login_required
from django.db.models import Count, IntegerField, OuterRef, Subquery, Value
from django.db.models.functions import Coalesce
from django.shortcuts import render
from django.utils import timezone

from inventory.selectors import card_models_with_counts
from leasing import selectors as lease_selectors
from leasing.models import OPEN_STATES, Lease, LeaseStatus
from portal.models import Membership
from portal.views_pool import next_free


def _waiting() -> Coalesce:
    """Leases waiting for the outer card model: a count on the queue index, not a join of the
    model with every lease it ever had (a million rows in a year)."""
    waiting = (
        Lease.objects.filter(status=LeaseStatus.QUEUED, card_model=OuterRef("pk"))
        .order_by()
        .values("card_model")
        .annotate(n=Count("pk"))
        .values("n")
    )
    return Coalesce(Subquery(waiting, output_field=IntegerField()), Value(0))


@login_required
def dashboard(request):
    """The pool at a glance (free now / total per card model, queue length, when a busy model
    frees up) and my open leases."""
    now = timezone.now()
    board = list(
        card_models_with_counts(now)
        .filter(total__gt=0)
        .annotate(waiting=_waiting())
        .order_by("vendor", "-memory_gb", "name")
    )
    # None free now: when would one card be, behind the queue (3 queries for all such models).
    frees_at = next_free(now, [cm.pk for cm in board if not cm.available])
    for cm in board:
        cm.frees_at = frees_at.get(cm.pk)
    context = {
        "board": board,
        "my_open": lease_selectors.my_leases(request.user).filter(status__in=OPEN_STATES)[:10],
        "memberships": Membership.objects.filter(user=request.user).select_related("team"),
    }
    return render(request, "portal/dashboard.html", context)
