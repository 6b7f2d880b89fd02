"""The ask-by-task page /leases/estimate/: form, breakdown with formulas, ranked options, errors."""

from __future__ import annotations

import re

import pytest

from leasing.models import Lease
from tests.leasing.test_recommend import pool

pytestmark = pytest.mark.django_db

URL = "/leases/estimate/"


@pytest.fixture
def browser(client, alice):
    client.force_login(alice)
    client.cookies["django_language"] = "en"
    return client


def profile(**kw):
    return {
        "task": "qlora",
        "params_b": "7",
        "precision": "",
        "optimizer": "adam",
        "checkpointing": "on",
        "lora_rank": "16",
        "duration": "4",
    } | kw


def test_the_page_needs_a_login(client, db):
    response = client.get(URL)
    assert response.status_code == 302 and "/accounts/login/" in response["Location"]


def test_the_page_opens_with_an_example_profile(browser, frozen):
    pool("rtx-4090")
    page = browser.get(URL).content.decode()
    assert "<h1>Ask by task</h1>" in page
    assert 'name="task"' in page and 'name="params_b"' in page and 'name="scene_gb"' in page
    assert 'data-estimate="ok"' in page  # the example (LoRA 7B) is estimated at once
    assert "/static/css/estimate.css" in page


def test_a_profile_shows_the_breakdown_formulas_and_ranked_options(browser, frozen):
    pool("rtx-4090", "l40s", "a100-80g-sxm")
    page = browser.get(URL, profile()).content.decode()
    assert 'data-estimate="ok"' in page
    for part in ("weights", "gradients", "optimizer", "activations", "overhead", "total"):
        assert f'data-part="{part}"' in page
    assert "NF4" in page and "(2 × L + 34) × s × b × h" in page
    assert "Memory per replica: 9.2 GB" in page
    slugs = re.findall(r'class="option[^"]*" data-card-model="([^"]+)"', page)
    assert slugs == ["rtx-4090", "l40s", "a100-80g-sxm"]
    assert (
        'href="/leases/new/?card_model=rtx-4090&amp;count=1&amp;duration=4&amp;unit=hours'
        '&amp;purpose=fine_tuning&amp;stack="' in page
    )
    assert "1 × NVIDIA GeForce RTX 4090: fits with" in page and "free now" in page
    assert not Lease.objects.exists()


def test_htmx_gets_only_the_result(browser, frozen):
    pool("rtx-4090")
    part = browser.get(URL, profile(), HTTP_HX_REQUEST="true").content.decode()
    assert "<html" not in part and 'data-estimate="ok"' in part


def test_training_over_pcie_and_missing_precision_are_explained(browser, frozen):
    pool("rtx-4090", "v100-32g")
    page = browser.get(
        URL, profile(task="full_finetune", params_b="7", precision="bf16")
    ).content.decode()
    # 8 × RTX 4090 train over PCIe: offered, with the time the link costs said plainly
    assert 'data-card-model="rtx-4090" data-count="8"' in page
    assert "of the time computing" in page and "PCIe 64 GB/s between cards" in page
    assert "not offered" in page and "no BF16 figure" in page


@pytest.mark.parametrize(
    ("data", "words"),
    [
        (profile(params_b="-1"), "greater than or equal to"),
        (profile(params_b="abc"), "Enter a number"),
        (profile(task="painting"), "Select a valid choice"),
        (profile(task="full_finetune", precision="int8"), "for inference"),
        (profile(task="rendering"), "scene&#x27;s size"),
        (profile(task="inference", params_b=""), "billions of parameters"),
        (profile(duration="0"), "greater than or equal to 1"),
        (profile(duration="100000"), "less than or equal to"),
    ],
)
def test_bad_input_is_shown_on_the_form_never_a_500(browser, frozen, data, words):
    response = browser.get(URL, data)
    assert response.status_code == 200
    page = response.content.decode()
    assert words in page and 'data-estimate="invalid"' in page


def test_rendering_needs_only_the_scene(browser, frozen):
    pool("l40s")
    page = browser.get(
        URL, profile(task="rendering", params_b="", scene_gb="30", precision="")
    ).content.decode()
    assert 'data-part="scene"' in page
    assert "purpose=rendering" in page


def test_the_page_speaks_chinese_by_default(client, alice, frozen):
    pool("rtx-4090")
    client.force_login(alice)
    page = client.get(URL, profile()).content.decode()
    assert '<html lang="zh-hans">' in page
    assert "Ask by task" not in page and "Request this" not in page


def test_the_page_queries_are_bounded(browser, frozen, django_assert_max_num_queries):
    pool("rtx-4090", "l40s", "a100-80g-sxm", "h100-sxm", "t4", "mi300x", "ascend-910b")
    with django_assert_max_num_queries(45):
        assert browser.get(URL, profile()).status_code == 200
