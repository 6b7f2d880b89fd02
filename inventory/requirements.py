"""What a request may require of the cards it gets: one declaration, three shapes.

``REQUIREMENTS`` lists each requirement once — its name, label, kind of value and what it
selects. The catalogue's and the requests' FilterSet (``inventory.filters``), the forms'
fields (``form_field``: the request form, the estimate page) and the API's ``requirements``
object (``inventory.serializers``: the lease and estimate APIs) are all built from it, so a
new requirement is one entry here and a new key works everywhere at once.

Two kinds of requirement:

* of the **card model** (vendor, memory, precision, interconnect, software stack): they
  choose which models may be used;
* of the **node** (region, network, minimum installed version of the stack): they choose
  which cards of a model a lease may be placed on — ``nodes_meeting`` is that one rule, read
  by the planner's snapshot, the SQL fast path, the preview and the advisor.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from django import forms
from django.db.models import Model, Q
from django.utils.functional import Promise
from django.utils.translation import gettext_lazy as _

from inventory.models import (
    Card,
    InterconnectKind,
    Node,
    Precision,
    Region,
    StackFamily,
    Vendor,
)

# The spec-sheet field that holds the peak figure for each precision.
PRECISION_FIELDS: dict[str, str] = {
    Precision.FP64: "fp64_tflops",
    Precision.FP32: "fp32_tflops",
    Precision.TF32: "tf32_tflops",
    Precision.FP16: "fp16_tflops",
    Precision.BF16: "bf16_tflops",
    Precision.FP8: "fp8_tflops",
    Precision.INT8: "int8_tops",
}

VERSION_PATTERN = r"^[0-9A-Za-z][0-9A-Za-z.\-_+]{0,39}$"


@dataclass(frozen=True)
class Requirement:
    """One thing a request may require. *kind*: ``choice`` (of *choices*), ``number``
    (at least 0), ``version`` (a version string) or ``region`` (a region's slug)."""

    name: str
    label: Promise
    kind: str
    on: str  # "model": chooses card models; "node": chooses the nodes a lease may use
    help_text: Promise
    choices: tuple[tuple[str, Any], ...] = ()
    model_q: Callable[[Any], Q] | None = None  # model requirements: the CardModel filter


REQUIREMENTS: tuple[Requirement, ...] = (
    Requirement(
        "vendor",
        _("Vendor"),
        "choice",
        "model",
        _("Only cards of this vendor."),
        tuple(Vendor.choices),
        lambda v: Q(vendor=v),
    ),
    Requirement(
        "min_memory_gb",
        _("Memory per card at least (GB)"),
        "number",
        "model",
        _("Each card has at least this much memory."),
        (),
        lambda v: Q(memory_gb__gte=v),
    ),
    Requirement(
        "precision",
        _("Must support precision"),
        "choice",
        "model",
        _("The spec sheet lists a figure for this precision."),
        tuple(Precision.choices),
        lambda v: Q(**{f"{PRECISION_FIELDS[v]}__isnull": False}),
    ),
    Requirement(
        "interconnect",
        _("Interconnect"),
        "choice",
        "model",
        _("The card-to-card link inside a node."),
        tuple(InterconnectKind.choices),
        lambda v: Q(interconnect_kind=v),
    ),
    Requirement(
        "stack",
        _("Software stack"),
        "choice",
        "model",
        _("Your code runs on this stack only (CUDA, CANN…): other cards are never used."),
        tuple(StackFamily.choices),
        lambda v: Q(stack_family=v),
    ),
    Requirement(
        "min_stack_version",
        _("Stack version at least"),
        "version",
        "node",
        _("Only nodes with at least this version of the stack installed (e.g. 12.2, 8.0.RC2)."),
    ),
    Requirement(
        "region",
        _("Region"),
        "region",
        "node",
        _("Only nodes in this region (or a region inside it)."),
    ),
    Requirement(
        "network",
        _("Node network"),
        "choice",
        "node",
        _("Only nodes on this network (for leases across nodes)."),
        tuple(Node.Network.choices),
    ),
)

BY_NAME: dict[str, Requirement] = {r.name: r for r in REQUIREMENTS}
NODE_KEYS = frozenset(r.name for r in REQUIREMENTS if r.on == "node")


def form_field(req: Requirement) -> forms.Field:
    """The forms' shape of one requirement (the request form, the estimate page)."""
    common = {"label": req.label, "required": False, "help_text": req.help_text}
    if req.kind == "choice":
        return forms.ChoiceField(choices=[("", "—"), *req.choices], **common)
    if req.kind == "number":
        return forms.DecimalField(min_value=0, max_digits=7, decimal_places=1, **common)
    if req.kind == "version":
        return forms.RegexField(
            VERSION_PATTERN,
            max_length=40,
            error_messages={"invalid": _("Enter a version such as 12.2.")},
            **common,
        )
    return forms.ModelChoiceField(
        queryset=Region.objects.order_by("slug"), to_field_name="slug", empty_label="—", **common
    )


# --- values ------------------------------------------------------------------------------


def stored(values: Mapping[str, Any]) -> dict[str, Any]:
    """*values* as a lease keeps them (JSON): known keys, empty ones left out, numbers as
    floats, a region as its slug."""
    out: dict[str, Any] = {}
    for key, value in values.items():
        if value in (None, ""):
            continue
        if isinstance(value, Decimal):
            value = float(value)
        elif isinstance(value, Model):
            value = getattr(value, "slug", value.pk)
        out[key] = value
    return out


def version_key(version: str) -> tuple:
    """A sortable key for a version string: ``8.0.RC2 < 8.0 = 8.0.0 < 8.0.1 < 24.04``.

    Numbers compare as numbers; a pre-release word (alpha, beta, rc, dev…) sorts before the
    release it precedes; missing parts count as 0.
    """
    parts: list[tuple[int, Any]] = []
    for token in re.findall(r"\d+|[a-z]+", str(version).lower()):
        parts.append((2, int(token)) if token.isdigit() else (0, token))
    return tuple(parts)


def version_at_least(installed: str | None, wanted: str) -> bool:
    if not installed:
        return False
    have, want = list(version_key(installed)), list(version_key(wanted))
    length = max(len(have), len(want))
    have += [(2, 0)] * (length - len(have))
    want += [(2, 0)] * (length - len(want))
    return have >= want


def installed_version(software_versions: Mapping[str, Any], stack: str) -> str | None:
    """The node's installed version of *stack* (keys matched without case: ``cuda``,
    ``CUDA``), or None."""
    for key, value in (software_versions or {}).items():
        if str(key).lower() == stack:
            return str(value)
    return None


# --- the one "which nodes" rule --------------------------------------------------------


def region_subtree(slug: str) -> list[int]:
    """The ids of the region named *slug* and every region inside it (none if unknown)."""
    rows = list(Region.objects.values_list("pk", "parent_id", "slug"))
    parents = {pk: parent for pk, parent, _slug in rows}
    root = next((pk for pk, _parent, name in rows if name == slug), None)
    if root is None:
        return []
    out = []
    for pk in parents:
        walk: int | None = pk
        while walk is not None:
            if walk == root:
                out.append(pk)
                break
            walk = parents.get(walk)
    return out


def nodes_meeting(requirements: Mapping[str, Any] | None) -> frozenset[int] | None:
    """The ids of the nodes a lease with *requirements* may use; None: any node.

    ``region`` keeps the region and the regions inside it; ``network`` the nodes on that
    network; ``min_stack_version`` (with ``stack``) the nodes whose installed version of
    the stack (``Node.software_versions``) is at least that. A node that does not say which
    version it has does not meet a minimum version.
    """
    wanted = {k: v for k, v in (requirements or {}).items() if k in NODE_KEYS and v}
    if not wanted:
        return None
    nodes = Node.objects.all()
    if "region" in wanted:
        nodes = nodes.filter(region_id__in=region_subtree(str(wanted["region"])))
    if "network" in wanted:
        nodes = nodes.filter(network_kind=wanted["network"])
    if "min_stack_version" not in wanted:
        return frozenset(nodes.values_list("pk", flat=True))
    stack = str((requirements or {}).get("stack") or "")
    return frozenset(
        pk
        for pk, versions in nodes.values_list("pk", "software_versions")
        if version_at_least(installed_version(versions, stack), str(wanted["min_stack_version"]))
    )


def models_with_cards_on(node_ids: Iterable[int]) -> Q:
    """Card models with cards in service on those nodes (a CardModel filter)."""
    held = Card.objects.in_service().filter(node_id__in=list(node_ids))
    return Q(pk__in=held.values("card_model_id"))


def requirement_errors(values: Mapping[str, Any]) -> dict[str, str]:
    """What is wrong with the requirements taken together (each value is checked by its
    field): a minimum version means nothing without the stack it is a version of."""
    if values.get("min_stack_version") and not values.get("stack"):
        return {"min_stack_version": str(_("Name the software stack this is a version of."))}
    return {}


def model_q(requirements: Mapping[str, Any]) -> Q:
    """The CardModel filter of the model requirements in *requirements* (values cleaned)."""
    q = Q()
    for key, value in requirements.items():
        req = BY_NAME.get(key)
        if req is not None and req.model_q is not None and value not in (None, ""):
            q &= req.model_q(value)
    return q
