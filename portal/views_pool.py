"""The pool page (/pool/): how the pool has been used, in plotly charts, for everyone signed in.

Every series is aggregated in the database with a fixed number of queries, whatever the
number of cards or leases: occupancy and queue length over time are running sums of
per-hour counts (things that started minus things that ended in each hour, ``TruncHour``)
on top of a baseline counted once at the window's start.

Who sees names in "top users": operators and finance see everyone's; a team lead sees the
names of the members of the teams they lead; anyone else sees only their own name — the
other bars are labelled by rank.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import UTC, datetime, timedelta
from html import escape  # plotly renders a little HTML in labels; names are user data

import plotly.graph_objects as go
from django.contrib.auth.decorators import login_required
from django.db.models import (
    Count,
    DateTimeField,
    DurationField,
    Exists,
    ExpressionWrapper,
    F,
    OuterRef,
    Q,
    Sum,
    Value,
)
from django.db.models.functions import Greatest, Least, TruncHour
from django.shortcuts import render
from django.utils import timezone
from django.utils.translation import gettext as _

from inventory.charts import model_colours
from inventory.models import Card, CardModel, Node, node_takes_leases_q
from leasing.choices import WAITING_STATES, LeaseStatus
from leasing.health import selectors as health_selectors
from leasing.lifecycle import selectors as lease_selectors
from leasing.models import Allocation, Lease, LeaseEvent
from leasing.scheduler.availability import card_models_with_counts, covering_allocations
from leasing.scheduler.picture import model_picture
from portal import charts
from portal.models import Membership
from portal.permissions import is_finance, is_operator, teams_led_by

HOURS = 7 * 24
TOP_USERS_DAYS = 30
TOP_USERS = 10
# Queue waits, in seconds: the upper bound of each bar of the histogram (the last is open).
WAIT_BINS = (60, 300, 900, 3600, 4 * 3600, 24 * 3600)
# "Frees up": the earliest a 1-card request made now would start, behind the queue.
FREE_FOR = timedelta(hours=1)
FAILED_RELEASES_SHOWN = 50


def _hour_starts(now: datetime) -> list[datetime]:
    """The starts of the last HOURS whole hours (UTC), the current one last."""
    current = now.astimezone(UTC).replace(minute=0, second=0, microsecond=0)
    return [current - timedelta(hours=HOURS - 1 - i) for i in range(HOURS)]


def _hourly(rows, key: str) -> dict[int, dict[datetime, int]]:
    out: dict[int, dict[datetime, int]] = defaultdict(dict)
    for row in rows:
        out[row[key]][row["hour"].astimezone(UTC)] = row["n"]
    return out


def _running(
    baseline: dict[int, int],
    ins: dict[int, dict[datetime, int]],
    outs: dict[int, dict[datetime, int]],
    hours: list[datetime],
    model_ids,
) -> dict[int, list[int]]:
    """Per model: baseline + Σ(ins − outs) through each hour — the level at each hour's end."""
    series = {}
    for model_id in model_ids:
        level = baseline.get(model_id, 0)
        points = []
        for hour in hours:
            level += ins.get(model_id, {}).get(hour, 0) - outs.get(model_id, {}).get(hour, 0)
            points.append(level)
        series[model_id] = points
    return series


def held_per_hour(now: datetime, hours: list[datetime], model_ids) -> dict[int, list[int]]:
    """Cards held at the end of each hour (at *now* for the current one), per model: 3 queries."""
    start = hours[0]
    model = "card__card_model_id"
    allocations = Allocation.objects.filter(card__card_model_id__in=model_ids).order_by()
    baseline = dict(
        allocations.filter(start_at__lt=start, end_at__gte=start)
        .values_list(model)
        .annotate(n=Count("pk"))
    )
    starts = _hourly(
        allocations.filter(start_at__gte=start, start_at__lte=now)
        .values(model, hour=TruncHour("start_at", tzinfo=UTC))
        .annotate(n=Count("pk")),
        model,
    )
    ends = _hourly(
        allocations.filter(end_at__gte=start, end_at__lte=now)
        .values(model, hour=TruncHour("end_at", tzinfo=UTC))
        .annotate(n=Count("pk")),
        model,
    )
    return _running(baseline, starts, ends, hours, model_ids)


def _left_queue() -> Q:
    """A lease event that took a lease out of waiting (placed, booked, cancelled, rejected)."""
    return Q(from_status__in=WAITING_STATES) & ~Q(to_status__in=(*WAITING_STATES, ""))


def queue_per_hour(now: datetime, hours: list[datetime], model_ids) -> dict[int, list[int]]:
    """Leases waiting at the end of each hour, per model: 4 queries.

    A lease waits from its submission until the event that takes it out of waiting;
    leases that never waited (a resize's new lease) have no such event and are not counted.
    """
    start = hours[0]
    leaves = LeaseEvent.objects.filter(_left_queue(), lease__card_model_id__in=model_ids)
    waited = Q(status__in=WAITING_STATES) | Exists(leaves.filter(lease=OuterRef("pk")))
    leases = Lease.objects.filter(card_model_id__in=model_ids).order_by()
    baseline: dict[int, int] = defaultdict(int)
    for model_id, n in (
        leaves.filter(at__gte=start, lease__submitted_at__lt=start)
        .order_by()
        .values_list("lease__card_model_id")
        .annotate(n=Count("pk"))
    ):
        baseline[model_id] += n
    for model_id, n in (
        leases.filter(status__in=WAITING_STATES, submitted_at__lt=start)
        .values_list("card_model_id")
        .annotate(n=Count("pk"))
    ):
        baseline[model_id] += n
    entries = _hourly(
        leases.filter(waited, submitted_at__gte=start, submitted_at__lte=now)
        .values("card_model_id", hour=TruncHour("submitted_at", tzinfo=UTC))
        .annotate(n=Count("pk")),
        "card_model_id",
    )
    exits = _hourly(
        leaves.filter(at__gte=start, at__lte=now)
        .order_by()
        .values("lease__card_model_id", hour=TruncHour("at", tzinfo=UTC))
        .annotate(n=Count("pk")),
        "lease__card_model_id",
    )
    return _running(baseline, entries, exits, hours, model_ids)


def queue_waits(now: datetime, model_ids) -> dict[int, list[int]]:
    """Per model, how many leases got their cards in the last 7 days after waiting in each
    WAIT_BINS bar (submission → placed or booked): one query."""
    placed = LeaseEvent.objects.filter(
        at__gt=now - timedelta(hours=HOURS),
        at__lte=now,
        from_status__in=WAITING_STATES,
        to_status__in=(LeaseStatus.SCHEDULED, LeaseStatus.PROVISIONING),
        lease__card_model_id__in=model_ids,
    )
    within = {
        f"le_{b}": Count("pk", filter=Q(at__lte=F("lease__submitted_at") + timedelta(seconds=b)))
        for b in WAIT_BINS
    }
    out = {}
    for row in (
        placed.order_by().values("lease__card_model_id").annotate(total=Count("pk"), **within)
    ):
        cumulative = [row[f"le_{b}"] for b in WAIT_BINS] + [row["total"]]
        out[row["lease__card_model_id"]] = [
            n - (cumulative[i - 1] if i else 0) for i, n in enumerate(cumulative)
        ]
    return out


def down_now(now: datetime, model_ids) -> dict[int, int]:
    """Cards out of service now (faulty, or healthy and idle on a node not taking leases).

    The inventory keeps no history of card or node states, so the charts draw today's
    count across the whole window.
    """
    down = Card.objects.in_service().filter(card_model_id__in=model_ids)
    down = down.filter(
        Q(status=Card.Status.FAULTY)
        | (~node_takes_leases_q(now) & ~Exists(covering_allocations(now)))
    )
    return dict(down.order_by().values_list("card_model_id").annotate(n=Count("pk")))


def top_users(now: datetime, viewer) -> list[dict]:
    """The TOP_USERS users with the most card-hours held in the last 30 days: one query.

    Each row has ``label`` (a name or a rank, per who is looking), ``hours`` and ``is_me``.
    """
    since = now - timedelta(days=TOP_USERS_DAYS)
    held = ExpressionWrapper(
        Least("end_at", Value(now, output_field=DateTimeField()))
        - Greatest("start_at", Value(since, output_field=DateTimeField())),
        output_field=DurationField(),
    )
    rows = list(
        Allocation.objects.filter(start_at__lt=now, end_at__gt=since)
        .order_by()
        .values("lease__user_id", "lease__user__username")
        .annotate(held=Sum(held))
        .order_by("-held", "lease__user_id")[:TOP_USERS]
    )
    if is_operator(viewer) or is_finance(viewer):
        named = {row["lease__user_id"] for row in rows}
    else:
        named = set(
            Membership.objects.filter(
                team_id__in=teams_led_by(viewer),
                user_id__in=[row["lease__user_id"] for row in rows],
            ).values_list("user_id", flat=True)
        )
        named.add(viewer.pk)
    return [
        {
            "label": row["lease__user__username"]
            if row["lease__user_id"] in named
            else _("user #%(rank)d") % {"rank": rank},
            "hours": row["held"].total_seconds() / 3600 if row["held"] else 0.0,
            "is_me": row["lease__user_id"] == viewer.pk,
        }
        for rank, row in enumerate(rows, start=1)
    ]


# How far ahead the dashboard looks for a free card of a fully busy model.
NEXT_FREE_WITHIN = timedelta(days=60)


def next_free(now: datetime, model_ids) -> dict[int, datetime | None]:
    """When one card of each model is free for FREE_FOR, per the model's one picture of the
    future (``scheduler.picture``: held, reserved, planned for waiting leases, maintenance):
    the first such stretch from *now* within NEXT_FREE_WITHIN, None if there is none.

    For the dashboard's fully busy models; a few queries per model.
    """
    out = {}
    for model_id in model_ids:
        future = model_picture(model_id, start=now, end=now + NEXT_FREE_WITHIN, now=now)
        out[model_id] = future.next_free(1, FREE_FOR, after=now) if future.cards else None
    return out


# --- charts ----------------------------------------------------------------------------------


def _local(hours: list[datetime], now: datetime) -> list[str]:
    """Each hour's end (the moment its level is read), in the viewer's time zone."""
    ends = [min(h + timedelta(hours=1), now) for h in hours]
    return [charts.local_time(t) for t in ends]


def _line(colour: str | None) -> dict:
    return {"shape": "hv", "color": colour} if colour else {"shape": "hv"}


def utilisation_chart(x, series: dict[str, list[float]], colour_of: dict[str, str]) -> str:
    """One chart for the whole pool: the share of each model's cards held, hour by hour (a
    line per model, in the model's colour), instead of a stacked chart per model."""
    fig = go.Figure()
    for name, points in series.items():
        fig.add_scatter(
            x=x, y=points, name=escape(name), mode="lines", line=_line(colour_of.get(name))
        )
    fig.update_yaxes(range=[0, 100], ticksuffix="%")
    _numeric_dates(fig)
    return charts.render(fig, y_title=_("cards held"), height=300, titled=True)


def _numeric_dates(fig: go.Figure) -> None:
    """Time axes in numbers only (12-01 09:00), never month names in English on a Chinese
    page (plotly.js writes "Dec 1" whatever the page's language)."""
    fig.update_xaxes(tickformat="%m-%d %H:%M", hoverformat="%Y-%m-%d %H:%M")


def queue_chart(x, series: dict[str, list[int]], colour_of: dict[str, str]) -> str:
    fig = go.Figure()
    for name, points in sorted(series.items()):
        fig.add_scatter(
            x=x, y=points, name=escape(name), mode="lines", line=_line(colour_of.get(name))
        )
    _numeric_dates(fig)
    return charts.render(
        fig, y_title=_("leases waiting"), height=260, titled=True, y_from_zero=True
    )


def wait_chart(series: dict[str, list[int]], colour_of: dict[str, str]) -> str:
    labels = [
        _("< 1 min"),
        _("1–5 min"),
        _("5–15 min"),
        _("15–60 min"),
        _("1–4 h"),
        _("4–24 h"),
        _("> 24 h"),
    ]
    fig = go.Figure()
    for name, counts in sorted(series.items()):
        fig.add_bar(x=labels, y=counts, name=escape(name), marker_color=colour_of.get(name))
    fig.update_xaxes(type="category")
    return charts.render(
        fig, y_title=_("leases"), height=260, stack=True, titled=True, y_from_zero=True
    )


def top_users_chart(rows: list[dict]) -> str:
    rows = list(reversed(rows))  # plotly draws horizontal bars bottom-up
    fig = go.Figure()
    fig.add_bar(
        x=[round(r["hours"], 1) for r in rows],
        y=[escape(r["label"]) for r in rows],
        orientation="h",
        marker={"color": ["#f59e0b" if r["is_me"] else "#2563eb" for r in rows]},
        showlegend=False,
    )
    fig.update_yaxes(type="category")
    return charts.render(fig, y_title="", height=60 + 28 * max(len(rows), 1), titled=True)


@login_required
def pool(request):
    """Pool utilisation, queue length and waits over the last 7 days; top users over 30."""
    now = timezone.now()
    totals = dict(
        Card.objects.in_service().order_by().values_list("card_model_id").annotate(n=Count("pk"))
    )
    models = list(
        CardModel.objects.filter(pk__in=list(totals))
        .order_by("vendor", "-memory_gb", "name")
        .values("pk", "name", "slug")
    )
    ids = [m["pk"] for m in models]
    names = {m["pk"]: m["name"] for m in models}
    slugs = {m["pk"]: m["slug"] for m in models}
    every_colour = model_colours()
    colour_of = {names[i]: every_colour[i] for i in ids if i in every_colour}
    hours = _hour_starts(now)
    x = _local(hours, now)
    held = held_per_hour(now, hours, ids)
    down = down_now(now, ids)
    queue = queue_per_hour(now, hours, ids)
    waits = queue_waits(now, ids)
    users = top_users(now, request.user)
    shares = {
        names[i]: [round(100 * h / totals[i], 1) if totals.get(i) else 0.0 for h in held[i]]
        for i in ids
    }
    free_now = dict(card_models_with_counts(now).filter(pk__in=ids).values_list("pk", "available"))
    rows = [
        {
            "name": names[i],
            "slug": slugs[i],
            "total": totals.get(i, 0),
            "held": held[i][-1],
            "free": free_now.get(i, 0),
            "down": down.get(i, 0),
            "waiting": queue[i][-1],
            "share_7d": round(sum(shares[names[i]]) / len(hours)) if hours else 0,
        }
        for i in ids
    ]
    in_service = sum(r["total"] for r in rows)
    summary = {
        "total": in_service,
        "held": sum(r["held"] for r in rows),
        "free": sum(r["free"] for r in rows),
        "down": sum(r["down"] for r in rows),
        "waiting": sum(r["waiting"] for r in rows),
        "share_7d": round(sum(sum(held[i]) for i in ids) * 100 / (in_service * len(hours)))
        if in_service
        else 0,
        "nodes_out": Node.objects.exclude(status=Node.Status.ACTIVE).count(),
    }
    context = {
        "health": health_selectors.health_summary(now),
        "summary": summary,
        "rows": rows,
        "utilisation": utilisation_chart(x, shares, colour_of) if ids else "",
        "queue_chart": queue_chart(x, {names[i]: queue[i] for i in ids}, colour_of) if ids else "",
        "wait_chart": wait_chart({names[i]: waits[i] for i in waits}, colour_of) if waits else "",
        "users_chart": top_users_chart(users) if users else "",
        "days": HOURS // 24,
        "top_days": TOP_USERS_DAYS,
        "names_shown": is_operator(request.user) or is_finance(request.user),
        # Operators resolve these (retry, or mark done by hand) on each lease's page.
        "releases_failed": (
            list(lease_selectors.releases_failed()[:FAILED_RELEASES_SHOWN])
            if is_operator(request.user)
            else []
        ),
    }
    return render(request, "portal/pool.html", context)
