"""Asking by requirements instead of by model: the model that starts soonest, then the cheapest."""

from decimal import Decimal

import pytest
from django.core.exceptions import ValidationError

from leasing.choices import LeaseStatus
from tests.factories import CardModelFactory, make_node
from tests.leasing.conftest import ask, hours


@pytest.fixture
def mixed_pool(db):
    big = CardModelFactory(
        slug="big-80",
        memory_gb=Decimal("80"),
        fp8_tflops=Decimal("1979"),
        price_per_hour=Decimal("30"),
    )
    cheap = CardModelFactory(
        slug="cheap-80", memory_gb=Decimal("80"), fp8_tflops=None, price_per_hour=Decimal("12")
    )
    small = CardModelFactory(
        slug="small-24", memory_gb=Decimal("24"), fp8_tflops=None, price_per_hour=Decimal("3")
    )
    make_node(big, cards=2, domains=1, hostname="big")
    make_node(cheap, cards=2, domains=1, hostname="cheap")
    make_node(small, cards=2, domains=1, hostname="small")
    return big, cheap, small


def test_cheapest_model_meeting_requirements_free_now(frozen, alice, vision, mixed_pool):
    big, cheap, small = mixed_pool
    lease = ask(alice, vision, None, requirements={"min_memory_gb": Decimal("40")})
    assert lease.card_model == cheap and lease.status == LeaseStatus.PROVISIONING
    assert lease.requirements == {"min_memory_gb": 40.0}


def test_precision_requirement_narrows_the_choice(frozen, alice, vision, mixed_pool):
    big, cheap, small = mixed_pool
    assert ask(alice, vision, None, requirements={"precision": "fp8"}).card_model == big


def test_a_model_free_now_beats_a_cheaper_busy_one(frozen, alice, vision, mixed_pool):
    big, cheap, small = mixed_pool
    ask(alice, vision, cheap, count=2, duration=hours(5))
    assert ask(alice, vision, None, requirements={"min_memory_gb": 40}).card_model == big


def test_nothing_meets_the_requirements(frozen, alice, vision, mixed_pool):
    with pytest.raises(ValidationError, match="No card model in the pool meets"):
        ask(alice, vision, None, requirements={"min_memory_gb": 500})
    with pytest.raises(ValidationError, match="Bad requirement: precision: ") as bad:
        ask(alice, vision, None, requirements={"precision": "fp4"})
    assert ".." not in str(bad.value) and "fp4" in str(bad.value)
    with pytest.raises(ValidationError, match="Name a card model"):
        ask(alice, vision, None)


def test_api_accepts_requirements(api, frozen, alice, vision, mixed_pool):
    api.force_authenticate(alice)
    api.credentials(HTTP_ACCEPT_LANGUAGE="en")
    body = {"requirements": {"min_memory_gb": "40"}, "count": 1, "duration_minutes": 60}
    response = api.post("/api/v1/leases/", body, format="json")
    assert response.status_code == 201, response.content
    assert response.json()["card_model"] == "cheap-80"
    # A model and requirements: the model must meet them.
    both = api.post("/api/v1/leases/", body | {"card_model": "big-80"}, format="json")
    assert both.status_code == 201 and both.json()["card_model"] == "big-80"
    small = api.post("/api/v1/leases/", body | {"card_model": "small-24"}, format="json")
    assert small.status_code == 400 and "does not meet" in small.content.decode()
    neither = api.post("/api/v1/leases/", {"count": 1, "duration_minutes": 60}, format="json")
    assert neither.status_code == 400 and "card_model" in neither.json()
    bad = api.post("/api/v1/leases/", body | {"requirements": {"precision": "fp4"}}, format="json")
    assert bad.status_code == 400


def test_form_by_requirements(client, frozen, alice, mixed_pool):
    client.force_login(alice)
    client.cookies["django_language"] = "en"
    data = {
        "card_model": "",
        "min_memory_gb": "40",
        "precision": "",
        "count": 1,
        "duration": 1,
        "unit": "hours",
        "start": "now",
        "team": "vision",
        "priority": "normal",
        "purpose": "inference",
        "same_node": "on",
    }
    response = client.post("/leases/new/", data)
    assert response.status_code == 302, response.context["form"].errors
    empty = client.post("/leases/new/", data | {"min_memory_gb": ""})
    assert empty.status_code == 200
    assert "Pick a card model" in empty.content.decode()
