"""What each person's home page leads with (reads only; the dashboard view renders them).

A researcher: their leases and the request button. A team lead: the requests waiting for
them and their team's month. Finance: the month's cost so far and the last closed month's
statements. An operator: the pool's health (cards down, nodes out, failed releases, queue).
Someone with several roles sees each panel, the site roles first. Each panel is a bounded
number of queries, and only the panels of the viewer's roles are read.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.db.models import Case, Count, Q, Value, When

from inventory.models import Card, Node
from leasing.billing import reports
from leasing.choices import (
    BOOKED_STATES,
    LASTING_ALERT_STATES,
    WAITING_STATES,
    AlertSeverity,
)
from leasing.lifecycle import selectors as lease_selectors
from leasing.models import Alert, Lease, LeaseChange, Statement
from leasing.periods import local_date, month_of, site_tz
from leasing.teams import selectors as team_selectors
from portal.permissions import is_finance, is_operator, lead_memberships

SHOWN = 5
SEVERITY_ORDER = (AlertSeverity.CRITICAL, AlertSeverity.WARNING, AlertSeverity.INFO)


def lead_panel(user, now: datetime) -> dict | None:
    """Requests and changes waiting for this lead, and each led team's month so far."""
    led = list(lead_memberships(user).select_related("team").order_by("team__name"))
    if not led:
        return None
    approvals = team_selectors.approvals_for(user).filter(team__in=[m.team for m in led])
    # Every pending item the count counts is listed: requests, and extensions and resizes.
    changes = LeaseChange.objects.filter(
        status=LeaseChange.Status.PENDING,
        lease__team__in=[m.team for m in led],
        lease__status__in=BOOKED_STATES,
    ).select_related(
        "lease__user", "lease__card_model", "lease__team", "card_model", "requested_by"
    )
    teams = []
    for membership in led:
        total = team_selectors.team_month_total(membership.team, now=now)
        teams.append(
            {
                "team": membership.team,
                "used_hours": total.used_hours,
                "money_spent": total.money_spent,
                "holding": total.concurrent_now,
            }
        )
    return {
        "approvals": list(approvals.order_by("submitted_at")[:SHOWN]),
        "approvals_count": approvals.count(),
        "changes": list(changes.order_by("requested_at")[:SHOWN]),
        "changes_count": changes.count(),
        "teams": teams,
    }


def finance_panel(now: datetime) -> dict:
    """The month's cost so far by team (recorded + accrued) and last month's statements."""
    today = local_date(now)
    f = reports.ReportFilter(start=today.replace(day=1), end=today, group_by="team")
    report = reports.usage_report(f, now=now)
    by_team: dict[str, dict] = {}
    for row in report["rows"]:
        entry = by_team.setdefault(row["label"], {"label": row["label"], "cost": 0, "hours": 0})
        entry["cost"] += row["cost"]
        entry["hours"] += row["card_hours"]
    last_month = month_of(month_of(now)[0] - timedelta(minutes=1))[0].astimezone(site_tz())
    return {
        "month": today.replace(day=1),
        "totals": report["totals"],
        "teams": sorted(by_team.values(), key=lambda e: -e["cost"])[:SHOWN],
        "last_month": last_month.date(),
        "statements": list(
            Statement.objects.filter(month=last_month.date())
            .select_related("team")
            .order_by("number")
        ),
        "report_query": f"start={f.start:%Y-%m-%d}&end={f.end:%Y-%m-%d}&group_by=team",
    }


def operator_panel(now: datetime) -> dict:
    """Pool health, led by the alerts still open (how many, the worst first); then cards by
    state, nodes out of service (drains first), failed releases."""
    worst = Case(
        *(When(severity=s, then=Value(i)) for i, s in enumerate(SEVERITY_ORDER)),
        default=Value(len(SEVERITY_ORDER)),
    )
    lasting = Alert.objects.filter(status__in=LASTING_ALERT_STATES)
    cards = Card.objects.in_service().aggregate(
        total=Count("pk"), faulty=Count("pk", filter=Q(status=Card.Status.FAULTY))
    )
    nodes = list(
        Node.objects.exclude(status=Node.Status.ACTIVE)
        .select_related("region")
        .order_by("drain_at", "hostname")[: SHOWN * 2]
    )
    return {
        "alerts": list(
            lasting.select_related("card__node", "node")
            .annotate(rank=worst)
            .order_by("rank", "-opened_at", "-pk")[:SHOWN]
        ),
        "alerts_count": lasting.count(),
        "cards": cards,
        "nodes_out": nodes,
        "nodes_out_count": Node.objects.exclude(status=Node.Status.ACTIVE).count(),
        "releases_failed": lease_selectors.releases_failed().count(),
        "waiting": Lease.objects.filter(status__in=WAITING_STATES).count(),
    }


def home_panels(user, now: datetime) -> dict:
    """The panels of *user*'s roles (None for a role they do not have)."""
    return {
        "operator_panel": operator_panel(now) if is_operator(user) else None,
        "finance_panel": finance_panel(now) if is_finance(user) else None,
        "lead_panel": lead_panel(user, now),
    }
