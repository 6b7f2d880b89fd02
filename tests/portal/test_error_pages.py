"""The portal's own error pages, in the reader's language, never Django's debug pages."""

import pytest
from django.core.exceptions import PermissionDenied
from django.test import Client
from django.urls import include, path


def _boom(request):
    raise RuntimeError("boom")


def _refuse(request):
    raise PermissionDenied


# This module is also the URLconf of the tests marked with it: the site plus two failing views.
urlpatterns = [
    path("boom/", _boom),
    path("refuse/", _refuse),
    path("", include("portal.urls")),
]


def test_404_is_the_portals_own_page_in_the_readers_language(client, alice, settings):
    assert settings.DEBUG is False
    client.force_login(alice)
    en = client.get("/no/such/page/", HTTP_ACCEPT_LANGUAGE="en").content.decode()
    assert "Page not found" in en and "site-header" in en  # the site's frame
    assert "api/v1/auth/token/" not in en and "URLconf" not in en  # no list of addresses
    zh = client.get("/no/such/page/", HTTP_ACCEPT_LANGUAGE="zh-hans")
    assert zh.status_code == 404 and "页面不存在" in zh.content.decode()


def test_404_for_strangers_too(client, db):
    page = client.get("/no/such/page/", HTTP_ACCEPT_LANGUAGE="en")
    assert page.status_code == 404 and "Page not found" in page.content.decode()


@pytest.mark.urls("tests.portal.test_error_pages")
def test_403_and_500_are_the_portals_own_pages(alice):
    browser = Client(raise_request_exception=False, HTTP_ACCEPT_LANGUAGE="en")
    browser.force_login(alice)
    refused = browser.get("/refuse/")
    assert refused.status_code == 403 and "Not allowed" in refused.content.decode()
    failed = browser.get("/boom/")
    assert failed.status_code == 500 and "Something went wrong" in failed.content.decode()
    zh = Client(raise_request_exception=False, HTTP_ACCEPT_LANGUAGE="zh-hans").get("/boom/")
    assert "出错了" in zh.content.decode()
