"""A node's agent may report only an address of its own node for a session (issue #28):
``host`` or ``host:port`` (the session's port), the host being the node's hostname, an
address it resolves to, or one an operator recorded on the node. Anything else fails the
session with the reason, and the proxy is never told to go there."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError
from django.test import Client
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from inventory.models import Node
from inventory.telemetry import node_token_issue
from leasing.lifecycle import provisioning
from leasing.workbench import addresses, sessions
from tests.factories import CardModelFactory, make_node
from tests.leasing.conftest import ask


@pytest.fixture
def node(db, monkeypatch):
    model = CardModelFactory(slug="addr-a10", name="A10", vendor="nvidia")
    node = make_node(model, cards=2, hostname="gpu7")
    node.session_addresses = ["10.0.0.5", "fd00::7"]
    node.save()
    resolved = {"gpu7": {"192.0.2.7"}}
    monkeypatch.setattr(addresses, "_resolved", lambda name: resolved.get(name, set()))
    return node


@pytest.mark.parametrize(
    ("given", "stored"),
    [
        ("gpu7", "gpu7"),
        ("GPU7", "gpu7"),
        ("gpu7:20001", "gpu7"),
        ("192.0.2.7", "192.0.2.7"),
        ("192.0.2.7:20001", "192.0.2.7"),
        ("10.0.0.5", "10.0.0.5"),
        ("fd00::7", "[fd00::7]"),
        ("[fd00::7]:20001", "[fd00::7]"),
    ],
)
def test_the_nodes_own_addresses_pass(node, given, stored):
    assert addresses.session_address_check(node=node, address=given, port=20001) == stored


@pytest.mark.parametrize(
    "given",
    [
        "127.0.0.1:8185#",  # the re-test's: nginx then answered 500
        "127.0.0.1",  # loopback: not recorded, not what gpu7 resolves to
        "10.0.0.6",
        "gpu8",
        "gpu7:20002",  # another port
        "gpu7/evil",
        "user@gpu7",
        "[10.0.0.5]",
        "169.254.169.254",
        "gpu7.evil.example",
        "",
    ],
)
def test_anything_else_is_refused(node, given):
    with pytest.raises(ValidationError):
        addresses.session_address_check(node=node, address=given, port=20001)


@given(st.text(max_size=70))
@settings(max_examples=300, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_any_text_is_an_address_of_the_node_or_a_refusal(node, text):
    try:
        host = addresses.session_address_check(node=node, address=text, port=20001)
    except ValidationError as exc:
        assert exc.messages
    else:
        assert host in {"gpu7", "192.0.2.7", "10.0.0.5", "[fd00::7]"}


def test_a_report_with_a_foreign_address_fails_the_session(node, alice, vision):
    lease = ask(alice, vision, node.cards.first().card_model, start_at=None)
    assert provisioning.provision_step(lease_id=lease.pk)
    lease.refresh_from_db()
    session = sessions.session_open(lease=lease, user=alice)
    agent = Client(HTTP_AUTHORIZATION=f"Node {node_token_issue(node=node)}")
    report = {"sessions": [{"id": session.pk, "state": "running", "address": "127.0.0.1:8185#"}]}
    agent.post("/api/v1/agent/sessions/", report, content_type="application/json")
    session.refresh_from_db()
    assert session.status == "failed" and session.address == ""
    assert "127.0.0.1:8185#" in session.failure_reason


def test_an_operator_records_only_ip_addresses(node):
    node.session_addresses = ["10.0.0.5", "not an address"]
    with pytest.raises(ValidationError):
        node.full_clean()
    assert Node.objects.get(pk=node.pk).session_addresses == ["10.0.0.5", "fd00::7"]
