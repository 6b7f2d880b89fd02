"""When a task fits nowhere in the pool, the advisor says so plainly: it names only card
models the pool has, says what the closest would need ("needs 3 nodes of 8, the pool has
2") without folding it away, and offers the smaller method that fits ("QLoRA fine-tuning
fits … now"), in the message, the page and the API, in English and in Chinese."""

from __future__ import annotations

import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from inventory.models import CardModel, Node
from leasing.advisor.estimator import TaskProfile
from leasing.advisor.recommend import recommend, smaller_profiles
from portal.demo import seed_inventory
from tests.factories import make_node
from tests.leasing.conftest import hours

pytestmark = pytest.mark.django_db

FULL_70B = TaskProfile(task="full_finetune", params_b=70)
PAGE = (
    "/leases/estimate/?task=full_finetune&params_b=70&precision=&optimizer=adam"
    "&checkpointing=on&lora_rank=16&duration=4"
)
ENGLISH_WORDS = re.compile(r"\b(needs|nodes|pool|fits|now|Instead|Nothing|cards)\b")


@pytest.fixture
def demo(db):
    seed_inventory()


def test_the_70b_full_fine_tune_names_the_pools_cards_their_need_and_a_smaller_method(frozen, demo):
    rec = recommend(profile=FULL_70B, duration=hours(4))
    assert rec.options == []
    absent = CardModel.objects.filter(cards__isnull=True).values_list("name", flat=True)
    assert "MI300X" not in rec.message
    assert not [name for name in absent if name in rec.message]
    # the multi-node need, plainly and first: the closest models (one node short)
    closest = rec.shortfalls[0]
    assert (closest.card_model.slug, closest.cards, closest.nodes, closest.per_node) == (
        "a100-80g-sxm",
        24,
        3,
        8,
    )
    assert closest.have == 2
    assert rec.message.startswith(
        "Nothing in the pool holds it now: NVIDIA A100 80GB SXM needs 3 nodes of 8 (24 cards), "
        "the pool has 2; Huawei Ascend 910B2 needs 3 nodes of 8 (24 cards), the pool has 2."
    )
    # the next methods that fit, each with its best option in the pool, free now
    assert [a.profile.task for a in rec.alternatives] == ["lora", "qlora"]
    for alt in rec.alternatives:
        assert alt.option.starts_now and alt.option.card_model.name not in absent
        assert alt.sentence in rec.message
    qlora = rec.alternatives[1]
    assert qlora.sentence == (
        f"QLoRA fine-tuning fits {qlora.option.count} × {qlora.option.card_model.name} now"
    )
    assert " Instead: LoRA fine-tuning fits " in rec.message


def test_smaller_methods_keep_the_profile():
    lora = TaskProfile(task="lora", params_b=13, seq_len=1024, lora_rank=8)
    assert smaller_profiles(lora) == [
        TaskProfile(task="qlora", params_b=13, seq_len=1024, lora_rank=8)
    ]
    fp8 = TaskProfile(task="full_finetune", params_b=7, precision="fp8")
    assert [(p.task, p.precision) for p in smaller_profiles(fp8)] == [
        ("lora", "fp8"),
        ("qlora", None),  # QLoRA computes in bf16, fp16 or fp32: its default
    ]
    serving = TaskProfile(task="inference", params_b=405, precision="fp8")
    assert [p.precision for p in smaller_profiles(serving)] == ["int4"]
    assert smaller_profiles(TaskProfile(task="pretraining", params_b=7)) == []


CATALOGUE_SLUGS = [
    "rtx-4090",
    "l40s",
    "a100-80g-sxm",
    "h800",
    "ascend-910b",
    "t4",
    "v100-32g",
    "mi300x",
    "h200-sxm",
    "mlu370-x8",
]


@settings(
    max_examples=20,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    slugs=st.lists(st.sampled_from(CATALOGUE_SLUGS), min_size=1, max_size=4, unique=True),
    nodes=st.integers(min_value=1, max_value=2),
    task=st.sampled_from(["full_finetune", "lora", "inference", "pretraining"]),
    params_b=st.sampled_from([7, 13, 70, 180, 405]),
)
def test_the_message_names_only_cards_the_pool_has(frozen, slugs, nodes, task, params_b):
    Node.objects.all().delete()
    for slug in slugs:
        model = CardModel.objects.get(slug=slug)
        for i in range(nodes):
            make_node(model, cards=8, hostname=f"{slug}-{i}")
    rec = recommend(profile=TaskProfile(task=task, params_b=params_b), duration=hours(2))
    pool_names = set(CardModel.objects.filter(slug__in=slugs).values_list("name", flat=True))
    for name in CardModel.objects.exclude(slug__in=slugs).values_list("name", flat=True):
        if not any(name in mine for mine in pool_names):
            assert name not in rec.message, (name, rec.message)
    named = {o.card_model.name for o in rec.options}
    named |= {s.card_model.name for s in rec.shortfalls}
    named |= {a.option.card_model.name for a in rec.alternatives}
    assert named <= pool_names
    for shortfall in rec.shortfalls:
        assert shortfall.have < (shortfall.nodes if shortfall.nodes > 1 else shortfall.cards)
    if not rec.options:  # nothing fits: the closest needs, plainly, and the smaller methods
        for shortfall in rec.shortfalls[:2]:
            assert shortfall.card_model.name in rec.message
        for alt in rec.alternatives:
            assert alt.sentence in rec.message
    else:
        assert rec.alternatives == []


def test_the_api_answer_carries_the_need_and_the_smaller_methods(api, frozen, demo, alice):
    api.force_authenticate(alice)
    data = {"profile": {"task": "full_finetune", "params_b": 70}, "duration_minutes": 240}
    body = api.post("/api/v1/estimate/", data, format="json", HTTP_ACCEPT_LANGUAGE="en").json()
    assert body["options"] == []
    assert body["shortfalls"][0] == {
        "card_model": "a100-80g-sxm",
        "card_model_name": "NVIDIA A100 80GB SXM",
        "cards": 24,
        "nodes": 3,
        "per_node": 8,
        "pool_has": 2,
    }
    assert [a["task"] for a in body["alternatives"]] == ["lora", "qlora"]
    qlora = body["alternatives"][1]
    assert qlora["starts_now"] and qlora["method"] == "QLoRA fine-tuning"
    assert qlora["request_url"].startswith(f"/leases/new/?card_model={qlora['card_model']}&")
    assert "MI300X" not in body["message"] and "needs 3 nodes of 8" in body["message"]
    chinese = api.post(
        "/api/v1/estimate/", data, format="json", HTTP_ACCEPT_LANGUAGE="zh-hans"
    ).json()
    assert not ENGLISH_WORDS.search(chinese["message"]), chinese["message"]
    assert "NVIDIA A100 80GB SXM" in chinese["message"] and "QLoRA" in chinese["message"]
    assert not ENGLISH_WORDS.search(chinese["alternatives"][1]["method"])


@pytest.mark.parametrize("language", ["en", "zh-hans"])
def test_the_page_shows_the_need_and_offers_the_smaller_methods(
    client, frozen, demo, alice, language
):
    client.force_login(alice)
    client.cookies["django_language"] = language
    page = client.get(PAGE).content.decode()
    verdict = re.search(r'data-verdict="none">([^<]*)</p>', page)
    assert verdict, page
    message = verdict.group(1)
    assert "NVIDIA A100 80GB SXM" in message and "MI300X" not in page
    alternatives = page[page.index("data-alternatives") :]
    alternatives = alternatives[: alternatives.index("</ul>")]
    assert re.findall(r'data-task="([^"]+)"', alternatives) == ["lora", "qlora"]
    assert alternatives.count('data-action="request" href="/leases/new/?card_model=') == 2
    if language == "en":
        assert "needs 3 nodes of 8 (24 cards), the pool has 2" in message
        assert "QLoRA fine-tuning fits " in alternatives
    else:
        assert not ENGLISH_WORDS.search(message), message
        assert not ENGLISH_WORDS.search(re.sub(r"<[^>]+>", "", alternatives))


def test_serving_that_fits_nowhere_offers_quantized_weights(frozen, demo):
    rec = recommend(
        profile=TaskProfile(task="inference", params_b=1000, precision="fp8"), duration=hours(4)
    )
    assert rec.options == [] and rec.shortfalls
    (int4,) = rec.alternatives
    assert int4.profile.precision == "int4" and int4.method == "Serving with INT4 weights"
    assert int4.sentence.startswith("Serving with INT4 weights fits ")
    assert rec.message.endswith(f"Instead: {int4.sentence}.")
