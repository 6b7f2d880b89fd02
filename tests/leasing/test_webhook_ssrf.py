"""Webhooks cannot reach inside the network (SSRF) unless CARDPOOL_WEBHOOK_ALLOW_PRIVATE is on:
refused when added (a clear form error) and checked again at every send, on every address."""

from __future__ import annotations

import socket

import pytest
from django.core.exceptions import ValidationError

from leasing.models import Webhook
from leasing.notify import services as notify_services
from leasing.notify import webhooks

INSIDE = [
    "http://127.0.0.1:8000/hook",
    "http://localhost/hook",
    "http://10.1.2.3/hook",
    "http://192.168.0.10/hook",
    "http://169.254.169.254/latest/meta-data/",
    "http://[::1]/hook",
    "http://[::ffff:127.0.0.1]/hook",
    "http://100.64.0.1/hook",
    "http://0.0.0.0/hook",
    # IPv6 forms that embed 127.0.0.1 / 10.0.0.1: NAT64, 6to4, IPv4-compatible, local NAT64.
    "http://[64:ff9b::7f00:1]/hook",
    "http://[2002:7f00:1::]/hook",
    "http://[::127.0.0.1]/hook",
    "http://[64:ff9b:1::a00:1]/hook",
    "http://[2002:a00:1::1]/hook",
]


def _resolves_to(monkeypatch, *ips):
    def fake(host, port, *args, **kwargs):
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (ip, port or 80)) for ip in ips]

    monkeypatch.setattr(webhooks.socket, "getaddrinfo", fake)


@pytest.mark.parametrize("url", INSIDE)
def test_adding_an_inside_address_is_refused(alice, url):
    with pytest.raises(ValidationError) as exc:
        notify_services.webhook_create(user=alice, name="x", url=url)
    assert "inside the network" in str(exc.value.message_dict["url"])


def test_a_name_with_any_private_address_is_refused(alice, monkeypatch):
    _resolves_to(monkeypatch, "93.184.216.34", "10.0.0.5")
    with pytest.raises(ValidationError):
        notify_services.webhook_create(user=alice, name="x", url="https://mixed.example/hook")


def test_the_form_shows_the_error(alice, client):
    client.force_login(alice)
    response = client.post(
        "/notifications/settings/webhooks/",
        {"name": "x", "url": "http://127.0.0.1/hook", "format": "generic"},
        HTTP_ACCEPT_LANGUAGE="en",
    )
    assert "inside the network" in response.content.decode()
    assert not Webhook.objects.exists()


def test_operators_may_allow_private_addresses(alice, settings):
    settings.CARDPOOL_WEBHOOK_ALLOW_PRIVATE = True
    hook = notify_services.webhook_create(user=alice, name="x", url="http://10.1.2.3/hook")
    assert hook.pk


@pytest.mark.parametrize("url", INSIDE)
def test_sending_to_an_inside_address_is_blocked_before_connecting(url, monkeypatch):
    """The name is resolved and checked at send time too (DNS may change after the check)."""

    def no_connect(*args, **kwargs):
        raise AssertionError("connected")

    monkeypatch.setattr(webhooks.socket.socket, "connect", no_connect)
    response = webhooks.http_post(webhooks.HttpRequest(url=url, body=b"{}", headers={}))
    assert response.blocked and response.status is None
    assert "private, loopback or link-local" in response.error
    verdict = webhooks.judge("generic", response)
    assert not verdict.ok and not verdict.retry  # failed for good, no retries


def test_rebinding_to_a_private_address_at_send_is_blocked(monkeypatch):
    _resolves_to(monkeypatch, "10.0.0.5")
    response = webhooks.http_post(
        webhooks.HttpRequest(url="https://rebind.example/hook", body=b"{}", headers={})
    )
    assert response.blocked


@pytest.mark.parametrize(
    ("ip", "private"),
    [
        ("64:ff9b::7f00:1", True),
        ("2002:7f00:1::", True),
        ("::127.0.0.1", True),
        ("::ffff:10.0.0.1", True),
        ("2001:0:4136:e378:8000:63bf:3fff:fdd2", True),  # Teredo (2001::/32) is never global
        ("64:ff9b::808:808", False),  # NAT64 of a public address stays allowed
        ("2002:808:808::", False),  # 6to4 of a public address
        ("2001:4860:4860::8888", False),
        ("8.8.8.8", False),
    ],
)
def test_ipv6_forms_are_judged_by_the_ipv4_address_they_embed(ip, private):
    assert webhooks.is_private_address(ip) is private
