"""How well a card model suits a task: pure arithmetic over the spec sheet, no database.

``docs/estimator.md`` ("The ranking") writes the same formulas out; the short version:

* **training, full fine-tuning** — the speed of each card at the task's precision, less the
  time spent exchanging weights and gradients between cards (ZeRO-3: 3 × 2 B × P per step,
  over the card-to-card link inside a node and the network between nodes):

      compute  = 6 · P · s · b / (peak FLOPS × MFU)
      exchange = 3 · 2P · (n−1)/n / link + 3 · 2P · (N−1)/N / network     (n cards, N nodes)
      speed    = 1 / (compute + exchange)   per card;   efficiency = compute / (compute + exchange)

  so a few fast, well-linked cards beat many slow ones;
* **inference** — decoding reads every weight and the KV cache for each token: the cards'
  memory bandwidth together (n × GB/s), and the memory left free for a longer KV cache;
* **LoRA, QLoRA** — the base is frozen and small jobs fit anywhere: the memory fit, and cost;
* **rendering** — only graphics-capable cards; FP32 throughput and memory bandwidth.

Each option's *fit* (0–1) is its figure over the best option's; then

    score = w_fit · fit + w_cost · (cheapest cost / cost) + w_start · start

with ``start`` 1 when the cards are free at the wanted time, else duration / (duration +
wait), and the weights per task in ``WEIGHTS``. A figure the spec sheet does not publish
counts as nothing (the option says so) rather than being guessed.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal

from django.utils.translation import gettext as _

from inventory.models import CardModel, InterconnectKind
from leasing.advisor.estimator import Estimate, Task

GB = 1e9
CARD_COUNTS = (1, 2, 4, 8)  # on one node: tensor-parallel sizes divide the head count
NODE_COUNTS = (2, 3, 4, 6, 8, 12, 16)  # whole nodes, for a plan across nodes
FAST_LINKS = frozenset(
    {
        InterconnectKind.NVLINK,
        InterconnectKind.HCCS,
        InterconnectKind.XGMI,
        InterconnectKind.MLULINK,
        InterconnectKind.XLINK,
    }
)
MFU = 0.4  # share of peak a training step reaches (Megatron-LM, PaLM report 40–55 %)
ZERO3_EXCHANGES = 3  # all-gather forward, all-gather backward, reduce-scatter gradients
# A link without a published figure: a PCIe slot counts as PCIe Gen4 x16 (32 GB/s each way);
# a card-to-card link (HCCS, MetaXLink…) as the slowest one published in the catalogue
# (MLU-Link, 200 GB/s both ways). Never faster than what is published for any card.
FALLBACK_PCIE_GBS = 32.0
FALLBACK_LINK_GBS = 100.0
TARGET_HEADROOM = {"inference": 0.3}  # the KV cache grows with traffic; others: 0.2
DEFAULT_HEADROOM = 0.2

# (fit, cost, start) per task: what the documents say matters most for each kind of job.
WEIGHTS: dict[str, tuple[float, float, float]] = {
    Task.PRETRAINING: (0.6, 0.15, 0.25),
    Task.FULL_FINETUNE: (0.6, 0.15, 0.25),
    Task.INFERENCE: (0.45, 0.2, 0.35),
    Task.LORA: (0.3, 0.3, 0.4),
    Task.QLORA: (0.3, 0.3, 0.4),
    Task.RENDERING: (0.45, 0.2, 0.35),
}


@dataclass(frozen=True)
class Shape:
    """*count* cards on *nodes* nodes; *network_gbps* links the nodes (None on one node)."""

    count: int
    nodes: int = 1
    network_gbps: int | None = None

    @property
    def per_node(self) -> int:
        return self.count // self.nodes


@dataclass(frozen=True)
class Fit:
    """The task's figure for one option, before it is compared with the others."""

    raw: float  # the task's measure (speed per card, GB/s, headroom…), larger is better
    memory_fit: float  # 0–1: headroom over the task's target
    efficiency: float | None  # training on several cards: share of time computing
    missing: str  # a figure the spec sheet does not publish, as a phrase ("" if none)
    basis: str  # the figures it rests on, as a phrase


def link_gbs(model: CardModel) -> float:
    """Card-to-card GB/s one way (vendors quote both ways together)."""
    if model.interconnect_gbs:
        return model.interconnect_gbs / 2
    if model.interconnect_kind == InterconnectKind.PCIE:
        return FALLBACK_PCIE_GBS
    return FALLBACK_LINK_GBS


def peak_flops(model: CardModel, precision: str) -> float:
    field = "int8_tops" if precision == "int8" else f"{precision}_tflops"
    value = getattr(model, field, None)
    return float(value) * 1e12 if value is not None else 0.0


def headroom_of(est: Estimate, model: CardModel, count: int) -> float:
    return 1 - est.per_card_bytes(count) / (float(model.memory_gb) * GB)


def fit_of(est: Estimate, model: CardModel, shape: Shape) -> Fit:
    """The task's measure for *shape* cards of *model* (see the module's formulas)."""
    task = est.profile.task
    headroom = headroom_of(est, model, shape.count)
    target = TARGET_HEADROOM.get(task, DEFAULT_HEADROOM)
    memory_fit = max(0.0, min(1.0, headroom / target))
    bw = model.memory_bandwidth_gbs
    if task in (Task.PRETRAINING, Task.FULL_FINETUNE):
        return _training_fit(est, model, shape, memory_fit)
    if task == Task.INFERENCE:
        raw = shape.count * float(bw or 0) * (0.7 + 0.3 * memory_fit)
        return Fit(
            raw,
            memory_fit,
            None,
            "" if bw else _("no published memory bandwidth (counted as 0)"),
            _("%(n)s × %(bw)s GB/s memory bandwidth") % {"n": shape.count, "bw": bw if bw else "?"},
        )
    if task == Task.RENDERING:
        fp32 = float(model.fp32_tflops or 0)
        missing = [] if bw else [_("no published memory bandwidth")]
        if not fp32:
            missing.append(_("no published FP32 figure"))
        return Fit(
            # FP32 TFLOPS and GB/s/10 are of the same order on today's cards
            (fp32 + float(bw or 0) / 10) * (0.75 + 0.25 * memory_fit),
            memory_fit,
            None,
            _(", ").join(missing),
            _("FP32 %(fp32)s TFLOPS, %(bw)s GB/s") % {"fp32": fp32 or "?", "bw": bw or "?"},
        )
    # LoRA / QLoRA: the memory fit is the figure; cost carries the rest.
    return Fit(memory_fit, memory_fit, None, "", "")


def _training_fit(est: Estimate, model: CardModel, shape: Shape, memory_fit: float) -> Fit:
    p = est.profile
    params = (p.params_b or 0) * 1e9
    tokens = (p.seq_len or 1) * (p.batch or 1)
    precision = est.required_precision
    flops = peak_flops(model, precision)
    compute = 6 * params * tokens / (flops * MFU) if flops else float("inf")
    volume = ZERO3_EXCHANGES * 2 * params  # 16-bit weights and gradients
    per_node = shape.per_node
    exchange = 0.0
    if per_node > 1:
        exchange += volume * (per_node - 1) / per_node / (link_gbs(model) * GB)
    if shape.nodes > 1:
        network = (shape.network_gbps or 10) / 8  # Gbps → GB/s, shared by the node's cards
        exchange += volume * (shape.nodes - 1) / shape.nodes / (network * GB)
    step = compute + exchange
    speed = 1 / step if step and step != float("inf") else 0.0
    efficiency = compute / step if shape.count > 1 and speed else None
    missing = []
    if shape.count > 1 and not model.interconnect_gbs:
        missing.append(
            _("no published link bandwidth (counted as %(gbs)s GB/s)")
            % {"gbs": f"{link_gbs(model) * 2:g}"}
        )
    link = InterconnectKind(model.interconnect_kind).label
    basis = _("%(precision)s %(tflops)s TFLOPS per card") % {
        "precision": precision.upper(),
        "tflops": f"{flops / 1e12:g}",
    }
    if shape.count > 1:
        basis += _(", %(link)s %(gbs)s GB/s between cards") % {
            "link": link,
            "gbs": f"{link_gbs(model) * 2:g}",
        }
    return Fit(
        speed * (0.75 + 0.25 * memory_fit), memory_fit, efficiency, _(", ").join(missing), basis
    )


def start_factor(wait: timedelta, duration: timedelta) -> float:
    """1 when free at the wanted time; waiting as long as the lease itself halves it."""
    if wait <= timedelta(0):
        return 1.0
    return duration / (duration + wait)


def score(task: str, fit: float, cost_ratio: float, start: float) -> float:
    w_fit, w_cost, w_start = WEIGHTS[task]
    return w_fit * fit + w_cost * cost_ratio + w_start * start


def cost_ratio(cheapest: Decimal, cost: Decimal) -> float:
    if cost <= 0:
        return 1.0
    return float(cheapest / cost)
