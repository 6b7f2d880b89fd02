"""The site shell: the dashboard everyone lands on."""

from django.contrib.auth.decorators import login_required
from django.shortcuts import render
from django.utils import timezone

from inventory.selectors import count_per_row
from leasing.choices import OPEN_STATES, LeaseStatus
from leasing.lifecycle import selectors as lease_selectors
from leasing.models import Lease
from leasing.scheduler.availability import card_models_with_counts
from leasing.scheduler.picture import PlannedSummary, planned_annotations
from portal import home
from portal.models import Membership
from portal.views_pool import next_free


@login_required
def dashboard(request):
    """Each person's home: what their roles do most first (portal.home: an operator's pool
    health, finance's month, a lead's approvals and team), then my open leases and the pool
    at a glance (free now / total per card model, queue length, when a busy model frees up)."""
    now = timezone.now()
    board = list(
        card_models_with_counts(now)
        .filter(total__gt=0)
        .annotate(
            # on the queue index, not a join of each model with every lease it ever had
            waiting=count_per_row(Lease.objects.filter(status=LeaseStatus.QUEUED), "card_model"),
            # cards free now may be planned for waiting leases (the queue's plan)
            **planned_annotations(),
        )
        .order_by("vendor", "-memory_gb", "name")
    )
    # None free now: when would one card be, behind the queue (3 queries for all such models).
    frees_at = next_free(now, [cm.pk for cm in board if not cm.available])
    for cm in board:
        cm.frees_at = frees_at.get(cm.pk)
        cm.planned = cm.planned_cards and PlannedSummary(cm.planned_cards, cm.planned_first)
    context = {
        **home.home_panels(request.user, now),
        "board": board,
        "my_open": lease_selectors.with_truth(
            lease_selectors.my_leases(request.user).filter(status__in=OPEN_STATES)[:10]
        ),
        "memberships": Membership.objects.filter(user=request.user).select_related("team"),
    }
    return render(request, "portal/dashboard.html", context)
