"""The catalogue's filters are the requirements' FilterSet: stack, region, network and stack
version filter the card models on the page and in the API alike."""

from __future__ import annotations

import pytest

from inventory.models import Node
from portal.demo import seed_inventory

pytestmark = pytest.mark.django_db


@pytest.fixture
def demo(db):
    seed_inventory()


def slugs(response) -> set[str]:
    body = response.json()
    return {m["slug"] for m in body.get("results", body)}


def test_the_api_filters_by_stack_region_network_and_version(api, alice, demo):
    api.force_authenticate(alice)
    api.credentials(HTTP_ACCEPT_LANGUAGE="en")
    url = "/api/v1/card-models/"
    assert slugs(api.get(url, {"stack": "cann"})) == {"ascend-910b"}
    edge = slugs(api.get(url, {"region": "shenzhen-edge"}))
    assert edge == {"rtx-4090", "kunlunxin-r200", "mtt-s4000", "l40s"}
    # regions inside a region count
    assert "a100-80g-sxm" in slugs(api.get(url, {"region": "north-dc"}))
    assert slugs(api.get(url, {"network": "ib"})) == {"a100-80g-sxm", "h800", "v100-32g"}
    # the demo's V100 and T4 nodes run CUDA 11.8, the others 12.4
    newer = {"a100-80g-sxm", "h800", "rtx-4090", "l40s"}
    assert slugs(api.get(url, {"stack": "cuda", "min_stack_version": "12.0"})) == newer
    Node.objects.filter(hostname="bj-h800-01").update(software_versions={"CUDA": "12.8"})
    assert slugs(api.get(url, {"stack": "cuda", "min_stack_version": "12.6"})) == {"h800"}
    bad = api.get(url, {"min_stack_version": "12.0"})
    assert bad.status_code == 400 and "Name the software stack" in bad.content.decode()
    assert api.get(url, {"region": "mars"}).status_code == 400


def test_the_catalogue_page_shows_the_new_filters(client, alice, demo):
    client.force_login(alice)
    client.cookies["django_language"] = "en"
    page = client.get("/inventory/", {"stack": "cann"}).content.decode()
    for name in ("stack", "region", "network", "min_stack_version"):
        assert f'name="{name}"' in page
    assert "Ascend 910B2" in page and "NVIDIA A100 80GB SXM" not in page
