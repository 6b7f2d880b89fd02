"""Browser pages for the inventory: the catalogue of card models, a model's spec sheet, nodes."""

from __future__ import annotations

from dataclasses import dataclass

from django import forms
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.db.models import F, OrderBy
from django.http import HttpRequest, HttpResponse, QueryDict
from django.shortcuts import get_object_or_404, render
from django.utils import timezone
from django.utils.functional import Promise
from django.utils.translation import gettext_lazy as _

from inventory import selectors
from inventory.models import Card, CardModel, InterconnectKind, Node, Precision, Region, Vendor

NODES_PER_PAGE = 50
NODES_ON_MODEL_PAGE = 50


# --- Filter forms ---------------------------------------------------------------------
# Bad values never raise: an invalid field is reported on the form and left out of the filter.


class CatalogueFilterForm(forms.Form):
    vendor = forms.ChoiceField(
        label=_("Vendor"), required=False, choices=[("", _("All vendors")), *Vendor.choices]
    )
    min_memory = forms.DecimalField(
        label=_("Memory at least (GB)"),
        required=False,
        min_value=0,
        max_digits=7,
        decimal_places=1,
        widget=forms.NumberInput(attrs={"step": "any"}),
    )
    precision = forms.ChoiceField(
        label=_("Supports precision"),
        required=False,
        choices=[("", _("Any precision")), *Precision.choices],
    )
    interconnect = forms.ChoiceField(
        label=_("Interconnect"),
        required=False,
        choices=[("", _("Any interconnect")), *InterconnectKind.choices],
    )


class NodeFilterForm(forms.Form):
    region = forms.ModelChoiceField(
        label=_("Region"),
        required=False,
        queryset=Region.objects.all(),
        to_field_name="slug",
        empty_label=_("All regions"),
    )
    status = forms.ChoiceField(
        label=_("Status"), required=False, choices=[("", _("Any status")), *Node.Status.choices]
    )
    model = forms.ModelChoiceField(
        label=_("Card model"),
        required=False,
        queryset=CardModel.objects.all(),
        to_field_name="slug",
        empty_label=_("All card models"),
    )


def _valid_filters(form: forms.Form) -> dict:
    """The fields that passed validation (``cleaned_data`` keeps only those), empty ones dropped."""
    form.is_valid()
    return {k: v for k, v in form.cleaned_data.items() if v not in (None, "")}


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
    *(
        Column(p.value, p.label, selectors.PRECISION_FIELDS[p.value], group=THROUGHPUT)
        for p in Precision
    ),
    Column("interconnect", _("Interconnect"), "interconnect_gbs", numeric=False, sep=True),
    Column("tdp", _("TDP (W)"), "tdp_w", desc_first=False),
    Column("available", _("Free now / total"), "available"),
    Column("software", _("Software stack"), "software_stack", numeric=False, desc_first=False),
    Column("price", _("Price (¥/card-hour)"), "price_per_hour", desc_first=False),
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
    form = CatalogueFilterForm(request.GET)
    filters = _valid_filters(form)
    models = selectors.card_models_with_counts(
        timezone.now(),
        vendor=filters.get("vendor"),
        min_memory_gb=filters.get("min_memory"),
        precision=filters.get("precision"),
        interconnect=filters.get("interconnect"),
    )
    column, descending = _parse_sort(request.GET.get("sort"))
    if column is not None:
        models = models.order_by(*_sort_order(column, descending))
    rows = list(models)
    for cm in rows:
        cm.throughput = [
            (p.value, getattr(cm, selectors.PRECISION_FIELDS[p.value])) for p in Precision
        ]
    highlight = filters.get("precision", "")
    header_top, header_sub = _headers(request.GET, column, descending, highlight)
    filter_query = request.GET.copy()
    filter_query.pop("sort", None)
    return render(
        request,
        "inventory/catalogue.html",
        {
            "form": form,
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
    card_model = get_object_or_404(selectors.card_models_with_counts(now), slug=slug)
    nodes = selectors.nodes_with_counts(now, card_model=card_model)
    shown = list(nodes[: NODES_ON_MODEL_PAGE + 1])
    throughput = [
        (p.label, "TOPS" if p == Precision.INT8 else "TFLOPS", getattr(card_model, field))
        for p in Precision
        for field in [selectors.PRECISION_FIELDS[p.value]]
    ]
    return render(
        request,
        "inventory/card_model.html",
        {
            "cm": card_model,
            "throughput": throughput,
            "nodes": shown[:NODES_ON_MODEL_PAGE],
            "more_nodes": len(shown) > NODES_ON_MODEL_PAGE,
        },
    )


@login_required
def node_list(request: HttpRequest) -> HttpResponse:
    """Nodes with their region, status and cards free now; filter by region, status, model."""
    form = NodeFilterForm(request.GET)
    filters = _valid_filters(form)
    region = filters.get("region")
    nodes = selectors.nodes_with_counts(
        timezone.now(),
        region=region.slug if region else None,
        status=filters.get("status"),
        card_model=filters.get("model"),
    )
    page = Paginator(nodes, NODES_PER_PAGE).get_page(request.GET.get("page"))
    page_query = request.GET.copy()
    page_query.pop("page", None)
    return render(
        request,
        "inventory/node_list.html",
        {"form": form, "page": page, "page_query": page_query.urlencode()},
    )


@login_required
def node_detail(request: HttpRequest, hostname: str) -> HttpResponse:
    """A node and its cards grouped by interconnect domain, each free or in use now."""
    now = timezone.now()
    node = get_object_or_404(Node.objects.select_related("region"), hostname=hostname)
    takes_leases = node.status == Node.Status.ACTIVE or (
        node.status == Node.Status.DRAINING and node.drain_at is not None and node.drain_at > now
    )
    domains = []
    totals = {"cards": 0, "available": 0, "busy": 0}
    for number, cards in selectors.node_cards_by_domain(node, now):
        for card in cards:
            card.is_free = (
                takes_leases and card.status == Card.Status.OK and card.busy_until is None
            )
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
    return render(
        request,
        "inventory/node.html",
        {"node": node, "domains": domains, "totals": totals, "takes_leases": takes_leases},
    )
