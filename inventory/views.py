"""Browser pages for the inventory: the catalogue of card models, a model's spec sheet, nodes."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied, ValidationError
from django.core.paginator import Paginator
from django.db.models import F, OrderBy
from django.http import HttpRequest, HttpResponse, QueryDict
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.utils.functional import Promise
from django.utils.translation import gettext_lazy as _
from django.views.decorators.http import require_POST

from inventory.charts import readings_charts
from inventory.filters import CardModelFilterSet, NodeFilterSet
from inventory.forms import CardFaultyForm, DrainForm
from inventory.models import Card, Node, Precision
from inventory.requirements import PRECISION_FIELDS
from inventory.selectors import latest_readings
from leasing.billing import prices
from leasing.choices import Priority
from leasing.lifecycle import maintenance
from leasing.lifecycle.selectors import card_holders
from leasing.scheduler.availability import (
    card_models_with_counts,
    node_cards_by_domain,
    nodes_with_counts,
)
from leasing.scheduler.picture import PlannedSummary, planned_annotations
from portal.permissions import is_operator

NODES_PER_PAGE = 50
NODES_ON_MODEL_PAGE = 50


# --- Filters ----------------------------------------------------------------------------
# The FilterSets of inventory.filters, the same the API uses. Bad values never raise: an
# invalid field is reported on the form and left out of the filter.

# The catalogue's memory filter was called ``min_memory`` before the page and the API
# shared one FilterSet; links that still carry it keep working.
LEGACY_NAMES = {"min_memory": "min_memory_gb"}


def _bound(filterset_class, request: HttpRequest, queryset=None, defaults=None):
    """The FilterSet bound to the query string (old parameter names read as the new ones),
    *defaults* where the query string says nothing."""
    data = request.GET.copy()
    for name, value in (defaults or {}).items():
        data.setdefault(name, value)
    for old, new in LEGACY_NAMES.items():
        if old in data and new not in data and new in filterset_class.base_filters:
            data.setlist(new, data.getlist(old))
            del data[old]
    filterset = filterset_class(data, queryset=queryset)
    filterset.is_valid()
    return filterset


def _applied(filterset) -> dict:
    """The filters that passed validation and are not empty."""
    return {k: v for k, v in filterset.form.cleaned_data.items() if v not in (None, "")}


# --- Catalogue columns ----------------------------------------------------------------


@dataclass(frozen=True)
class Column:
    """A sortable column of the catalogue: ``?sort=<key>`` or ``?sort=-<key>``."""

    key: str
    label: str | Promise
    order_field: str
    numeric: bool = True
    group: str = ""
    # Bigger is better for most numbers, so their first click sorts descending.
    desc_first: bool = True
    # A rule on the left sets the column apart from the group before it.
    sep: bool = False


THROUGHPUT = "throughput"
COLUMNS: tuple[Column, ...] = (
    Column("name", _("Model"), "name", numeric=False, desc_first=False),
    Column("vendor", _("Vendor"), "vendor", numeric=False, desc_first=False),
    Column("memory", _("Memory (GB)"), "memory_gb"),
    Column("bandwidth", _("Bandwidth (GB/s)"), "memory_bandwidth_gbs"),
    *(Column(p.value, p.label, PRECISION_FIELDS[p.value], group=THROUGHPUT) for p in Precision),
    Column("interconnect", _("Interconnect"), "interconnect_gbs", numeric=False, sep=True),
    Column("tdp", _("TDP (W)"), "tdp_w", desc_first=False),
    Column("available", _("Free now / total"), "available"),
    Column("software", _("Software stack"), "software_stack", numeric=False, desc_first=False),
    # Sorted by the price in force for the reader (billing.prices), not the model's default.
    Column("price", _("Price per card-hour, now"), "price_now", desc_first=False),
)
COLUMNS_BY_KEY = {c.key: c for c in COLUMNS}


def _parse_sort(raw: str | None) -> tuple[Column | None, bool]:
    """``(column, descending)`` from ``?sort=``; anything not whitelisted means the default."""
    raw = (raw or "").strip()
    descending = raw.startswith("-")
    column = COLUMNS_BY_KEY.get(raw.removeprefix("-"))
    return (column, descending) if column else (None, False)


def _sort_order(column: Column, descending: bool) -> list[OrderBy | str]:
    expr = F(column.order_field)
    # Models without a figure ("—") go last whichever way the column is sorted.
    primary = expr.desc(nulls_last=True) if descending else expr.asc(nulls_last=True)
    return [primary, "name"]


def _headers(
    query: QueryDict, current: Column | None, descending: bool, highlight: str
) -> tuple[list[dict], list[dict]]:
    """The two header rows: ungrouped columns span both, the throughput group splits in two."""

    def cell(column: Column) -> dict:
        active = column is current
        if active:
            next_sort = column.key if descending else f"-{column.key}"
        else:
            next_sort = f"-{column.key}" if column.desc_first else column.key
        params = query.copy()
        params["sort"] = next_sort
        return {
            "column": column,
            "url": f"?{params.urlencode()}",
            "sort": ("descending" if descending else "ascending") if active else "",
            "hl": column.key == highlight,
        }

    top: list[dict] = []
    sub: list[dict] = []
    for column in COLUMNS:
        if not column.group:
            top.append({"rowspan": 2, **cell(column)})
            continue
        if not sub:
            top.append({"colspan": 0, "group_label": _("Peak throughput (TFLOPS; INT8 in TOPS)")})
        top[-1]["colspan"] += 1
        sub.append(cell(column))
    return top, sub


# --- Pages ----------------------------------------------------------------------------


@login_required
def catalogue(request: HttpRequest) -> HttpResponse:
    """Card models side by side on the numbers that matter, with what is free now."""
    # The page shows the models this pool has by default (the catalogue knows many more);
    # "every model" is one choice away. The API lists every model unless asked.
    now = timezone.now()
    filterset = _bound(
        CardModelFilterSet,
        request,
        card_models_with_counts(now),
        defaults={"pool": "in"},
    )
    filters = _applied(filterset)
    if filters.get("pool") == "in" and "pool" not in request.GET:
        del filters["pool"]  # the default is no filter the person set
    models = filterset.qs
    column, descending = _parse_sort(request.GET.get("sort"))
    by_price = column is not None and column.key == "price"
    if column is not None and not by_price:
        models = models.order_by(*_sort_order(column, descending))
    rows = list(models)
    # What a card-hour costs the reader's team now: the price the bill will use.
    priced = prices.prices_now(rows, team_id=prices.reader_team_id(request.user), at=now)
    for cm in rows:
        cm.price_now = priced[cm.pk]
    if by_price:
        rows.sort(key=lambda cm: cm.name)
        rows.sort(key=lambda cm: cm.price_now, reverse=descending)
    for cm in rows:
        cm.throughput = [(p.value, getattr(cm, PRECISION_FIELDS[p.value])) for p in Precision]
    highlight = filters.get("precision", "")
    header_top, header_sub = _headers(request.GET, column, descending, highlight)
    filter_query = request.GET.copy()
    filter_query.pop("sort", None)
    return render(
        request,
        "inventory/catalogue.html",
        {
            "form": filterset.form,
            "models": rows,
            "header_top": header_top,
            "header_sub": header_sub,
            "highlight": highlight,
            "sort": f"{'-' if descending else ''}{column.key}" if column else "",
            "filtered": bool(filters),
            "totals": {
                "models": len(rows),
                "cards": sum(cm.total for cm in rows),
                "available": sum(cm.available for cm in rows),
            },
        },
    )


@login_required
def card_model_detail(request: HttpRequest, slug: str) -> HttpResponse:
    """One model's spec sheet and the nodes that hold it."""
    now = timezone.now()
    # with what the queue's plan holds of its cards for waiting leases (same statement)
    card_model = get_object_or_404(
        card_models_with_counts(now).annotate(**planned_annotations()), slug=slug
    )
    nodes = nodes_with_counts(now, card_model=card_model)
    shown = list(nodes[: NODES_ON_MODEL_PAGE + 1])
    throughput = [
        (p.label, "TOPS" if p == Precision.INT8 else "TFLOPS", getattr(card_model, field))
        for p in Precision
        for field in [PRECISION_FIELDS[p.value]]
    ]
    team = prices.reader_team(request.user)
    book = prices.books_now([card_model], team_id=team.pk if team else None, at=now).for_model(
        card_model.pk
    )
    price = book.price_at(now)
    cheap = book.price_at(now, prices.discount_for(Priority.PREEMPTIBLE))
    return render(
        request,
        "inventory/card_model.html",
        {
            "cm": card_model,
            "price": price,
            "price_preemptible": cheap,
            "price_team": team.name if team and book.team_price_at(now) is not None else "",
            # cards free now may be planned for waiting leases (the queue's plan)
            "planned": card_model.planned_cards
            and PlannedSummary(card_model.planned_cards, card_model.planned_first),
            "throughput": throughput,
            "nodes": shown[:NODES_ON_MODEL_PAGE],
            "more_nodes": len(shown) > NODES_ON_MODEL_PAGE,
        },
    )


@login_required
def node_list(request: HttpRequest) -> HttpResponse:
    """Nodes with their region, status and cards free now; filter by region, status, model."""
    filterset = _bound(NodeFilterSet, request)
    # With a model chosen, the counts are of that model's cards only: the filters are applied
    # to the queryset built for that model.
    chosen = _applied(filterset).get("model")
    nodes = filterset.filter_queryset(nodes_with_counts(timezone.now(), card_model=chosen))
    page = Paginator(nodes, NODES_PER_PAGE).get_page(request.GET.get("page"))
    page_query = request.GET.copy()
    page_query.pop("page", None)
    return render(
        request,
        "inventory/node_list.html",
        {"form": filterset.form, "page": page, "page_query": page_query.urlencode()},
    )


READINGS_HOURS = 24  # the node page's charts
READINGS_FRESH = timedelta(minutes=5)  # a card's "now" readings on its tile
CHARTED_READINGS = ("temperature_c", "power_w", "memory_used_mb")


@login_required
def node_detail(request: HttpRequest, hostname: str) -> HttpResponse:
    """A node and its cards grouped by interconnect domain, each free or in use now."""
    now = timezone.now()
    node = get_object_or_404(Node.objects.select_related("region"), hostname=hostname)
    takes_leases = node.takes_leases(now)
    domains = []
    totals = {"cards": 0, "available": 0, "busy": 0}
    domains_cards = node_cards_by_domain(node, now)
    for number, cards in domains_cards:
        in_service = [c for c in cards if c.status != Card.Status.RETIRED]
        domain = {
            "number": number,
            "cards": cards,
            "interconnect": cards[0].card_model.get_interconnect_kind_display(),
            "total": len(in_service),
            "available": sum(c.is_free for c in cards),
            "busy": sum(c.busy_until is not None for c in cards),
        }
        domains.append(domain)
        totals["cards"] += domain["total"]
        totals["available"] += domain["available"]
        totals["busy"] += domain["busy"]
    all_cards = [card for _number, cards in domains_cards for card in cards]
    latest = latest_readings([c.pk for c in all_cards], now - READINGS_FRESH)
    for card in all_cards:
        card.latest = latest.get(card.pk)
    since = now - timedelta(hours=READINGS_HOURS)
    windows = [(card, since, now) for card in all_cards if card.status != Card.Status.RETIRED]
    operator = is_operator(request.user)
    holders = card_holders(node.pk, now)
    for domain in domains:
        for card in domain["cards"]:
            lease = holders.get(card.pk)
            # Operators see who holds each card; others see only that it is theirs.
            card.holder = (
                lease if lease and (operator or lease.user_id == request.user.pk) else None
            )
    return render(
        request,
        "inventory/node.html",
        {
            "node": node,
            "domains": domains,
            "totals": totals,
            "takes_leases": takes_leases,
            "kept_out": sum(c.health != Card.Health.OK for c in all_cards),
            "readings": readings_charts(
                windows, since, now, ("utilization_pct", *CHARTED_READINGS)
            ),
            "operator": operator,
            "drain_form": DrainForm(
                initial={
                    # The drain already set, else an hour from now.
                    "drain_at": timezone.localtime(
                        node.drain_at
                        if node.status == Node.Status.DRAINING and node.drain_at
                        else now + timedelta(hours=1)
                    ).replace(second=0, microsecond=0, tzinfo=None)
                }
            ),
            "can_undrain": node.status in (Node.Status.DRAINING, Node.Status.MAINTENANCE),
        },
    )


def _operator_run(request, action) -> None:
    try:
        action()
    except ValidationError as exc:
        for message in exc.messages:
            messages.error(request, message)
    except PermissionDenied as exc:
        messages.error(request, str(exc))


@login_required
@require_POST
def node_drain(request: HttpRequest, hostname: str) -> HttpResponse:
    """An operator drains the node at a chosen time (the maintenance service warns holders)."""
    node = get_object_or_404(Node, hostname=hostname)
    form = DrainForm(request.POST)
    if not form.is_valid():
        for errors in form.errors.values():
            for error in errors:
                messages.error(request, error)
        return redirect("inventory:node", hostname)

    def drain():
        at = form.cleaned_data["drain_at"]
        warned = maintenance.node_drain(user=request.user, node=node, drain_at=at)
        messages.success(request, maintenance.node_drain_said(node, at, warned))

    _operator_run(request, drain)
    return redirect("inventory:node", hostname)


@login_required
@require_POST
def node_undrain(request: HttpRequest, hostname: str) -> HttpResponse:
    node = get_object_or_404(Node, hostname=hostname)

    def undrain():
        maintenance.node_undrain(user=request.user, node=node)
        messages.success(request, _("Node %(node)s takes leases again.") % {"node": node.hostname})

    _operator_run(request, undrain)
    return redirect("inventory:node", hostname)


@login_required
@require_POST
def card_faulty(request: HttpRequest, hostname: str, index: int) -> HttpResponse:
    card = get_object_or_404(
        Card.objects.select_related("node"), node__hostname=hostname, index=index
    )
    form = CardFaultyForm(request.POST)
    note = form.cleaned_data["note"] if form.is_valid() else ""

    def mark():
        outcome = maintenance.card_mark_faulty(user=request.user, card=card, note=note)
        messages.success(
            request,
            _("Card %(card)s is faulty: %(outcome)s.")
            % {"card": card, "outcome": maintenance.FAULTY_OUTCOMES.get(outcome, outcome)},
        )

    _operator_run(request, mark)
    return redirect("inventory:node", hostname)
