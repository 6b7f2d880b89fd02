"""Recommendation against the real catalogue (loaded by migration): fit, precision, links, when, cost."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from django.core.exceptions import ValidationError

from inventory.models import CardModel
from leasing.advisor.estimator import TaskProfile
from leasing.advisor.recommend import recommend
from leasing.choices import LeaseStatus, Purpose
from leasing.lifecycle.requests import lease_request_by_profile
from leasing.models import Lease
from tests.factories import make_node
from tests.leasing.conftest import ask, hours

pytestmark = pytest.mark.django_db


def model(slug: str) -> CardModel:
    return CardModel.objects.get(slug=slug)


def pool(*slugs: str, cards: int = 8) -> dict[str, CardModel]:
    """One node of *cards* cards for each catalogue model named."""
    models = {}
    for slug in slugs:
        models[slug] = model(slug)
        make_node(models[slug], cards=cards, hostname=f"{slug}-node")
    return models


def offered(rec) -> list[tuple[str, int]]:
    return [(o.card_model.slug, o.count) for o in rec.options]


QLORA_7B = TaskProfile(task="qlora", params_b=7)
INFERENCE_70B = TaskProfile(task="inference", params_b=70, precision="bf16")


def test_the_catalogue_is_there(db):
    assert CardModel.objects.filter(slug__in=["rtx-4090", "a100-80g-sxm", "t4"]).count() == 3


def test_7b_qlora_ranks_a_24_gb_card_first_when_cheaper(frozen):
    pool("rtx-4090", "l40s", "a100-80g-sxm", "h100-sxm")
    rec = recommend(profile=QLORA_7B, duration=hours(4))
    top = rec.options[0]
    assert (top.card_model.slug, top.count) == ("rtx-4090", 1)
    assert top.memory_gb == 24 and top.starts_now
    assert top.cost == Decimal("14.00")  # ¥3.50 × 1 × 4 h
    assert offered(rec) == [
        ("rtx-4090", 1),
        ("l40s", 1),
        ("a100-80g-sxm", 1),
        ("h100-sxm", 1),
    ]
    assert top.explanation.startswith("1 × NVIDIA GeForce RTX 4090: fits with ")
    assert "free now; CNY 14.00 for 4 h" in top.explanation
    assert rec.message == ""
    assert rec.purpose == Purpose.FINE_TUNING


def test_price_decides_between_cards_that_fit_and_are_free(frozen):
    cards = pool("rtx-4090", "l40s")
    CardModel.objects.filter(pk=cards["rtx-4090"].pk).update(price_per_hour=Decimal("20"))
    rec = recommend(profile=QLORA_7B, duration=hours(4))
    assert offered(rec)[0] == ("l40s", 1)


def test_free_now_comes_before_cheaper_after_a_long_wait(frozen, alice, vision):
    cards = pool("rtx-4090", "l40s", cards=2)
    ask(alice, vision, cards["rtx-4090"], count=2, duration=hours(20))
    rec = recommend(profile=QLORA_7B, duration=hours(4))
    assert offered(rec) == [("l40s", 1), ("rtx-4090", 1)]
    later = rec.options[1]
    assert not later.starts_now and "free from 2026-12-02 05:00" in later.explanation
    assert "starts later" in later.explanation


@pytest.mark.parametrize(
    "profile",
    [
        INFERENCE_70B,
        TaskProfile(task="inference", params_b=70, precision="bf16", seq_len=512, batch=1),
        TaskProfile(task="inference", params_b=72, precision="bf16", seq_len=32_768, batch=8),
    ],
)
def test_70b_bf16_inference_is_never_offered_a_single_24_gb_card(frozen, profile):
    pool("rtx-4090", "l40s", "a100-80g-sxm", "h200-sxm", "mi300x")
    rec = recommend(profile=profile, duration=hours(2), limit=20)
    assert rec.options
    for option in rec.options:
        assert not (option.memory_gb <= 24 and option.count == 1)
        assert option.per_card_gb <= option.memory_gb * 0.95
    counts = dict(offered(rec))
    assert counts.get("rtx-4090", 8) == 8  # if at all, across eight cards over PCIe


def test_70b_inference_spreads_over_pcie_cards_but_training_does_not(frozen):
    pool("rtx-4090", "l40s", "a100-80g-sxm")
    inference = recommend(profile=INFERENCE_70B, duration=hours(2), limit=20)
    assert ("l40s", 8) in offered(inference)
    l40s = next(o for o in inference.options if o.card_model.slug == "l40s")
    assert "PCIe between the cards (enough for inference)" in l40s.explanation
    training = recommend(
        profile=TaskProfile(task="full_finetune", params_b=7), duration=hours(2), limit=20
    )
    # PCIe cards train too, ranked below the NVLink ones, with what the link costs in time.
    assert offered(training) == [("a100-80g-sxm", 2), ("l40s", 4), ("rtx-4090", 8)]
    top, pcie = training.options[0], training.options[1]
    assert "NVLink 600 GB/s between cards" in top.explanation
    assert top.efficiency > 0.95 > 0.8 > pcie.efficiency
    assert "of the time computing" in pcie.explanation and "PCIe 64 GB/s" in pcie.explanation


def test_an_int8_profile_prefers_cards_that_publish_int8_tops(frozen):
    # P100 and MetaX C500 publish no INT8 figure; T4 and Hygon K100 do. The P100 is cheapest.
    pool("p100", "t4", "metax-c500", "dcu-k100")
    int8 = recommend(
        profile=TaskProfile(task="inference", params_b=13, precision="int8"), duration=hours(2)
    )
    assert int8.options
    assert all(o.card_model.int8_tops is not None for o in int8.options)
    assert offered(int8)[0] == ("t4", 2)
    why = {item.card_model.slug: item.reason for item in int8.left_out}
    assert "no INT8 figure on the spec sheet" in why["p100"]
    assert "no INT8 figure on the spec sheet" in why["metax-c500"]
    # The same model in FP16 goes to the cheapest card that holds it: the P100.
    fp16 = recommend(
        profile=TaskProfile(task="inference", params_b=13, precision="fp16"), duration=hours(2)
    )
    assert offered(fp16)[0][0] == "p100"


def test_bf16_needs_bf16_on_the_spec_sheet(frozen):
    pool("v100-32g", "a100-80g-sxm")
    rec = recommend(profile=TaskProfile(task="lora", params_b=7), duration=hours(1))
    assert offered(rec) == [("a100-80g-sxm", 1)]
    assert "no BF16 figure" in {i.card_model.slug: i.reason for i in rec.left_out}["v100-32g"]
    fp16 = recommend(
        profile=TaskProfile(task="lora", params_b=7, precision="fp16"), duration=hours(1)
    )
    assert offered(fp16)[0] == ("v100-32g", 1)


def test_nothing_free_now_says_when(frozen, alice, vision):
    a100 = pool("a100-80g-sxm", cards=2)["a100-80g-sxm"]
    ask(alice, vision, a100, count=2, duration=hours(5))
    rec = recommend(profile=TaskProfile(task="full_finetune", params_b=7), duration=hours(6))
    assert offered(rec) == [("a100-80g-sxm", 2)]
    assert rec.message == "Needs 2 × 80 GB cards with fast links; none free before 14:00."
    assert "free from 14:00" in rec.options[0].explanation


def test_nothing_fits_in_the_pool_says_what_would(frozen):
    pool("rtx-4090", "t4")
    rec = recommend(profile=TaskProfile(task="full_finetune", params_b=13), duration=hours(2))
    assert rec.options == []
    # the pool's own card, what it lacks, and the smaller method that fits: never a card
    # the pool does not have as the example
    assert rec.message == (
        "Nothing in the pool holds it now: NVIDIA GeForce RTX 4090 needs 2 nodes of 8 (16 "
        "cards), the pool has 1. Instead: LoRA fine-tuning fits 2 × NVIDIA GeForce RTX 4090 "
        "now; QLoRA fine-tuning fits 1 × NVIDIA GeForce RTX 4090 now."
    )


def test_nothing_in_the_pool_could_says_so_without_naming_other_cards(frozen):
    pool("t4")  # no BF16: no card of the pool can, with more or without
    rec = recommend(profile=TaskProfile(task="full_finetune", params_b=13), duration=hours(2))
    assert rec.message == "Needs 2 × 141 GB cards with fast links; the pool has no such cards."


def test_nothing_in_the_catalogue_fits_says_how_to_shrink(frozen):
    pool("h200-sxm")
    rec = recommend(profile=TaskProfile(task="full_finetune", params_b=5000), duration=hours(2))
    assert rec.options == []
    assert rec.message.startswith("Needs about ")
    assert "use LoRA or QLoRA" in rec.message


def test_cards_down_or_too_few_on_one_node_are_left_out(frozen):
    a100 = model("a100-80g-sxm")
    make_node(a100, cards=1, hostname="a")
    make_node(a100, cards=1, hostname="b")
    rec = recommend(profile=TaskProfile(task="full_finetune", params_b=7), duration=hours(2))
    assert rec.options == []
    assert "cannot be placed on one node" in rec.left_out[0].reason


def test_the_request_link_prefills_the_form(frozen):
    pool("rtx-4090")
    rec = recommend(profile=QLORA_7B, duration=hours(6))
    assert rec.request_params(rec.options[0]) == {
        "card_model": "rtx-4090",
        "count": 1,
        "duration": 6,
        "unit": "hours",
        "purpose": "fine_tuning",
        "stack": "",
    }
    odd = recommend(profile=QLORA_7B, duration=timedelta(minutes=90))
    assert odd.request_params(odd.options[0])["duration"] == 90
    assert odd.request_params(odd.options[0])["unit"] == "minutes"


def test_queries_are_bounded_however_many_models_fit(frozen, django_assert_max_num_queries):
    slugs = list(CardModel.objects.values_list("slug", flat=True))
    pool(*slugs, cards=2)
    # the models, the price books (three: list and team prices, off-peak windows), then one
    # batch for the cards (and draining nodes), their bookings, the queue, and the nodes: not
    # a query per model
    with django_assert_max_num_queries(9):
        rec = recommend(profile=TaskProfile(task="inference", params_b=1), duration=hours(1))
    # every model that fits is offered (BF16 on the spec sheet), none cut off
    assert len(rec.options) == CardModel.objects.exclude(bf16_tflops=None).count()


def test_recommend_writes_nothing(frozen):
    pool("rtx-4090")
    recommend(profile=QLORA_7B, duration=hours(1))
    assert not Lease.objects.exists()


# --- asking by task -------------------------------------------------------------------------


def test_lease_request_by_profile_takes_the_top_option(frozen, alice, vision):
    pool("rtx-4090", "a100-80g-sxm")
    lease = lease_request_by_profile(user=alice, team=vision, profile=QLORA_7B, duration=hours(3))
    assert (lease.card_model.slug, lease.count) == ("rtx-4090", 1)
    assert lease.status == LeaseStatus.PROVISIONING
    assert lease.purpose == Purpose.FINE_TUNING
    assert lease.description == "QLoRA fine-tuning, 7B, BF16"


def test_lease_request_by_profile_spreads_training_over_linked_cards(frozen, alice, vision):
    pool("l40s", "a100-80g-sxm")
    lease = lease_request_by_profile(
        user=alice,
        team=vision,
        profile=TaskProfile(task="full_finetune", params_b=7),
        duration=hours(2),
        description="my run",
        purpose=Purpose.TRAINING,
    )
    assert (lease.card_model.slug, lease.count) == ("a100-80g-sxm", 2)
    assert lease.allocations.values("card__node").distinct().count() == 1
    assert (lease.description, lease.purpose) == ("my run", Purpose.TRAINING)


def test_lease_request_by_profile_when_nothing_fits_writes_nothing(frozen, alice, vision):
    pool("t4")
    with pytest.raises(ValidationError) as exc:
        lease_request_by_profile(
            user=alice,
            team=vision,
            profile=TaskProfile(task="full_finetune", params_b=70),
            duration=hours(2),
        )
    assert "Needs" in exc.value.message_dict["profile"][0]
    assert not Lease.objects.exists()


def test_lease_request_by_profile_keeps_the_usual_rules(frozen, alice, vision, bob):
    pool("rtx-4090")
    from django.core.exceptions import PermissionDenied

    with pytest.raises(PermissionDenied):
        lease_request_by_profile(user=bob, team=vision, profile=QLORA_7B, duration=hours(2))
    with pytest.raises(ValidationError) as exc:
        lease_request_by_profile(
            user=alice, team=vision, profile=QLORA_7B, duration=timedelta(days=400)
        )
    assert "longest lease" in str(exc.value)


def test_a_reservation_is_checked_at_its_start(frozen, alice, vision):
    from tests.leasing.conftest import T0

    a100 = pool("a100-80g-sxm", cards=2)["a100-80g-sxm"]
    ask(alice, vision, a100, count=2, duration=hours(5))
    tomorrow = T0 + hours(24)
    rec = recommend(
        profile=TaskProfile(task="full_finetune", params_b=7), duration=hours(2), start_at=tomorrow
    )
    top = rec.options[0]
    assert top.starts_now and top.start == tomorrow and rec.message == ""
    assert "free from 2026-12-02 09:00" in top.explanation
