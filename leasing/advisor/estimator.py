"""How much accelerator memory a task needs: a pure estimate, no database.

A task profile ("fine-tune a 7B model with LoRA in bf16") becomes a per-replica breakdown
(weights, gradients, optimizer state, activations or KV cache, overhead) with the formula
behind each number, so the user can check it. The formulas and their sources are in
``docs/estimator.md``; the short version:

* weights = P × bytes per parameter (2 for bf16/fp16, 1 for int8/fp8, ½ for int4);
* mixed-precision Adam = 16 bytes per trained parameter (weights 2 + gradients 2 + FP32
  master copy, momentum and variance 12) — ZeRO (Rajbhandari et al. 2020);
* the model shape is derived from P: P ≈ 12·L·h² (Kaplan et al. 2020) with h = 128·L;
* activations per layer = 34·s·b·h bytes in 16 bits (Korthikanti et al. 2022 with
  FlashAttention, which keeps no s² score matrix); with gradient checkpointing only each
  layer's input (2·s·b·h) is kept, plus one layer's working set during the backward pass;
* KV cache = 2 × L × h × s × b × 2 bytes (full multi-head attention: an upper bound);
* overhead = 20 % of the rest, at least 1 GB (runtime context, workspaces, fragmentation).

GB here are 10⁹ bytes.

One module of some 600 lines on purpose: every formula sits beside its task profile and its
source, and docs/estimator.md walks through this file top to bottom; split, a reader would
have to follow one number across files.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from decimal import Decimal

from django.db import models
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

GB = 1e9

# Shape of a dense decoder-only transformer derived from its parameter count.
HIDDEN_PER_LAYER = 128  # h = 128·L: Llama-2 7B (32 × 4096) and 13B (40 × 5120) exactly
ACTIVATION_FACTOR = 34  # bytes per s·b·h per layer in 16 bits (Korthikanti et al. 2022)
LORA_MATRIX_FACTOR = 18  # LoRA on q, k, v, o (4 × 2h) and an MLP of width 4h (2 × 5h)
NF4_BYTES = 0.5 + 0.127 / 8  # QLoRA: 4-bit NormalFloat + double-quantized constants
OVERHEAD_RATIO = 0.2  # EleutherAI: "total inference memory ≈ 1.2 × model memory"
MIN_OVERHEAD_BYTES = 1 * GB  # CUDA/CANN context and libraries on every card


class Task(models.TextChoices):
    PRETRAINING = "pretraining", gettext_lazy("Pre-training")
    FULL_FINETUNE = "full_finetune", gettext_lazy("Full fine-tuning")
    LORA = "lora", gettext_lazy("LoRA fine-tuning")
    QLORA = "qlora", gettext_lazy("QLoRA fine-tuning")
    INFERENCE = "inference", gettext_lazy("Inference / serving")
    RENDERING = "rendering", gettext_lazy("Rendering / simulation")


class ModelPrecision(models.TextChoices):
    FP32 = "fp32", "FP32"
    BF16 = "bf16", "BF16"
    FP16 = "fp16", "FP16"
    FP8 = "fp8", "FP8"
    INT8 = "int8", "INT8"
    INT4 = "int4", "INT4"


class Optimizer(models.TextChoices):
    ADAM = "adam", "Adam / AdamW"
    ADAM_8BIT = "adam_8bit", gettext_lazy("8-bit Adam")
    SGD = "sgd", gettext_lazy("SGD with momentum")
    ADAFACTOR = "adafactor", "Adafactor"


TRAINING_TASKS = frozenset({Task.PRETRAINING, Task.FULL_FINETUNE, Task.LORA, Task.QLORA})

# Bytes per stored weight.
WEIGHT_BYTES = {"fp32": 4.0, "bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "int8": 1.0, "int4": 0.5}

# Optimizer state per trained parameter: (mixed precision, incl. the FP32 master copy; pure FP32).
OPTIMIZER_BYTES = {
    Optimizer.ADAM: (12, 8),
    Optimizer.ADAM_8BIT: (6, 2),
    Optimizer.SGD: (8, 4),
    Optimizer.ADAFACTOR: (4, 0),  # factored second moments: O(rows + cols), taken as 0
}

ALLOWED_PRECISIONS = {
    Task.PRETRAINING: ("fp32", "bf16", "fp16", "fp8"),
    Task.FULL_FINETUNE: ("fp32", "bf16", "fp16", "fp8"),
    Task.LORA: ("fp32", "bf16", "fp16", "fp8", "int8"),
    Task.QLORA: ("bf16", "fp16", "fp32", "int4"),
    Task.INFERENCE: ("fp32", "bf16", "fp16", "fp8", "int8", "int4"),
    Task.RENDERING: ("fp32",),
}

DEFAULT_PRECISION = {task: "fp32" if task == Task.RENDERING else "bf16" for task in Task.values}
DEFAULT_SEQ_LEN = {Task.INFERENCE: 4096}  # training tasks: 2048
DEFAULT_BATCH = {Task.INFERENCE: 2}  # training tasks: 4 sequences per micro-batch

LIMITS = {
    "params_b": (0.001, 10_000),
    "seq_len": (1, 1_048_576),
    "batch": (1, 4096),
    "lora_rank": (1, 1024),
    "scene_gb": (0.01, 10_000),
}


class EstimateError(ValueError):
    """A profile that cannot be estimated; ``errors`` maps field names to messages."""

    def __init__(self, errors: dict[str, str]):
        super().__init__("; ".join(f"{k}: {v}" for k, v in errors.items()))
        self.errors = errors


@dataclass(frozen=True)
class TaskProfile:
    """What the user wants to run. ``None`` means "the default for the task"."""

    task: str
    params_b: float | None = None
    precision: str | None = None
    seq_len: int | None = None
    batch: int | None = None
    optimizer: str = Optimizer.ADAM
    checkpointing: bool = True
    lora_rank: int = 16
    scene_gb: float | None = None

    def __post_init__(self) -> None:
        for name in ("params_b", "scene_gb"):  # forms and serializers hand in Decimals
            value = getattr(self, name)
            if isinstance(value, Decimal | int) and not isinstance(value, bool):
                object.__setattr__(self, name, float(value))
        errors = _check(self)
        if errors:
            raise EstimateError(errors)

    @property
    def is_training(self) -> bool:
        return self.task in TRAINING_TASKS

    def resolved(self) -> TaskProfile:
        """The profile with every default filled in."""
        training = self.is_training
        precision = self.precision or DEFAULT_PRECISION[self.task]
        if self.task == Task.QLORA and precision == "int4":
            precision = "bf16"  # the base is 4-bit anyway; int4 here means "the usual QLoRA"
        if self.task == Task.RENDERING:
            return replace(self, precision=precision, seq_len=None, batch=None)
        return replace(
            self,
            precision=precision,
            seq_len=self.seq_len or DEFAULT_SEQ_LEN.get(self.task, 2048),
            batch=self.batch or DEFAULT_BATCH.get(self.task, 4),
            optimizer=self.optimizer if training else Optimizer.ADAM,
            checkpointing=self.checkpointing if training else False,
        )

    def summary(self) -> str:
        """One line naming the task, e.g. "QLoRA fine-tuning, 7B, BF16"."""
        p = self.resolved()
        if p.task == Task.RENDERING:
            return _("%(task)s, scene %(gb)s GB") % {
                "task": Task(p.task).label,
                "gb": _num(p.scene_gb or 0),
            }
        return _("%(task)s, %(params)sB, %(precision)s") % {
            "task": Task(p.task).label,
            "params": _num(p.params_b or 0),
            "precision": (p.precision or "").upper(),
        }


def _check(p: TaskProfile) -> dict[str, str]:
    errors: dict[str, str] = {}
    if p.task not in Task.values:
        return {
            "task": _("Unknown task “%(value)s”; choose one of: %(choices)s.")
            % {"value": p.task, "choices": ", ".join(Task.values)}
        }
    if p.task == Task.RENDERING:
        if p.scene_gb is None:
            errors["scene_gb"] = _(
                "Give the scene's size in GB (geometry and textures the renderer loads)."
            )
    elif p.params_b is None:
        errors["params_b"] = _("Give the model size in billions of parameters (e.g. 7).")
    for name, (low, high) in LIMITS.items():
        value = getattr(p, name)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int | float) or math.isnan(value):
            errors[name] = _("Enter a number.")
        elif not low <= value <= high:
            errors[name] = _("Enter a value between %(low)s and %(high)s.") % {
                "low": _num(low),
                "high": _num(high),
            }
    if p.precision is not None:
        allowed = ALLOWED_PRECISIONS[p.task]
        if p.precision not in allowed:
            errors["precision"] = _precision_error(p.task, p.precision, allowed)
    if p.optimizer not in Optimizer.values:
        errors["optimizer"] = _("Unknown optimizer “%(value)s”; choose one of: %(choices)s.") % {
            "value": p.optimizer,
            "choices": ", ".join(Optimizer.values),
        }
    return errors


def _precision_error(task: str, precision: str, allowed: tuple[str, ...]) -> str:
    choices = ", ".join(allowed)
    if task in (Task.PRETRAINING, Task.FULL_FINETUNE) and precision in ("int8", "int4"):
        return _(
            "Training updates the weights, so it runs in %(choices)s; INT8/INT4 are for "
            "inference, or for the frozen base model of LoRA/QLoRA."
        ) % {"choices": choices}
    if task == Task.LORA and precision == "int4":
        return _("A 4-bit base model is QLoRA: choose the QLoRA task.")
    return _("%(task)s runs in %(choices)s, not %(precision)s.") % {
        "task": Task(task).label,
        "choices": choices,
        "precision": precision,
    }


@dataclass(frozen=True)
class Part:
    """One line of the breakdown: what it is, how big, and the arithmetic."""

    key: str
    label: str
    bytes: float
    formula: str

    @property
    def gb(self) -> float:
        return self.bytes / GB


BREAKDOWN_KEYS = ("weights", "gradients", "optimizer", "activations", "kv_cache", "scene")


@dataclass(frozen=True)
class Estimate:
    """Memory per replica (one copy of the model, or one renderer) and how it was reached."""

    profile: TaskProfile  # resolved: no defaults left
    parts: tuple[Part, ...]  # without the overhead
    overhead: Part
    layers: int | None
    hidden: int | None
    trainable_params: float
    required_precision: str  # the spec-sheet figure a card must publish
    notes: tuple[str, ...] = field(default=())

    @property
    def subtotal_bytes(self) -> float:
        return sum(part.bytes for part in self.parts)

    @property
    def total_bytes(self) -> float:
        return self.subtotal_bytes + self.overhead.bytes

    @property
    def total_gb(self) -> float:
        return self.total_bytes / GB

    @property
    def all_parts(self) -> tuple[Part, ...]:
        return (*self.parts, self.overhead)

    @property
    def breakdown(self) -> dict[str, float]:
        """GB per part, every key present (0 where it does not apply)."""
        out = dict.fromkeys(BREAKDOWN_KEYS, 0.0)
        for part in self.parts:
            out[part.key] = part.gb
        out["overhead"] = self.overhead.gb
        out["total"] = self.total_gb
        return out

    @property
    def splits(self) -> bool:
        """Whether the replica can be spread over several cards (a renderer cannot)."""
        return self.profile.task != Task.RENDERING

    @property
    def needs_fast_link(self) -> bool:
        """Training across cards exchanges gradients every step; PCIe is too slow for it."""
        return self.profile.is_training

    def per_card_bytes(self, cards: int) -> float:
        """Memory on each of *cards* cards holding one replica between them.

        Everything shards evenly (ZeRO-3/FSDP for the model states, tensor parallelism for
        activations and KV cache); each card keeps its own overhead.
        """
        if cards < 1 or (cards > 1 and not self.splits):
            raise ValueError(f"cannot spread this replica over {cards} cards")
        share = self.subtotal_bytes / cards
        return share + overhead_bytes(share)

    @property
    def formula(self) -> str:
        """The sum, in words."""
        return _("total = %(parts)s") % {
            "parts": " + ".join(part.label for part in self.all_parts),
        }


def overhead_bytes(subtotal: float) -> float:
    return max(OVERHEAD_RATIO * subtotal, MIN_OVERHEAD_BYTES)


def model_shape(params: float) -> tuple[int, int]:
    """Layers and hidden size of a dense transformer of *params* parameters.

    P ≈ 12·L·h² (Kaplan et al. 2020, embeddings left out) with h ≈ 128·L; L is rounded and
    h recomputed from P, so L·h never falls as P grows.
    """
    layers = max(1, round((params / (12 * HIDDEN_PER_LAYER**2)) ** (1 / 3)))
    hidden = max(1, round(math.sqrt(params / (12 * layers))))
    return layers, hidden


def estimate(profile: TaskProfile) -> Estimate:
    """Memory needed per replica for *profile*, broken down, with the formulas used."""
    p = profile.resolved()
    if p.task == Task.RENDERING:
        return _estimate_rendering(p)
    if p.task == Task.INFERENCE:
        return _estimate_inference(p)
    return _estimate_training(p)


# --- the three kinds of task ---------------------------------------------------------------


def _estimate_inference(p: TaskProfile) -> Estimate:
    params = (p.params_b or 0) * 1e9
    layers, hidden = model_shape(params)
    wbytes = WEIGHT_BYTES[p.precision or "bf16"]
    kv_bytes = 4 if p.precision == "fp32" else 2
    seq, batch = p.seq_len or 1, p.batch or 1
    weights = Part(
        "weights",
        _("Weights"),
        params * wbytes,
        _("P × bytes per weight = %(p)s × %(b)s B (%(precision)s) = %(gb)s GB")
        % {
            "p": _params(params),
            "b": _num(wbytes),
            "precision": _up(p),
            "gb": _gb(params * wbytes),
        },
    )
    kv = 2 * layers * hidden * seq * batch * kv_bytes
    kv_cache = Part(
        "kv_cache",
        _("KV cache"),
        kv,
        _(
            "2 (K and V) × L × h × s × b × %(b)s B = 2 × %(L)s × %(h)s × %(s)s × %(batch)s × %(b)s B = %(gb)s GB"
        )
        % {"L": layers, "h": hidden, "s": seq, "batch": batch, "b": kv_bytes, "gb": _gb(kv)},
    )
    notes = [
        _shape_note(layers, hidden),
        _(
            "The KV cache assumes full multi-head attention; models with grouped-query "
            "attention (Llama 2 70B, Llama 3, Qwen 2) need 4–8 × less. It is kept in 16 bits."
        ),
    ]
    if p.precision in ("int8", "int4"):
        notes.append(
            _("%(precision)s weights are quantized (e.g. GPTQ, AWQ, SmoothQuant) before serving.")
            % {"precision": _up(p)}
        )
    return _finish(p, (weights, kv_cache), layers, hidden, 0.0, notes)


def _estimate_training(p: TaskProfile) -> Estimate:
    params = (p.params_b or 0) * 1e9
    layers, hidden = model_shape(params)
    precision = p.precision or "bf16"
    full32 = precision == "fp32"
    half = 4.0 if full32 else 2.0  # bytes of a trained weight, gradient and activation
    notes = [_shape_note(layers, hidden)]
    if p.task in (Task.PRETRAINING, Task.FULL_FINETUNE):
        trainable = params
        wb = half
        weights = Part(
            "weights",
            _("Weights"),
            params * wb,
            _("P × %(b)s B = %(p)s × %(b)s B = %(gb)s GB")
            % {"p": _params(params), "b": _num(wb), "gb": _gb(params * wb)},
        )
        if precision == "fp8":
            notes.append(
                _(
                    "FP8 training (Transformer Engine) keeps BF16 weights and FP32 master "
                    "weights; it buys speed, not memory, so it is counted as BF16."
                )
            )
    else:
        trainable = min(params, LORA_MATRIX_FACTOR * p.lora_rank * hidden * layers)
        adapter = trainable * half
        if p.task == Task.QLORA:
            base_b, base_name = NF4_BYTES, "NF4"
        else:
            base_b, base_name = WEIGHT_BYTES[precision], precision.upper()
        base = params * base_b
        weights = Part(
            "weights",
            _("Weights (frozen base + adapters)"),
            base + adapter,
            _(
                "P × %(bb)s B (%(base)s) + adapters 18 × r × h × L × %(ab)s B = %(p)s × %(bb)s B + "
                "18 × %(r)s × %(h)s × %(L)s × %(ab)s B = %(gb)s GB"
            )
            % {
                "bb": _num(base_b),
                "base": base_name,
                "ab": _num(half),
                "p": _params(params),
                "r": p.lora_rank,
                "h": hidden,
                "L": layers,
                "gb": _gb(base + adapter),
            },
        )
        notes.append(
            _(
                "LoRA rank %(r)s on every linear layer: %(n)s trainable parameters "
                "(%(pct)s %% of the model)."
            )
            % {"r": p.lora_rank, "n": _params(trainable), "pct": _num(100 * trainable / params)}
        )
        if p.task == Task.QLORA:
            notes.append(
                _(
                    "QLoRA stores the base in 4-bit NormalFloat with double quantization "
                    "(0.5 B + 0.127 bit per parameter) and computes in %(precision)s."
                )
                % {"precision": precision.upper()}
            )
    gradients = Part(
        "gradients",
        _("Gradients"),
        trainable * half,
        _("trained parameters × %(b)s B = %(n)s × %(b)s B = %(gb)s GB")
        % {"n": _params(trainable), "b": _num(half), "gb": _gb(trainable * half)},
    )
    mixed_b, fp32_b = OPTIMIZER_BYTES[Optimizer(p.optimizer)]
    ob = fp32_b if full32 else mixed_b
    optimizer = Part(
        "optimizer",
        _("Optimizer state"),
        trainable * ob,
        _("trained parameters × %(b)s B (%(opt)s, %(how)s) = %(n)s × %(b)s B = %(gb)s GB")
        % {
            "b": ob,
            "opt": Optimizer(p.optimizer).label,
            "how": _("FP32") if full32 else _("mixed precision, with the FP32 master copy"),
            "n": _params(trainable),
            "gb": _gb(trainable * ob),
        },
    )
    activations = _activations(p, layers, hidden, half)
    if p.checkpointing:
        notes.append(
            _(
                "Gradient checkpointing on: each layer's input is kept and one layer is "
                "recomputed at a time (slower by about a third, far less memory)."
            )
        )
    else:
        notes.append(_("Gradient checkpointing off: every layer's activations are kept."))
    notes.append(
        _(
            "Attention is FlashAttention-style (no s × s score matrix is stored); the "
            "batch is the micro-batch of one replica."
        )
    )
    return _finish(
        p, (weights, gradients, optimizer, activations), layers, hidden, trainable, notes
    )


def _activations(p: TaskProfile, layers: int, hidden: int, elem_bytes: float) -> Part:
    seq, batch = p.seq_len or 1, p.batch or 1
    k = elem_bytes / 2  # the 34 bytes per s·b·h are for 16-bit activations; FP32 doubles them
    sbh = seq * batch * hidden
    full = ACTIVATION_FACTOR * sbh * layers * k
    kept = (2 * layers + ACTIVATION_FACTOR) * sbh * k
    values = {"L": layers, "s": seq, "batch": batch, "h": hidden, "k": _num(k)}
    if p.checkpointing and kept < full:
        formula = _(
            "(2 × L + 34) × s × b × h × %(k)s B = (2 × %(L)s + 34) × %(s)s × %(batch)s × "
            "%(h)s × %(k)s B = %(gb)s GB"
        ) % {**values, "gb": _gb(kept)}
        return Part("activations", _("Activations"), kept, formula)
    formula = _(
        "34 × s × b × h × L × %(k)s B = 34 × %(s)s × %(batch)s × %(h)s × %(L)s × %(k)s B = %(gb)s GB"
    ) % {**values, "gb": _gb(full)}
    return Part("activations", _("Activations"), full, formula)


def _estimate_rendering(p: TaskProfile) -> Estimate:
    scene = (p.scene_gb or 0) * GB
    part = Part(
        "scene",
        _("Scene (geometry, textures)"),
        scene,
        _("as given: %(gb)s GB") % {"gb": _gb(scene)},
    )
    notes = [
        _(
            "A GPU renderer keeps the whole scene on every card; more cards render more "
            "frames, they do not hold a bigger scene."
        )
    ]
    return _finish(p, (part,), None, None, 0.0, notes)


def _finish(
    p: TaskProfile,
    parts: tuple[Part, ...],
    layers: int | None,
    hidden: int | None,
    trainable: float,
    notes: list[str],
) -> Estimate:
    subtotal = sum(part.bytes for part in parts)
    over = overhead_bytes(subtotal)
    overhead = Part(
        "overhead",
        _("Overhead"),
        over,
        _(
            "max(20 %% of the rest, 1 GB) for the runtime context, workspaces and "
            "fragmentation = max(0.2 × %(sub)s GB, 1 GB) = %(gb)s GB"
        )
        % {"sub": _gb(subtotal), "gb": _gb(over)},
    )
    return Estimate(
        profile=p,
        parts=parts,
        overhead=overhead,
        layers=layers,
        hidden=hidden,
        trainable_params=trainable,
        required_precision=required_precision(p),
        notes=tuple(notes),
    )


def required_precision(p: TaskProfile) -> str:
    """The spec-sheet figure (a ``inventory.models.Precision`` value) the card must publish.

    INT4 weights are dequantized to FP16 for the matrix multiply, so INT4 needs FP16; FP8
    training is counted as BF16 for memory but still needs FP8 units.
    """
    precision = p.precision or DEFAULT_PRECISION[p.task]
    if precision == "int4":
        return "fp16"
    return precision


# --- formatting ---------------------------------------------------------------------------


def _num(value: float) -> str:
    """A number for people: at most three significant decimals, no trailing zeros."""
    if value >= 100:
        return f"{value:,.0f}"
    return f"{value:.3g}"


def _gb(nbytes: float) -> str:
    gb = nbytes / GB
    return f"{gb:,.1f}" if gb >= 10 else f"{gb:.2f}"


def _params(n: float) -> str:
    if n >= 1e9:
        return f"{_num(n / 1e9)} × 10⁹"
    return f"{_num(n / 1e6)} × 10⁶"


def _up(p: TaskProfile) -> str:
    return (p.precision or "").upper()


def _shape_note(layers: int, hidden: int) -> str:
    return _(
        "Model shape from its size: %(L)s layers, hidden size %(h)s (P ≈ 12 × L × h², h ≈ 128 × L)."
    ) % {"L": layers, "h": hidden}
