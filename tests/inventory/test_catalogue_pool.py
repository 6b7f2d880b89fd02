"""The catalogue shows the models this pool has unless asked for every model; a model's page
leads straight to a request."""

import pytest

from tests.factories import CardModelFactory, make_node


@pytest.fixture
def models(db):
    held = CardModelFactory(slug="held-model", name="Held model")
    make_node(held, cards=2, domains=1, hostname="gpu-h")
    CardModelFactory(slug="spec-only", name="Spec only")
    return held


def test_catalogue_lists_models_in_this_pool_by_default(client, alice, models):
    client.force_login(alice)
    page = client.get("/inventory/").content.decode()
    assert "Held model" in page and "Spec only" not in page
    every = client.get("/inventory/?pool=all").content.decode()
    assert "Held model" in every and "Spec only" in every


def test_the_api_lists_every_model_unless_asked(client, alice, models):
    client.force_login(alice)
    everyone = {m["slug"] for m in client.get("/api/v1/card-models/").json()["results"]}
    assert {"held-model", "spec-only"} <= everyone
    pool = {m["slug"] for m in client.get("/api/v1/card-models/?pool=in").json()["results"]}
    assert pool == {"held-model"}


def test_a_model_page_has_a_request_button(client, alice, models):
    client.force_login(alice)
    page = client.get("/inventory/models/held-model/").content.decode()
    assert 'href="/leases/new/?card_model=held-model" data-action="request"' in page
    assert (
        'data-action="request"' not in client.get("/inventory/models/spec-only/").content.decode()
    )
