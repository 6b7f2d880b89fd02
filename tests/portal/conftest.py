"""Fixtures for sign-in tests: a clean cache (rate limits and throttles live there)."""

import pytest
from django.core.cache import cache


@pytest.fixture(autouse=True)
def clean_cache():
    cache.clear()
    yield
    cache.clear()


@pytest.fixture
def en_client(client):
    """A browser that reads English (the site default is zh-hans)."""
    client.defaults["HTTP_ACCEPT_LANGUAGE"] = "en"
    return client
