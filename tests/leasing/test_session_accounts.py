"""The portal user → Unix account mapping (leasing.workbench.accounts) and the agent's side of
it: managed accounts created on demand, remembered, and locked when their person leaves.
No Unix user is needed: the agent's accounts are a fake passwd here (the real ones are
exercised in a throwaway /etc by tests/e2e/test_sessions_local_agent.py)."""

from __future__ import annotations

import os

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.test import Client
from hypothesis import given
from hypothesis import strategies as st

from inventory import agent_sessions
from inventory.telemetry import node_token_issue
from leasing.lifecycle import provisioning
from leasing.workbench import accounts, sessions
from tests.factories import CardModelFactory, UserFactory, make_node
from tests.leasing.conftest import ask


@pytest.fixture
def mode(settings):
    def use(value):
        settings.CARDPOOL_SESSIONS = {**settings.CARDPOOL_SESSIONS, "ACCOUNTS": value}

    return use


def test_each_mode_names_the_account(mode, alice, settings, tmp_path):
    alice.profile.slurm_user = "a.smith"
    alice.profile.save()
    mode("same")
    assert accounts.account_item(alice) == {"user": "alice"}
    mode("profile")
    assert accounts.account_item(alice) == {"user": "a.smith"}
    mode("managed")
    settings.CARDPOOL_SESSIONS = {**settings.CARDPOOL_SESSIONS, "WORKSPACE_ROOT": str(tmp_path)}
    assert accounts.account_item(alice) == {
        "user": "cardpool-alice",
        "create": True,
        "home": str(tmp_path / "homes" / "cardpool-alice"),
    }
    mode("ldap")
    with pytest.raises(ImproperlyConfigured):
        accounts.account_name(alice)


@given(username=st.text(min_size=1, max_size=40))
def test_a_managed_name_is_one_the_agent_will_create_and_names_one_person(username):
    user = UserFactory.build(username=username, pk=4321)
    name = accounts.managed_name(user)
    assert agent_sessions.MANAGED.match(name), name
    assert name in ("cardpool-4321", f"cardpool-{username}")


def test_the_agent_is_told_to_create_managed_accounts_and_learns_who_left(mode, alice, vision):
    mode("managed")
    model = CardModelFactory(slug="acc-a10", name="A10", vendor="nvidia")
    node = make_node(model, cards=2, hostname="acc-node")
    lease = ask(alice, vision, model)
    assert provisioning.provision_step(lease_id=lease.pk)
    lease.refresh_from_db()
    sessions.session_open(lease=lease, user=alice)
    agent = Client(HTTP_AUTHORIZATION=f"Node {node_token_issue(node=node)}")
    [item] = agent.get("/api/v1/agent/work/").json()["sessions"]
    assert (item["user"], item["create"]) == ("cardpool-alice", True)

    odd = UserFactory(username="Dr.Who@example.org")
    names = ["cardpool-alice", accounts.managed_name(odd), "cardpool-nobody", "root"]
    ask_leavers = lambda: agent.post(  # noqa: E731
        "/api/v1/agent/accounts/", {"accounts": names}, content_type="application/json"
    ).json()["leavers"]
    assert ask_leavers() == ["cardpool-nobody"]  # never a name the agent did not create
    odd.is_active = False
    odd.save()
    assert ask_leavers() == sorted([accounts.managed_name(odd), "cardpool-nobody"])
    refused = agent.post(
        "/api/v1/agent/accounts/", {"accounts": [], "x": 1}, content_type="application/json"
    )
    assert refused.status_code == 400 and "x" in refused.json()


class FakePasswd(agent_sessions.Accounts):
    """Accounts in a dict; creating and locking are recorded, nothing touches the machine."""

    def __init__(self):
        super().__init__()
        self.users: dict[str, agent_sessions.Account] = {}
        self.locked: list[str] = []

    def lookup(self, name):
        return self.users.get(name)

    def create(self, name, *, home):
        self.users[name] = agent_sessions.Account(name, 5000 + len(self.users), 5000, home)
        return self.users[name]

    def lock(self, name):
        self.locked.append(name)
        return True


def test_the_keeper_creates_remembers_and_locks_managed_accounts(tmp_path):
    passwd = FakePasswd()
    keeper = agent_sessions.SessionKeeper(tmp_path / "state", accounts=passwd, log=lambda m: None)
    item = {"user": "cardpool-bob", "create": True, "home": str(tmp_path / "h" / "cardpool-bob")}
    assert keeper.account(item).home == tmp_path / "h" / "cardpool-bob"
    with pytest.raises(agent_sessions.AccountError, match="no Unix account carol"):
        keeper.account({"user": "carol"})  # not managed: never created
    assert keeper.managed() == ["cardpool-bob"]
    assert keeper.lock_leavers(["cardpool-bob", "carol"]) == 1
    assert passwd.locked == ["cardpool-bob"] and keeper.managed() == []


def test_the_agent_creates_only_managed_names_and_never_runs_as_root(tmp_path):
    real = agent_sessions.Accounts()
    with pytest.raises(agent_sessions.AccountError, match="only cardpool-<name>"):
        real.create("alice", home=tmp_path / "alice")
    with pytest.raises(agent_sessions.AccountError, match="never run as root"):
        real.get({"user": "root"})
    assert real.lookup("cardpool-surely-not-here") is None
    if os.geteuid() != 0:
        with pytest.raises(agent_sessions.AccountError, match="must run as root"):
            real.create("cardpool-x", home=tmp_path / "x")
