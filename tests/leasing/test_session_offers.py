"""Offer only what works: a node's agent says what it can run, the lease page and API offer
only that and say why not otherwise, and a failed session reaches its holder in their
language with what to do (never the node's raw words)."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError
from django.test import Client

from inventory.models import Node
from inventory.telemetry import node_token_issue
from leasing.lifecycle import provisioning
from leasing.models import Session
from leasing.workbench import offers, sessions
from tests.factories import CardModelFactory, make_node
from tests.leasing.conftest import ask


def _lease(user, team, *, graphics=False, reported=None):
    model = CardModelFactory(slug="off-l40", name="L40S", vendor="nvidia", graphics=graphics)
    node = make_node(model, cards=2, hostname="off-node", session_offers=reported or {})
    lease = ask(user, team, model)
    assert provisioning.provision_step(lease_id=lease.pk)
    lease.refresh_from_db()
    return lease, node


def _page(user, lease) -> str:
    client = Client()
    client.force_login(user)
    client.cookies["django_language"] = "en"
    return client.get(f"/leases/{lease.pk}/").content.decode()


def test_a_node_no_agent_reports_from_offers_nothing_and_says_why(alice, vision):
    lease, _node = _lease(alice, vision)
    with pytest.raises(ValidationError, match="No session agent runs on off-node"):
        sessions.session_open(lease=lease, user=alice)
    assert not Session.objects.exists()
    page = _page(alice, lease)
    assert "Open JupyterLab" not in page and "cardpool-agent --sessions" in page


def test_the_agent_says_what_the_node_can_run_and_only_that_is_offered(alice, vision, api):
    lease, node = _lease(alice, vision, graphics=True)
    agent = Client(HTTP_AUTHORIZATION=f"Node {node_token_issue(node=node)}")
    agent.get("/api/v1/agent/work/?can=jupyterlab,terminal,fence&gl=llvmpipe")
    node.refresh_from_db()
    assert node.session_offers["can"] == ["fence", "jupyterlab", "terminal"]
    api.force_authenticate(alice)
    answer = {o["kind"]: o for o in api.get(f"/api/v1/leases/{lease.pk}/session/offers/").json()}
    assert answer["lab"]["offered"] and answer["terminal"]["offered"]
    assert not answer["desktop"]["offered"] and "TigerVNC" in answer["desktop"]["reason"]
    assert not answer["keys"]["offered"] and "SSH" in answer["keys"]["reason"]
    with pytest.raises(ValidationError, match="TigerVNC"):
        sessions.session_open(lease=lease, user=alice, want="desktop")
    page = _page(alice, lease)
    assert "Open JupyterLab" in page and "Open desktop" not in page and "TigerVNC" in page
    assert 'id="ssh-command-' not in page  # no key logins there: the reason instead

    agent.get("/api/v1/agent/work/?can=jupyterlab,terminal,desktop&gl=llvmpipe")
    [desktop] = [o for o in offers.lease_offers(lease).values() if o.kind == "desktop"]
    assert desktop.ok and "llvmpipe" in desktop.note
    assert "Open desktop" in _page(alice, lease)
    agent.get("/api/v1/agent/work/?can=jupyterlab,keys")
    assert "ssh -t cardpool-alice@off-node" not in _page(alice, lease)  # profile mode: alice
    assert "ssh -t alice@off-node" in _page(alice, lease)
    agent.get("/api/v1/agent/work/?can=jupyterlab,desktop&gl=nvidia")
    assert "nvidia EGL" in offers.lease_offers(lease)["desktop"].note
    before = Node.objects.get(pk=node.pk).session_offers
    agent.get("/api/v1/agent/work/")  # an agent that says nothing changes nothing
    assert Node.objects.get(pk=node.pk).session_offers == before


def test_the_desktop_is_offered_on_graphics_cards_only(alice, vision):
    lease, _ = _lease(alice, vision, reported={"can": ["jupyterlab", "desktop"], "gl": ""})
    refused = offers.lease_offers(lease)["desktop"]
    assert not refused.ok and "graphics-capable" in refused.reason


def test_a_failure_reaches_the_holder_in_their_language_without_the_nodes_words(alice, vision, api):
    lease, node = _lease(alice, vision, reported={"can": ["jupyterlab", "terminal"]})
    session = sessions.session_open(lease=lease, user=alice)
    agent = Client(HTTP_AUTHORIZATION=f"Node {node_token_issue(node=node)}")
    raw = "getpwnam(): name not found: 'alice'"
    report = {"sessions": [{"id": session.pk, "state": "failed", "kind": "no_account",
                            "message": raw}]}  # fmt: skip
    agent.post("/api/v1/agent/sessions/", report, content_type="application/json")
    session.refresh_from_db()
    assert session.failure_kind == "no_account" and session.failure_reason == raw  # operator's
    alice.profile.language = "zh-hans"
    alice.profile.save(update_fields=["language"])
    client = Client()
    client.force_login(alice)
    page = client.get(f"/leases/{lease.pk}/").content.decode()
    assert "off-node" in page and "getpwnam" not in page
    assert "Unix 账户" in page
    api.force_authenticate(alice)
    body = api.get(f"/api/v1/leases/{lease.pk}/session/", HTTP_ACCEPT_LANGUAGE="en").json()
    assert body["failure_kind"] == "no_account" and "getpwnam" not in str(body)
    bad = {"sessions": [{"id": session.pk, "state": "failed", "kind": "oops"}]}
    assert (
        agent.post("/api/v1/agent/sessions/", bad, content_type="application/json").status_code
        == 400
    )
