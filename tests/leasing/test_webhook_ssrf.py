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
    # Special-purpose blocks Python calls global (or did): IETF protocol assignments,
    # AS112, AMT, the documentation and benchmarking ranges, ORCHIDv2, SRv6 SIDs.
    "http://192.0.0.8/",
]

# One address from every IANA special-purpose block (and multicast).
SPECIAL = [
    "0.1.2.3", "10.0.0.1", "100.64.0.1", "127.0.0.2", "169.254.1.1", "172.16.0.1",
    "192.0.0.8", "192.0.0.9", "192.0.0.10", "192.0.0.170", "192.0.2.1", "192.31.196.1",
    "192.52.193.1", "192.88.99.1", "192.168.1.1", "192.175.48.1", "198.18.0.1",
    "198.51.100.1", "203.0.113.1", "240.0.0.1", "255.255.255.255", "224.0.0.1",
    "::", "::1", "::ffff:192.0.0.8", "64:ff9b::c000:8", "64:ff9b:1::1", "100::1",
    "100:0:0:1::1", "2001::1", "2001:1::1", "2001:1::2", "2001:1::3", "2001:2::1",
    "2001:3::1", "2001:4:112::1", "2001:10::1", "2001:20::1", "2001:30::1", "2001:db8::1",
    "2002:808:808::", "2620:4f:8000::1", "3fff::1", "5f00::1", "fc00::1", "fe80::1", "ff02::1",
]  # fmt: skip


@pytest.mark.parametrize("ip", SPECIAL)
def test_every_special_purpose_block_is_refused(ip):
    assert webhooks.is_private_address(ip)


@pytest.mark.parametrize("ip", ["8.8.8.8", "1.1.1.1", "2606:4700:4700::1111", "64:ff9b::808:808"])
def test_public_addresses_pass(ip):
    assert not webhooks.is_private_address(ip)


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
        ("2002:808:808::", True),  # 6to4 (2002::/16) is a special-purpose block
        ("2001:4860:4860::8888", False),
        ("8.8.8.8", False),
    ],
)
def test_ipv6_forms_are_judged_by_the_ipv4_address_they_embed(ip, private):
    assert webhooks.is_private_address(ip) is private
