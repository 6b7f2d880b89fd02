"""What cards exist: regions, nodes, card models (spec sheets) and the cards themselves."""

from __future__ import annotations

import ipaddress
import uuid
from datetime import datetime

from django.core.exceptions import ValidationError
from django.core.validators import RegexValidator
from django.db import models
from django.db.models import Q
from django.utils.translation import gettext_lazy as _

from inventory.choices import StackFamily  # noqa: F401  (defined there: a leaf portal may import)


class Vendor(models.TextChoices):
    NVIDIA = "nvidia", "NVIDIA"
    HUAWEI = "huawei", _("Huawei Ascend")
    CAMBRICON = "cambricon", _("Cambricon")
    HYGON = "hygon", _("Hygon DCU")
    KUNLUNXIN = "kunlunxin", _("Kunlunxin")
    ILUVATAR = "iluvatar", _("Iluvatar CoreX")
    MOORE_THREADS = "moorethreads", _("Moore Threads")
    METAX = "metax", _("MetaX")
    AMD = "amd", "AMD"
    OTHER = "other", _("Other")


# The environment variable each vendor's runtime reads to pick devices; a card model may override.
VISIBLE_DEVICES_ENV = {
    Vendor.NVIDIA: "CUDA_VISIBLE_DEVICES",
    Vendor.HUAWEI: "ASCEND_RT_VISIBLE_DEVICES",
    Vendor.CAMBRICON: "MLU_VISIBLE_DEVICES",
    Vendor.HYGON: "HIP_VISIBLE_DEVICES",
    Vendor.KUNLUNXIN: "XPU_VISIBLE_DEVICES",
    Vendor.ILUVATAR: "CUDA_VISIBLE_DEVICES",
    Vendor.MOORE_THREADS: "MUSA_VISIBLE_DEVICES",
    Vendor.METAX: "CUDA_VISIBLE_DEVICES",
    Vendor.AMD: "HIP_VISIBLE_DEVICES",
    Vendor.OTHER: "VISIBLE_DEVICES",
}


class InterconnectKind(models.TextChoices):
    NVLINK = "nvlink", "NVLink"
    HCCS = "hccs", "HCCS"
    XGMI = "xgmi", "xGMI / Infinity Fabric"
    MLULINK = "mlulink", "MLU-Link"
    XLINK = "xlink", _("XLink / vendor link")
    PCIE = "pcie", "PCIe"


class Precision(models.TextChoices):
    FP64 = "fp64", "FP64"
    FP32 = "fp32", "FP32"
    TF32 = "tf32", "TF32"
    FP16 = "fp16", "FP16"
    BF16 = "bf16", "BF16"
    FP8 = "fp8", "FP8"
    INT8 = "int8", "INT8"


# A hostname as RFC 1123 has it (labels of letters, digits and hyphens, not starting or ending
# with a hyphen, at most 63 characters each, 253 in all), with "_" allowed inside a label as CMDBs
# and Slurm use it. It is the key in the node page's URL: "/", spaces and the like never fit.
_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9])?"
_hostname_validator = RegexValidator(
    regex=rf"\A(?!.{{254}}){_LABEL}(?:\.{_LABEL})*\Z",
    message=_(
        "This is not a valid hostname: use letters, digits, hyphens and dots, "
        "at most 63 characters between dots."
    ),
    code="invalid_hostname",
)


def validate_hostname(value: str) -> None:
    """Node.hostname's validator (a function, so migrations refer to it by name)."""
    _hostname_validator(value)


def new_card_uuid() -> str:
    return f"CARD-{uuid.uuid4()}"


class Region(models.Model):
    """A place cards live in; regions nest (centre → province → edge)."""

    class Kind(models.TextChoices):
        CENTRE = "centre", _("Centre")
        PROVINCE = "province", _("Province")
        EDGE = "edge", _("Edge")

    name = models.CharField(_("name"), max_length=100)
    slug = models.SlugField(_("slug"), max_length=60, unique=True)
    kind = models.CharField(_("kind"), max_length=16, choices=Kind.choices, default=Kind.CENTRE)
    parent = models.ForeignKey(
        "self",
        verbose_name=_("parent"),
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="children",
    )
    energy_price_kwh = models.DecimalField(
        _("energy price per kWh (site currency)"),
        max_digits=6,
        decimal_places=3,
        null=True,
        blank=True,
        help_text=_(
            "Electricity price in this region; the task advisor weighs it. Empty: unknown."
        ),
    )

    class Meta:
        ordering = ["slug"]
        verbose_name = _("region")
        verbose_name_plural = _("regions")

    def __str__(self) -> str:
        return self.name


class CardModel(models.Model):
    """The spec sheet (规格单) of an accelerator model: what a card of this kind is good for."""

    vendor = models.CharField(_("vendor"), max_length=20, choices=Vendor.choices)
    name = models.CharField(_("name"), max_length=100)
    slug = models.SlugField(_("slug"), max_length=60, unique=True)
    architecture = models.CharField(_("architecture"), max_length=60, blank=True)
    family = models.SlugField(
        _("family"),
        max_length=60,
        blank=True,
        help_text=_("Models of one family can be resized into each other."),
    )
    form_factor = models.CharField(_("form factor"), max_length=40, blank=True)
    memory_gb = models.DecimalField(_("memory (GB)"), max_digits=7, decimal_places=1)
    memory_bandwidth_gbs = models.PositiveIntegerField(
        _("memory bandwidth (GB/s)"), null=True, blank=True
    )
    fp64_tflops = models.DecimalField(
        "FP64 TFLOPS", max_digits=8, decimal_places=1, null=True, blank=True
    )
    fp32_tflops = models.DecimalField(
        "FP32 TFLOPS", max_digits=8, decimal_places=1, null=True, blank=True
    )
    tf32_tflops = models.DecimalField(
        "TF32 TFLOPS", max_digits=8, decimal_places=1, null=True, blank=True
    )
    fp16_tflops = models.DecimalField(
        "FP16 TFLOPS", max_digits=8, decimal_places=1, null=True, blank=True
    )
    bf16_tflops = models.DecimalField(
        "BF16 TFLOPS", max_digits=8, decimal_places=1, null=True, blank=True
    )
    fp8_tflops = models.DecimalField(
        "FP8 TFLOPS", max_digits=8, decimal_places=1, null=True, blank=True
    )
    int8_tops = models.DecimalField(
        "INT8 TOPS", max_digits=8, decimal_places=1, null=True, blank=True
    )
    interconnect_kind = models.CharField(
        _("interconnect"),
        max_length=16,
        choices=InterconnectKind.choices,
        default=InterconnectKind.PCIE,
    )
    interconnect_gbs = models.PositiveIntegerField(_("interconnect (GB/s)"), null=True, blank=True)
    tdp_w = models.PositiveIntegerField(_("power (TDP, W)"), null=True, blank=True)
    software_stack = models.CharField(_("software stack"), max_length=60, blank=True)
    stack_family = models.CharField(
        _("stack family"),
        max_length=16,
        choices=StackFamily.choices,
        default=StackFamily.OTHER,
        db_default=StackFamily.OTHER,  # rows written by older code (the 0002 migration)
        help_text=_("The software stack programs for this card are built with (CUDA, CANN…)."),
    )
    graphics = models.BooleanField(
        _("graphics-capable"),
        default=False,
        db_default=False,
        help_text=_("Has a graphics pipeline (rasterisation, ray tracing; OpenGL/Vulkan/DirectX)."),
    )
    price_per_hour = models.DecimalField(
        _("price per card-hour"),
        max_digits=10,
        decimal_places=2,
        default=0,
        help_text=_("Default price in the site's currency (CARDPOOL_CURRENCY)."),
    )
    visible_devices_env = models.CharField(
        _("visible-devices variable"),
        max_length=40,
        blank=True,
        help_text=_("Leave empty to use the vendor's default (e.g. CUDA_VISIBLE_DEVICES)."),
    )
    source_url = models.URLField(_("datasheet"), max_length=300, blank=True)
    notes = models.TextField(_("notes"), blank=True)

    class Meta:
        ordering = ["vendor", "-memory_gb", "name"]
        verbose_name = _("card model")
        verbose_name_plural = _("card models")
        constraints = [
            models.CheckConstraint(condition=Q(memory_gb__gt=0), name="cardmodel_memory_positive"),
            models.CheckConstraint(
                condition=Q(price_per_hour__gte=0), name="cardmodel_price_not_negative"
            ),
        ]

    def __str__(self) -> str:
        return self.name

    @property
    def devices_env(self) -> str:
        return self.visible_devices_env or VISIBLE_DEVICES_ENV.get(self.vendor, "VISIBLE_DEVICES")

    def supports(self, precision: str) -> bool:
        """Whether the spec sheet lists a figure for that precision."""
        field = f"{precision}_tops" if precision == "int8" else f"{precision}_tflops"
        return getattr(self, field, None) is not None


# --- the one "usable card" rule --------------------------------------------------------
# A card can hold a lease over [start, end) when it is healthy and its node takes leases
# then: active, or draining with the drain at or after the end (after the start when the
# end is not known: the planner then cuts the window at the drain), and whose readings are
# sound (``Card.health``: not hot past the operators' threshold, its node not silent; set by
# the pool-health rules in ``leasing.health``). Placement, the fast
# path, the catalogue's free counts, the pool page and /metrics all use this one rule.


def node_takes_leases_q(start: datetime, end: datetime | None = None, prefix: str = "node__") -> Q:
    """Nodes (through *prefix*) that can hand out cards over [start, end)."""
    drain = {f"{prefix}drain_at__gte": end} if end is not None else {f"{prefix}drain_at__gt": start}
    return Q(**{f"{prefix}status": Node.Status.ACTIVE}) | Q(
        **{f"{prefix}status": Node.Status.DRAINING}, **drain
    )


class CardQuerySet(models.QuerySet):
    def in_service(self) -> CardQuerySet:
        """Cards the pool counts (not retired), whether or not they can take a lease now."""
        return self.exclude(status=Card.Status.RETIRED)

    def unhealthy(self) -> CardQuerySet:
        """Cards kept out of placement by their readings alone (running hot, their node
        silent: ``Card.health``), not by an operator: they come back on their own."""
        return self.filter(status=Card.Status.OK).exclude(health=Card.Health.OK)

    def usable(self, start: datetime, end: datetime | None = None) -> CardQuerySet:
        """Cards that can hold a lease over [start, end): healthy (not faulty, and neither
        running hot nor on a node that stopped reporting: ``Card.health``), on a node taking
        leases."""
        return self.filter(status=Card.Status.OK, health=Card.Health.OK).filter(
            node_takes_leases_q(start, end)
        )


def validate_session_addresses(value) -> None:
    """A list of at most 16 IP addresses (what an operator records for a node's sessions)."""
    if not isinstance(value, list) or len(value) > 16:
        raise ValidationError(_("Give a list of at most 16 IP addresses."))
    for item in value:
        try:
            ipaddress.ip_address(str(item))
        except ValueError:
            raise ValidationError(
                _("“%(value)s” is not an IP address.") % {"value": str(item)[:64]}
            ) from None


class Node(models.Model):
    """A server holding cards."""

    class Status(models.TextChoices):
        ACTIVE = "active", _("Active")
        DRAINING = "draining", _("Draining")
        MAINTENANCE = "maintenance", _("Maintenance")
        OFFLINE = "offline", _("Offline")

    class Network(models.TextChoices):
        INFINIBAND = "ib", "InfiniBand"
        ROCE = "roce", "RoCE"
        ETHERNET = "ethernet", _("Ethernet")

    hostname = models.CharField(
        _("hostname"), max_length=253, unique=True, validators=[validate_hostname]
    )
    region = models.ForeignKey(
        Region, verbose_name=_("region"), on_delete=models.PROTECT, related_name="nodes"
    )
    status = models.CharField(
        _("status"), max_length=16, choices=Status.choices, default=Status.ACTIVE
    )
    drain_at = models.DateTimeField(
        _("drain at"),
        null=True,
        blank=True,
        help_text=_("While draining, no lease may run past this time."),
    )
    network_kind = models.CharField(
        _("network"), max_length=16, choices=Network.choices, default=Network.ETHERNET
    )
    network_gbps = models.PositiveIntegerField(_("network (Gbps)"), null=True, blank=True)
    cpu_cores = models.PositiveIntegerField(_("CPU cores"), null=True, blank=True)
    memory_gb = models.PositiveIntegerField(_("host memory (GB)"), null=True, blank=True)
    driver_version = models.CharField(_("driver version"), max_length=60, blank=True)
    software_versions = models.JSONField(_("software versions"), default=dict, blank=True)
    labels = models.JSONField(_("labels"), default=dict, blank=True)
    # What this node's cardpool-agent --sessions says it can run: {"can": [...], "gl": ...,
    # "at": ISO time}; {} = no agent has reported (leasing.workbench.offers).
    session_offers = models.JSONField(_("session offers"), default=dict, blank=True)
    agent_token_hash = models.CharField(
        _("agent token (hash)"),
        max_length=128,
        blank=True,
        editable=False,
        db_index=True,  # looked up on every telemetry post
        help_text=_("SHA-256 of the token the node agent sends telemetry with."),
    )
    dcgm_url = models.URLField(
        _("DCGM exporter URL"),
        max_length=300,
        blank=True,
        help_text=_(
            "Pull telemetry from this Prometheus endpoint (e.g. http://node:9400/metrics)."
        ),
    )
    telemetry_seen_at = models.DateTimeField(_("telemetry last seen"), null=True, blank=True)
    session_addresses = models.JSONField(
        _("session addresses"),
        default=list,
        blank=True,
        validators=[validate_session_addresses],
        help_text=_(
            "Addresses the node's sessions may listen on besides those its hostname resolves "
            'to (a list of IP addresses, e.g. ["10.0.0.5"]).'
        ),
    )
    external_id = models.CharField(
        _("external id"),
        max_length=120,
        blank=True,
        help_text=_("The id in the CMDB this node was imported from."),
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["hostname"]
        verbose_name = _("node")
        verbose_name_plural = _("nodes")
        constraints = [
            models.CheckConstraint(
                condition=~Q(status="draining") | Q(drain_at__isnull=False),
                name="node_draining_has_drain_at",
            ),
        ]

    def __str__(self) -> str:
        return self.hostname

    def takes_leases(self, start: datetime, end: datetime | None = None) -> bool:
        """Whether the node can hand out cards over [start, end) (the rule above, in Python)."""
        if self.status == self.Status.ACTIVE:
            return True
        if self.status != self.Status.DRAINING or self.drain_at is None:
            return False
        return self.drain_at >= end if end is not None else self.drain_at > start


class Card(models.Model):
    """One physical accelerator in a node."""

    class Status(models.TextChoices):
        OK = "ok", _("OK")
        FAULTY = "faulty", _("Faulty")
        RETIRED = "retired", _("Retired")

    node = models.ForeignKey(
        Node, verbose_name=_("node"), on_delete=models.CASCADE, related_name="cards"
    )
    card_model = models.ForeignKey(
        CardModel, verbose_name=_("card model"), on_delete=models.PROTECT, related_name="cards"
    )
    index = models.PositiveSmallIntegerField(_("index on node"))
    uuid = models.CharField(_("UUID"), max_length=80, unique=True, default=new_card_uuid)
    interconnect_domain = models.PositiveSmallIntegerField(
        _("interconnect domain"),
        default=0,
        help_text=_("Cards sharing an NVLink/HCCS island in the node share a domain number."),
    )

    class Health(models.TextChoices):
        """What the card's readings say (set by the pool-health rules, never by hand): a card
        that is not ``ok`` takes no new lease until it recovers."""

        OK = "ok", _("Readings normal")
        HOT = "hot", _("Too hot")
        UNKNOWN = "unknown", _("Node silent")

    status = models.CharField(_("status"), max_length=16, choices=Status.choices, default=Status.OK)
    health_note = models.CharField(_("health"), max_length=200, blank=True)
    health = models.CharField(
        _("readings"), max_length=16, choices=Health.choices, default=Health.OK, editable=False
    )

    objects = CardQuerySet.as_manager()

    class Meta:
        ordering = ["node__hostname", "index"]
        verbose_name = _("card")
        verbose_name_plural = _("cards")
        constraints = [
            models.UniqueConstraint(fields=["node", "index"], name="card_unique_index_per_node")
        ]
        indexes = [models.Index(fields=["card_model", "status"])]

    def __str__(self) -> str:
        return f"{self.node.hostname}#{self.index}"


class CardSample(models.Model):
    """One telemetry reading of a card (kept short-term; summarised into CardHourly)."""

    card = models.ForeignKey(Card, on_delete=models.CASCADE, related_name="samples")
    at = models.DateTimeField()
    utilization_pct = models.FloatField(null=True, blank=True)
    memory_used_mb = models.FloatField(null=True, blank=True)
    temperature_c = models.FloatField(null=True, blank=True)
    power_w = models.FloatField(null=True, blank=True)

    class Meta:
        verbose_name = _("card sample")
        verbose_name_plural = _("card samples")
        indexes = [models.Index(fields=["card", "at"], name="cardsample_card_at_idx")]
        constraints = [
            models.UniqueConstraint(fields=["card", "at"], name="cardsample_unique_card_at")
        ]

    def __str__(self) -> str:
        return f"card {self.card_id} at {self.at:%Y-%m-%d %H:%M:%S}"


class CardHourly(models.Model):
    """Long-term telemetry: one summary row per card and hour."""

    card = models.ForeignKey(Card, on_delete=models.CASCADE, related_name="hourly")
    hour = models.DateTimeField()
    samples = models.PositiveIntegerField(default=0)
    utilization_avg = models.FloatField(null=True, blank=True)
    utilization_max = models.FloatField(null=True, blank=True)
    memory_used_max_mb = models.FloatField(null=True, blank=True)
    temperature_max_c = models.FloatField(null=True, blank=True)
    power_avg_w = models.FloatField(null=True, blank=True)
    power_max_w = models.FloatField(null=True, blank=True)

    class Meta:
        verbose_name = _("hourly card reading")
        verbose_name_plural = _("hourly card readings")
        constraints = [
            models.UniqueConstraint(fields=["card", "hour"], name="cardhourly_unique_card_hour")
        ]

    def __str__(self) -> str:
        return f"card {self.card_id} {self.hour:%Y-%m-%d %H}:00"
