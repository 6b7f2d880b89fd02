"""The memory estimator: the seed's reference points, hand-computed cases, and properties."""

from __future__ import annotations

import pytest

from leasing.advisor.estimator import (
    GB,
    EstimateError,
    ModelPrecision,
    Task,
    TaskProfile,
    estimate,
    model_shape,
)

# --- the reference points of issue 7 --------------------------------------------------------


def test_7b_in_fp16_is_about_14_gb_of_weights():
    est = estimate(TaskProfile(task="inference", params_b=7, precision="fp16"))
    assert est.breakdown["weights"] == pytest.approx(14.0)


def test_7b_inference_needs_20_gb_or_more_with_the_kv_cache():
    est = estimate(TaskProfile(task="inference", params_b=7, precision="fp16"))
    assert est.breakdown["kv_cache"] > 0
    assert est.total_gb >= 20


def test_7b_full_fine_tuning_in_mixed_precision_with_adam_needs_more_than_one_80_gb_card():
    est = estimate(TaskProfile(task="full_finetune", params_b=7, precision="bf16"))
    b = est.breakdown
    # 16 bytes per parameter: weights 2 + gradients 2 + FP32 master, momentum, variance 12.
    assert b["weights"] + b["gradients"] + b["optimizer"] == pytest.approx(7 * 16)
    assert est.total_gb >= 80
    assert est.per_card_bytes(1) > 80 * GB


def test_7b_qlora_fits_one_24_gb_card():
    est = estimate(TaskProfile(task="qlora", params_b=7))
    assert est.per_card_bytes(1) <= 24 * GB * 0.95
    assert est.breakdown["weights"] < 4  # 4-bit base


# --- hand-computed cases ------------------------------------------------------------------


def test_model_shape_from_size_is_close_to_llama():
    # Llama 2: 7B is 32 × 4096, 13B 40 × 5120, 70B 80 × 8192.
    assert model_shape(7e9) == (33, 4204)
    assert model_shape(13e9) == (40, 5204)
    assert model_shape(70e9) == (71, 9064)


def test_70b_bf16_inference_by_hand():
    est = estimate(
        TaskProfile(task="inference", params_b=70, precision="bf16", seq_len=4096, batch=1)
    )
    layers, hidden = 71, 9064  # (70e9 / (12 × 128²))^⅓ = 70.9 → 71; √(70e9 / (12 × 71)) = 9064
    weights = 70e9 * 2
    kv = 2 * layers * hidden * 4096 * 1 * 2  # K and V, 16 bits
    total = (weights + kv) * 1.2
    assert (est.layers, est.hidden) == (layers, hidden)
    assert est.breakdown["weights"] == pytest.approx(140.0)
    assert est.breakdown["kv_cache"] == pytest.approx(kv / 1e9)
    assert est.breakdown["kv_cache"] == pytest.approx(10.54, abs=0.01)
    assert est.total_bytes == pytest.approx(total)
    assert est.total_gb == pytest.approx(180.65, abs=0.01)
    assert est.breakdown["gradients"] == est.breakdown["optimizer"] == 0
    kv_part = next(p for p in est.parts if p.key == "kv_cache")
    assert "2 × 71 × 9064 × 4096 × 1 × 2 B" in kv_part.formula
    assert est.required_precision == "bf16"
    # Over two cards each holds half, plus its own overhead.
    assert est.per_card_bytes(2) == pytest.approx((weights + kv) / 2 * 1.2)


def test_13b_lora_by_hand():
    est = estimate(
        TaskProfile(task="lora", params_b=13, precision="bf16", seq_len=2048, batch=4, lora_rank=16)
    )
    layers, hidden = 40, 5204
    lora = 18 * 16 * hidden * layers  # rank 16 on q, k, v, o and a 4h MLP: 59,950,080
    assert est.trainable_params == lora == 59_950_080
    weights = 13e9 * 2 + lora * 2
    gradients = lora * 2
    optimizer = lora * 12
    activations = (2 * layers + 34) * 2048 * 4 * hidden  # checkpointing on (the default)
    subtotal = weights + gradients + optimizer + activations
    assert est.breakdown["weights"] == pytest.approx(weights / 1e9)
    assert est.breakdown["gradients"] == pytest.approx(0.12, abs=0.001)
    assert est.breakdown["optimizer"] == pytest.approx(0.72, abs=0.001)
    assert est.breakdown["activations"] == pytest.approx(activations / 1e9)
    assert est.total_bytes == pytest.approx(subtotal * 1.2)
    assert est.total_gb == pytest.approx(38.18, abs=0.01)


def test_1b_pre_training_by_hand():
    est = estimate(
        TaskProfile(
            task="pretraining",
            params_b=1,
            precision="bf16",
            seq_len=2048,
            batch=8,
            checkpointing=False,
        )
    )
    layers, hidden = 17, 2214
    activations = 34 * 2048 * 8 * hidden * layers  # every layer's activations kept
    subtotal = 1e9 * (2 + 2 + 12) + activations
    assert (est.layers, est.hidden) == (layers, hidden)
    assert est.breakdown["activations"] == pytest.approx(activations / 1e9)
    assert est.total_bytes == pytest.approx(subtotal * 1.2)
    assert est.total_gb == pytest.approx(44.36, abs=0.01)
    with_checkpointing = estimate(
        TaskProfile(task="pretraining", params_b=1, seq_len=2048, batch=8, checkpointing=True)
    )
    assert with_checkpointing.breakdown["activations"] == pytest.approx(
        (2 * layers + 34) * 2048 * 8 * hidden / 1e9
    )


def test_optimizers_and_fp32_training():
    def state(optimizer, precision="bf16"):
        est = estimate(
            TaskProfile(task="full_finetune", params_b=1, precision=precision, optimizer=optimizer)
        )
        return est.breakdown["optimizer"]

    assert state("adam") == pytest.approx(12)
    assert state("adam_8bit") == pytest.approx(6)
    assert state("sgd") == pytest.approx(8)
    assert state("adafactor") == pytest.approx(4)
    assert state("adam", "fp32") == pytest.approx(8)  # no master copy: the weights are FP32
    fp32 = estimate(TaskProfile(task="full_finetune", params_b=1, precision="fp32"))
    assert fp32.breakdown["weights"] + fp32.breakdown["gradients"] == pytest.approx(8)


def test_quantized_inference_weights():
    def weights(precision):
        return estimate(TaskProfile(task="inference", params_b=10, precision=precision)).breakdown[
            "weights"
        ]

    assert [weights(p) for p in ("fp32", "bf16", "fp8", "int8", "int4")] == pytest.approx(
        [40, 20, 10, 10, 5]
    )
    assert (
        estimate(TaskProfile(task="inference", params_b=10, precision="int4")).required_precision
        == "fp16"
    )


def test_rendering_keeps_the_scene_on_one_card():
    est = estimate(TaskProfile(task="rendering", scene_gb=20))
    assert est.breakdown["scene"] == pytest.approx(20)
    assert est.total_gb == pytest.approx(24)
    assert est.required_precision == "fp32"
    assert not est.splits
    with pytest.raises(ValueError):
        est.per_card_bytes(2)


def test_small_jobs_still_pay_the_runtime_context():
    est = estimate(TaskProfile(task="inference", params_b=0.1, seq_len=128, batch=1))
    assert est.overhead.gb == pytest.approx(1.0)


def test_defaults_are_filled_in_and_shown():
    est = estimate(TaskProfile(task="qlora", params_b=7, precision="int4"))
    p = est.profile
    assert (p.precision, p.seq_len, p.batch, p.optimizer, p.checkpointing) == (
        "bf16",
        2048,
        4,
        "adam",
        True,
    )
    assert estimate(TaskProfile(task="inference", params_b=7)).profile.seq_len == 4096
    assert est.formula.startswith("total = ")
    assert any("NormalFloat" in note for note in est.notes)
    assert TaskProfile(task="lora", params_b=13).summary() == "LoRA fine-tuning, 13B, BF16"


@pytest.mark.parametrize(
    ("kwargs", "field", "words"),
    [
        ({"task": "painting", "params_b": 7}, "task", "Unknown task"),
        ({"task": "inference"}, "params_b", "billions of parameters"),
        ({"task": "rendering"}, "scene_gb", "scene's size"),
        ({"task": "full_finetune", "params_b": 7, "precision": "int8"}, "precision", "inference"),
        ({"task": "lora", "params_b": 7, "precision": "int4"}, "precision", "QLoRA"),
        ({"task": "rendering", "scene_gb": 5, "precision": "bf16"}, "precision", "fp32"),
        ({"task": "inference", "params_b": -1}, "params_b", "between"),
        ({"task": "inference", "params_b": 7, "seq_len": 0}, "seq_len", "between"),
        ({"task": "lora", "params_b": 7, "optimizer": "lion"}, "optimizer", "Unknown optimizer"),
    ],
)
def test_bad_profiles_say_what_to_change(kwargs, field, words):
    with pytest.raises(EstimateError) as exc:
        TaskProfile(**kwargs)
    assert words in exc.value.errors[field]


# --- properties ---------------------------------------------------------------------------

hypothesis = pytest.importorskip("hypothesis")
st = hypothesis.strategies
given, settings = hypothesis.given, hypothesis.settings

MODEL_TASKS = [t for t in Task.values if t != Task.RENDERING]
sizes = st.floats(min_value=0.05, max_value=2000, allow_nan=False)
seq_lens = st.integers(min_value=16, max_value=65_536)
batches = st.integers(min_value=1, max_value=256)


def total(task, **kw):
    return estimate(TaskProfile(task=task, **kw)).total_bytes


@settings(max_examples=200, deadline=None)
@given(task=st.sampled_from(MODEL_TASKS), a=sizes, b=sizes, seq=seq_lens, batch=batches)
def test_memory_grows_with_model_size(task, a, b, seq, batch):
    small, large = sorted((a, b))
    hypothesis.assume(large > small * 1.001)
    assert total(task, params_b=small, seq_len=seq, batch=batch) < total(
        task, params_b=large, seq_len=seq, batch=batch
    )


@settings(max_examples=200, deadline=None)
@given(task=st.sampled_from(MODEL_TASKS), size=sizes, a=seq_lens, b=seq_lens, batch=batches)
def test_memory_grows_with_sequence_length(task, size, a, b, batch):
    hypothesis.assume(a != b)
    short, long = sorted((a, b))
    assert total(task, params_b=size, seq_len=short, batch=batch) < total(
        task, params_b=size, seq_len=long, batch=batch
    )


@settings(max_examples=200, deadline=None)
@given(task=st.sampled_from(MODEL_TASKS), size=sizes, seq=seq_lens, a=batches, b=batches)
def test_memory_grows_with_batch(task, size, seq, a, b):
    hypothesis.assume(a != b)
    small, large = sorted((a, b))
    assert total(task, params_b=size, seq_len=seq, batch=small) < total(
        task, params_b=size, seq_len=seq, batch=large
    )


# Highest precision first; each task's own choices.
PRECISION_ORDER = ["fp32", "bf16", "fp16", "fp8", "int8", "int4"]


@settings(max_examples=200, deadline=None)
@given(
    task=st.sampled_from(MODEL_TASKS),
    size=sizes,
    seq=seq_lens,
    batch=batches,
    pair=st.tuples(st.sampled_from(PRECISION_ORDER), st.sampled_from(PRECISION_ORDER)),
)
def test_memory_falls_with_lower_precision(task, size, seq, batch, pair):
    from leasing.advisor.estimator import ALLOWED_PRECISIONS

    allowed = ALLOWED_PRECISIONS[task]
    hypothesis.assume(all(p in allowed for p in pair))
    higher, lower = sorted(pair, key=PRECISION_ORDER.index)
    kw = {"params_b": size, "seq_len": seq, "batch": batch}
    assert total(task, precision=lower, **kw) <= total(task, precision=higher, **kw)
    if task == Task.INFERENCE and {higher, lower} in ({"fp32", "bf16"}, {"bf16", "int8"}):
        assert total(task, precision=lower, **kw) < total(task, precision=higher, **kw)


@settings(max_examples=100, deadline=None)
@given(task=st.sampled_from(MODEL_TASKS), size=sizes)
def test_more_cards_need_less_each(task, size):
    est = estimate(TaskProfile(task=task, params_b=size))
    per_card = [est.per_card_bytes(n) for n in (1, 2, 4, 8)]
    assert per_card == sorted(per_card, reverse=True)
    assert per_card[0] == pytest.approx(est.total_bytes)


def test_precision_choices_cover_the_model_precisions():
    assert set(PRECISION_ORDER) == set(ModelPrecision.values)
