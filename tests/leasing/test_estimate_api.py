"""POST /api/v1/estimate/ and leases asked for by profile: the contract and errors a script can act on."""

from __future__ import annotations

import pytest

from leasing.choices import LeaseStatus
from leasing.models import Lease
from tests.leasing.test_recommend import pool

pytestmark = pytest.mark.django_db


@pytest.fixture
def api(api):
    api.credentials(HTTP_ACCEPT_LANGUAGE="en")
    return api


def post(api, user, data, url="/api/v1/estimate/"):
    api.force_authenticate(user)
    return api.post(url, data, format="json")


QLORA = {"task": "qlora", "params_b": 7}


def test_estimate_returns_the_breakdown_and_ranked_options(api, frozen, alice):
    pool("rtx-4090", "a100-80g-sxm")
    response = post(api, alice, {"profile": QLORA, "duration_minutes": 240})
    assert response.status_code == 200, response.content
    body = response.json()
    est = body["estimate"]
    assert est["profile"]["precision"] == "bf16" and est["profile"]["seq_len"] == 2048
    assert [p["key"] for p in est["parts"]] == [
        "weights",
        "gradients",
        "optimizer",
        "activations",
        "overhead",
    ]
    assert set(est["breakdown"]) >= {"weights", "kv_cache", "overhead", "total"}
    assert est["total_gb"] == pytest.approx(9.23, abs=0.01)
    assert "NF4" in est["parts"][0]["formula"]
    assert est["formula"].startswith("total = ")
    assert body["duration_minutes"] == 240 and body["purpose"] == "fine_tuning"
    assert body["message"] == ""
    top = body["options"][0]
    assert (top["card_model"], top["count"], top["starts_now"]) == ("rtx-4090", 1, True)
    assert top["cost"] == "14.00" and top["price_per_hour"] == "3.5000"  # in force, 4 places
    assert top["currency"] == "CNY"
    assert top["memory_gb"] == 24 and 0 < top["headroom"] < 1
    assert top["explanation"].startswith("1 × NVIDIA GeForce RTX 4090: fits with")
    assert top["request_url"] == (
        "/leases/new/?card_model=rtx-4090&count=1&duration=4&unit=hours&purpose=fine_tuning&stack="
    )


def test_estimate_is_honest_when_nothing_fits(api, frozen, alice):
    pool("t4")
    body = post(
        api,
        alice,
        {"profile": {"task": "full_finetune", "params_b": 13}, "duration_minutes": 60},
    ).json()
    assert body["options"] == []
    assert body["message"].startswith("Needs ")
    assert body["left_out"][0]["card_model"] == "t4"


def test_estimate_speaks_chinese_by_default(api, frozen, alice):
    pool("rtx-4090")
    api.credentials()
    body = post(api, alice, {"profile": QLORA, "duration_minutes": 60}).json()
    assert body["estimate"]["parts"][0]["label"] != "Weights (frozen base + adapters)"
    assert "RTX 4090" in body["options"][0]["explanation"]


@pytest.mark.parametrize(
    ("data", "where", "words"),
    [
        ({"profile": {"task": "paint"}, "duration_minutes": 60}, ("profile", "task"), "valid"),
        (
            {"profile": {"task": "inference"}, "duration_minutes": 60},
            ("profile", "params_b"),
            "billions of parameters",
        ),
        (
            {
                "profile": {"task": "full_finetune", "params_b": 7, "precision": "int8"},
                "duration_minutes": 60,
            },
            ("profile", "precision"),
            "for inference",
        ),
        (
            {"profile": {"task": "rendering"}, "duration_minutes": 60},
            ("profile", "scene_gb"),
            "scene's size",
        ),
        (
            {"profile": {"task": "inference", "params_b": 0}, "duration_minutes": 60},
            ("profile", "params_b"),
            "greater than or equal to",
        ),
        ({"profile": QLORA, "duration_minutes": 0}, ("duration_minutes",), "greater than"),
        ({"profile": QLORA, "duration_minutes": 10**7}, ("duration_minutes",), "longest lease"),
        ({"duration_minutes": 60}, ("profile",), "required"),
    ],
)
def test_bad_profiles_get_a_400_saying_what_to_change(api, frozen, alice, data, where, words):
    response = post(api, alice, data)
    assert response.status_code == 400, response.content
    errors = response.json()
    for key in where:
        errors = errors[key]
    assert words in " ".join(errors)


def test_estimate_needs_a_login(api, db):
    assert api.post("/api/v1/estimate/", {"profile": QLORA}, format="json").status_code in (
        401,
        403,
    )


def test_estimate_queries_are_bounded(api, frozen, alice, django_assert_max_num_queries):
    pool("rtx-4090", "l40s", "a100-80g-sxm", "h100-sxm", "t4", "mi300x")
    api.force_authenticate(alice)
    with django_assert_max_num_queries(40):
        response = api.post(
            "/api/v1/estimate/", {"profile": QLORA, "duration_minutes": 60}, format="json"
        )
    assert response.status_code == 200


# --- leases by profile ------------------------------------------------------------------


def test_lease_by_profile_places_the_top_option(api, frozen, alice, vision):
    pool("rtx-4090", "a100-80g-sxm")
    response = post(
        api,
        alice,
        {"profile": QLORA, "duration_minutes": 120, "team": "vision"},
        url="/api/v1/leases/",
    )
    assert response.status_code == 201, response.content
    body = response.json()
    assert (body["card_model"], body["count"], body["status"]) == ("rtx-4090", 1, "provisioning")
    assert body["purpose"] == "fine_tuning" and body["description"] == "QLoRA fine-tuning, 7B, BF16"


def test_lease_by_profile_errors(api, frozen, alice, bob, vision):
    pool("t4")
    too_big = post(
        api,
        alice,
        {"profile": {"task": "full_finetune", "params_b": 70}, "duration_minutes": 60},
        url="/api/v1/leases/",
    )
    assert too_big.status_code == 400 and too_big.json()["profile"][0].startswith("Needs")
    not_member = post(
        api,
        bob,
        {"profile": {"task": "inference", "params_b": 1}, "duration_minutes": 60, "team": "vision"},
        url="/api/v1/leases/",
    )
    assert not_member.status_code == 403, not_member.content
    assert not Lease.objects.exists()


def test_leases_endpoint_accepts_a_profile(api, frozen, alice, vision):
    """POST /api/v1/leases/ with a profile instead of a card model."""
    pool("rtx-4090")
    response = post(api, alice, {"profile": QLORA, "duration_minutes": 60}, url="/api/v1/leases/")
    assert response.status_code == 201, response.content
    assert Lease.objects.get().status == LeaseStatus.PROVISIONING
