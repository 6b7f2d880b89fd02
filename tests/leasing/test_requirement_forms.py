"""The new requirement fields on the request form, the estimate page and both APIs: one
declaration (inventory.requirements), the same rules, the default stack shown."""

from __future__ import annotations

import re

import pytest

from inventory.models import CardModel
from leasing.choices import LeaseStatus
from leasing.models import Lease
from portal.demo import seed_inventory
from tests.leasing.conftest import ask, hours

pytestmark = pytest.mark.django_db


@pytest.fixture
def demo(db):
    seed_inventory()


@pytest.fixture
def browser(client, alice):
    client.force_login(alice)
    client.cookies["django_language"] = "en"
    return client


def form_data(**kw):
    return {
        "card_model": "",
        "count": 1,
        "duration": 1,
        "unit": "hours",
        "start": "now",
        "team": "vision",
        "priority": "normal",
        "purpose": "inference",
        "same_node": "on",
    } | kw


def test_the_three_shapes_come_from_one_declaration():
    from inventory.filters import CardModelFilterSet
    from inventory.requirements import REQUIREMENTS
    from inventory.serializers import RequirementsSerializer
    from leasing.lifecycle.forms import LeaseRequestForm

    names = [r.name for r in REQUIREMENTS]
    # the catalogue's FilterSet adds only its display filter ("pool": in the pool or all)
    assert [n for n in CardModelFilterSet.base_filters if n != "pool"] == names
    assert list(RequirementsSerializer().fields) == names
    form_names = [n for n in LeaseRequestForm.base_fields if n in names]
    assert form_names == names


def test_the_request_form_has_vendor_interconnect_stack_and_region(browser, frozen, demo):
    page = browser.get("/leases/new/").content.decode()
    for name in ("vendor", "interconnect", "stack", "min_stack_version", "region", "network"):
        assert f'name="{name}"' in page
    assert 'value="shenzhen-edge"' in page


def test_the_default_stack_is_the_last_leases_and_shown(browser, frozen, demo, alice, vision):
    page = browser.get("/leases/new/").content.decode()
    assert "data-default-stack" not in page  # nothing leased yet: no default
    ask(alice, vision, CardModel.objects.get(slug="ascend-910b"))
    page = browser.get("/leases/new/").content.decode()
    assert 'data-default-stack="cann"' in page
    assert re.search(r'<option value="cann" selected>', page)
    # a link from the advisor says its own stack (empty: any)
    linked = browser.get("/leases/new/", {"card_model": "a100-80g-sxm", "stack": ""})
    assert not re.search(r'<option value="cann" selected>', linked.content.decode())
    estimate = browser.get("/leases/estimate/").content.decode()
    assert re.search(r'<option value="cann" selected>', estimate)


def test_the_request_button_prefills_the_stack_only_where_it_fits(
    browser, frozen, demo, alice, vision
):
    """The dashboard's "Request" link for an Ascend card: the remembered CUDA stack is not
    pre-filled (the preview would refuse the request for a stack nobody chose)."""
    ask(alice, vision, CardModel.objects.get(slug="a100-80g-sxm"))  # remembered: CUDA
    ascend = browser.get("/leases/new/", {"card_model": "ascend-910b"}).content.decode()
    assert not re.search(r'<option value="cuda" selected>', ascend)
    assert "data-default-stack" not in ascend
    preview = browser.get(
        "/leases/preview/", form_data(card_model="ascend-910b", stack="")
    ).content.decode()
    assert 'data-verdict="refused"' not in preview
    a100 = browser.get("/leases/new/", {"card_model": "a100-80g-sxm"}).content.decode()
    assert re.search(r'<option value="cuda" selected>', a100)  # it fits: kept
    plain = browser.get("/leases/new/").content.decode()
    assert re.search(r'<option value="cuda" selected>', plain)
    # Each model says its stack, so the page clears the default when another one is chosen.
    assert re.search(r'<option value="ascend-910b" data-stack="cann"', plain)


def test_the_form_places_by_stack_and_region(browser, frozen, demo):
    response = browser.post(
        "/leases/new/", form_data(stack="cuda", region="shenzhen-edge", min_memory_gb="40")
    )
    assert response.status_code == 302, response.context["form"].errors
    lease = Lease.objects.get()
    assert lease.card_model.slug == "l40s" and lease.status == LeaseStatus.PROVISIONING
    assert lease.requirements == {"min_memory_gb": 40.0, "stack": "cuda", "region": "shenzhen-edge"}
    assert {a.card.node.region.slug for a in lease.allocations.all()} == {"shenzhen-edge"}


def test_the_preview_and_the_submit_refuse_a_model_of_another_stack(browser, frozen, demo):
    data = form_data(card_model="ascend-910b", stack="cuda")
    preview = browser.get("/leases/preview/", data).content.decode()
    assert "does not meet the requirement" in preview
    submitted = browser.post("/leases/new/", data)
    assert (
        submitted.status_code == 200
        and "does not meet the requirement" in submitted.content.decode()
    )
    assert not Lease.objects.exists()
    bad = browser.post("/leases/new/", form_data(min_stack_version="12.2"))
    assert "Name the software stack" in bad.content.decode()


def test_the_preview_counts_only_the_region_asked_for(browser, frozen, demo, alice, vision):
    l40s = CardModel.objects.get(slug="l40s")
    ask(alice, vision, l40s, count=4, duration=hours(3))
    data = form_data(card_model="l40s", region="shenzhen-edge")
    assert 'data-verdict="later"' in browser.get("/leases/preview/", data).content.decode()
    elsewhere = form_data(card_model="l40s", region="beijing")
    page = browser.get("/leases/preview/", elsewhere).content.decode()
    assert "No NVIDIA L40S cards are on nodes meeting region=beijing" in page


def test_the_estimate_page_takes_stack_and_region(browser, frozen, demo):
    page = browser.get(
        "/leases/estimate/",
        {"task": "lora", "params_b": "7", "duration": "2", "stack": "cuda", "region": "beijing"},
    ).content.decode()
    offered = re.findall(r'class="option[^"]*" data-card-model="([^"]+)"', page)
    assert offered and set(offered) <= {"a100-80g-sxm", "h800"}
    assert "stack=cuda" in page and "region=beijing" in page
    more = browser.get(
        "/leases/estimate/", {"task": "lora", "params_b": "7", "duration": "2", "stack": ""}
    ).content.decode()
    assert "data-more" in more  # the options past the first three are folded


def test_the_apis_take_requirements(api, frozen, demo, alice):
    api.force_authenticate(alice)
    api.credentials(HTTP_ACCEPT_LANGUAGE="en")
    body = {
        "profile": {"task": "lora", "params_b": 7},
        "duration_minutes": 120,
        "requirements": {"stack": "cann"},
    }
    estimate = api.post("/api/v1/estimate/", body, format="json").json()
    assert [o["card_model"] for o in estimate["options"]] == ["ascend-910b"]
    assert estimate["requirements"] == {"stack": "cann"}
    assert {"nodes", "efficiency", "fit", "score", "energy_cost"} <= set(estimate["options"][0])
    lease = api.post("/api/v1/leases/", body, format="json")
    assert lease.status_code == 201, lease.content
    assert lease.json()["card_model"] == "ascend-910b"
    unknown = api.post(
        "/api/v1/leases/",
        {
            "card_model": "l40s",
            "count": 1,
            "duration_minutes": 60,
            "requirements": {"region": "mars"},
        },
        format="json",
    )
    assert unknown.status_code == 400 and "Unknown region" in unknown.content.decode()
    extra = api.post(
        "/api/v1/leases/",
        {
            "card_model": "l40s",
            "count": 1,
            "duration_minutes": 60,
            "requirements": {"colour": "red"},
        },
        format="json",
    )
    assert extra.status_code == 400 and "colour" in extra.content.decode()


def test_the_profile_stack_comes_before_the_last_lease(browser, frozen, demo, alice, vision):
    ask(alice, vision, CardModel.objects.get(slug="ascend-910b"))
    saved = browser.post("/accounts/profile/", {"timezone": "", "language": "en", "stack": "maca"})
    assert saved.status_code == 302
    alice.profile.refresh_from_db()
    assert alice.profile.stack == "maca"
    page = browser.get("/leases/new/").content.decode()
    assert 'data-default-stack="maca"' in page
    bad = browser.post("/accounts/profile/", {"timezone": "", "language": "en", "stack": "opencl"})
    assert bad.status_code == 400
