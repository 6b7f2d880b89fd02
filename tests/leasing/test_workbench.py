"""Environments (fit and refusals), SSH keys (parsing, install and removal by the agent),
workspaces (measured, warned), and who may reach a session (the proxy's question)."""

from __future__ import annotations

import os
import string
from datetime import timedelta
from urllib.parse import urlsplit

import pytest
from django.core.exceptions import PermissionDenied, ValidationError
from django.test import Client
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from inventory import agent_sessions
from inventory.telemetry import node_token_issue
from leasing.choices import LeaseStatus
from leasing.lifecycle import changes, provisioning
from leasing.models import (
    Environment,
    LeaseEvent,
    Notification,
    Session,
    SshKey,
    WorkspaceUsage,
)
from leasing.workbench import environments, keys, sessions, workspace
from leasing.workbench.views import proxy_secret
from portal.models import AuditEntry
from tests.factories import CardModelFactory, make_node
from tests.leasing.conftest import ask

ED25519 = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGyQ0wKOm9WJ0ctIqAavyfmTfNOl6lEs0YgxRoYpOtOS"
# ssh-keygen -lf on the key above
ED25519_FP = "SHA256:xoanCAyr9WyAVD6aAh1HH5Cscz4DOknvZsjYhjiNqoo"


@pytest.fixture
def a10(db):
    model = CardModelFactory(slug="wb-a10", name="A10", vendor="nvidia")
    make_node(model, cards=4, hostname="wb-node")
    return model


@pytest.fixture
def ascend(db):
    model = CardModelFactory(slug="wb-910b", name="910B", vendor="huawei")
    make_node(model, cards=4, hostname="wb-npu")
    return model


@pytest.fixture
def torch_env(db, a10):
    return Environment.objects.create(
        slug="torch", name="PyTorch", stack_family="cuda", stack_version="12.4", vendors=["nvidia"]
    )


def _active(user, team, model, **kw):
    lease = ask(user, team, model, **kw)
    assert provisioning.provision_step(lease_id=lease.pk)
    lease.refresh_from_db()
    return lease


# --- environments ----------------------------------------------------------------------


def test_environments_fit_by_vendor_or_listed_model(torch_env, a10, ascend):
    cann = Environment.objects.create(slug="cann", name="CANN 8", stack_family="cann")
    cann.card_models.add(ascend)
    assert environments.environments_for(a10) == [torch_env]
    assert environments.environments_for(ascend) == [cann]
    assert environments.environment_refusal(torch_env, a10) == ""
    reason = environments.environment_refusal(torch_env, ascend)
    assert "PyTorch" in reason and "910B" in reason and "nvidia" in reason
    torch_env.active = False
    torch_env.save()
    assert environments.environments_for(a10) == []
    assert environments.environment_refusal(torch_env, a10)


def test_an_unfitting_environment_is_refused_with_the_reason(api, alice, vision, ascend, torch_env):
    api.force_authenticate(alice)
    r = api.post(
        "/api/v1/leases/",
        {"card_model": ascend.slug, "count": 1, "duration_minutes": 60, "environment": "torch"},
        format="json",
    )
    assert r.status_code == 400
    assert "910B" in str(r.json()["environment"])
    assert not ascend.leases.exists()  # nothing half-written
    r = api.post(
        "/api/v1/leases/",
        {"card_model": ascend.slug, "count": 1, "duration_minutes": 60, "environment": "nope"},
        format="json",
    )
    assert r.status_code == 400 and "environment" in r.json()


def test_a_fitting_environment_is_kept_on_the_lease(api, alice, vision, a10, torch_env):
    api.force_authenticate(alice)
    r = api.post(
        "/api/v1/leases/",
        {"card_model": a10.slug, "count": 1, "duration_minutes": 60, "environment": "torch"},
        format="json",
    )
    assert r.status_code == 201, r.content
    assert r.json()["environment"] == "torch"
    assert a10.leases.get().environment == torch_env
    assert api.get(f"/api/v1/leases/{r.json()['id']}/").json()["environment"] == "torch"
    listed = api.get(f"/api/v1/environments/?card_model={a10.slug}").json()
    assert [e["slug"] for e in listed] == ["torch"]


def test_the_lease_page_offers_only_fitting_environments_and_refuses_others(
    alice, vision, a10, ascend, torch_env
):
    cann = Environment.objects.create(slug="cann", name="CANN 8", stack_family="cann")
    cann.card_models.add(ascend)
    lease = _active(alice, vision, a10)
    client = Client()
    client.force_login(alice)
    page = client.get(f"/leases/{lease.pk}/").content.decode()
    assert 'value="torch"' in page and 'value="cann"' not in page
    client.post(f"/leases/{lease.pk}/environment/", {"environment": "cann"})
    lease.refresh_from_db()
    assert lease.environment is None
    client.post(f"/leases/{lease.pk}/environment/", {"environment": "torch"})
    lease.refresh_from_db()
    assert lease.environment == torch_env
    assert LeaseEvent.objects.filter(lease=lease, kind="environment_set").count() == 1


# --- SSH keys --------------------------------------------------------------------------


def test_a_key_is_parsed_and_fingerprinted_like_openssh():
    kind, blob, comment = keys.key_parse(f"{ED25519} me@laptop")
    assert (kind, comment) == ("ssh-ed25519", "me@laptop")
    assert keys.fingerprint(blob) == ED25519_FP


@pytest.mark.parametrize(
    "text",
    [
        "",
        "ssh-ed25519",
        "ssh-dss AAAAB3NzaC1kc3MAAACBAP",
        "ssh-ed25519 not-base64!!",
        ED25519.replace("ssh-ed25519", "ssh-rsa"),  # the blob says ed25519
        f"{ED25519}\n{ED25519}",
        'command="rm -rf /" ' + ED25519,
    ],
)
def test_what_is_not_one_public_key_is_refused(text):
    with pytest.raises(ValidationError):
        keys.key_parse(text)


@hsettings(max_examples=200, deadline=None)
@given(st.text(alphabet=string.printable + "éß中", max_size=120))
def test_any_text_is_a_key_or_a_clear_refusal(text):
    try:
        keys.key_parse(text)
    except ValidationError:
        pass


def test_keys_are_kept_once_per_user_and_audited(alice, bob):
    key = keys.ssh_key_add(user=alice, public_key=f"{ED25519} me@laptop")
    assert key.name == "me@laptop" and key.fingerprint == ED25519_FP
    with pytest.raises(ValidationError):
        keys.ssh_key_add(user=alice, public_key=ED25519)
    keys.ssh_key_add(user=bob, public_key=ED25519)  # someone else may hold the same key
    with pytest.raises(ValidationError):
        keys.ssh_key_remove(user=bob, key=key)
    keys.ssh_key_remove(user=alice, key=key)
    assert not SshKey.objects.filter(user=alice).exists()
    assert list(
        AuditEntry.objects.filter(actor=alice).values_list("action", flat=True).order_by("pk")
    ) == ["ssh_key_added", "ssh_key_removed"]


def test_the_ssh_key_api(api, alice, bob):
    api.force_authenticate(alice)
    r = api.post("/api/v1/ssh-keys/", {"public_key": ED25519, "name": "laptop"}, format="json")
    assert r.status_code == 201 and r.json()["fingerprint"] == ED25519_FP
    assert api.post("/api/v1/ssh-keys/", {"public_key": "nope"}, format="json").status_code == 400
    pk = r.json()["id"]
    api.force_authenticate(bob)
    assert api.get("/api/v1/ssh-keys/").json()["results"] == []
    assert api.delete(f"/api/v1/ssh-keys/{pk}/").status_code == 404
    api.force_authenticate(alice)
    assert api.delete(f"/api/v1/ssh-keys/{pk}/").status_code == 204


class HomesUnder(agent_sessions.Accounts):
    """A fake passwd: every name is an account with its home under *root*, owned by whoever
    runs the tests (nobody's uid when that is root): no Unix user alice needed."""

    def __init__(self, root):
        super().__init__()
        self.root = root

    def lookup(self, name):
        uid = os.getuid() or 65534
        return agent_sessions.Account(name, uid, uid, self.root / name)


def test_the_agent_installs_the_holders_keys_for_the_lease_and_removes_them_after(
    alice, vision, a10, tmp_path
):
    home = tmp_path / "alice"
    (home / ".ssh").mkdir(parents=True)
    own = "ssh-rsa AAAAB3NzaC1yc2E own@elsewhere"
    (home / ".ssh" / "authorized_keys").write_text(own + "\n")
    keys.ssh_key_add(user=alice, public_key=f"{ED25519} me@laptop")
    lease = _active(alice, vision, a10)
    node = lease.allocations.get().card.node
    keeper = agent_sessions.SessionKeeper(
        tmp_path / "state",
        accounts=HomesUnder(tmp_path),
        fence=agent_sessions.Fence(bwrap=""),  # unfenced: tests/inventory/test_fence.py
    )
    client = Client(HTTP_AUTHORIZATION=f"Node {node_token_issue(node=node)}")

    work = client.get("/api/v1/agent/work/").json()
    assert keeper.reconcile_keys(work["keys"]) == 1
    lines = (home / ".ssh" / "authorized_keys").read_text().splitlines()
    assert lines[0] == own
    stamp = lease.end_at.strftime("%Y%m%d%H%M")
    assert lines[1] == f'expiry-time="{stamp}Z" {ED25519} cardpool-lease-{lease.pk}'
    assert keeper.reconcile_keys(work["keys"]) == 0  # nothing to change the second time

    changes.lease_release(lease=lease, user=alice)
    work = client.get("/api/v1/agent/work/").json()
    assert work["keys"] == []
    assert keeper.reconcile_keys(work["keys"]) == 1
    assert (home / ".ssh" / "authorized_keys").read_text().splitlines() == [own]


# --- workspaces --------------------------------------------------------------------------


def test_workspaces_are_measured_and_warned_once_before_the_soft_limit(
    settings, monkeypatch, alice, vision, a10, tmp_path
):
    settings.CARDPOOL_SESSIONS = {
        **settings.CARDPOOL_SESSIONS,
        "WORKSPACE_ROOT": str(tmp_path),
        "WORKSPACE_SOFT_LIMIT_GB": 1,
        "WORKSPACE_WARN_PERCENT": 90,
    }
    mine = tmp_path / "users" / "alice"
    (mine / "data").mkdir(parents=True)
    (mine / "data" / "a.bin").write_bytes(b"x" * 1_000_000)
    (tmp_path / "users" / "stranger").mkdir()  # no such user: not measured
    (tmp_path / "teams" / "vision").mkdir(parents=True)
    done = workspace.workspaces_measure()
    assert done == {"measured": 2, "warn": []}
    row = WorkspaceUsage.objects.get(path=str(mine))
    assert 1_000_000 <= row.bytes_used < 1_100_000 and row.files == 1 and row.user == alice

    monkeypatch.setattr(workspace, "soft_limit_bytes", lambda: 1_050_000)  # 90 %: 945,000
    assert workspace.workspaces_measure()["warn"] == [row.pk]  # alice's, not the empty team's
    assert workspace.workspaces_measure()["warn"] == []  # once, not every run
    [notice] = Notification.objects.filter(user=alice, kind="workspace_near_limit")
    assert str(mine) in notice.title and notice.data["params"]["pct"] >= 90
    (mine / "data" / "a.bin").unlink()
    assert workspace.workspaces_measure()["warn"] == []
    assert WorkspaceUsage.objects.get(pk=row.pk).warned_at is None  # warned again next time
    lease = _active(alice, vision, a10)
    client = Client()
    client.force_login(alice)
    page = client.get(f"/leases/{lease.pk}/").content.decode()
    assert str(mine) in page and str(tmp_path / "teams" / "vision") in page
    assert 'data-testid="workspace-warning"' not in page  # under the limit again
    (mine / "data" / "a.bin").write_bytes(b"x" * 1_000_000)
    workspace.workspaces_measure()
    page = client.get(f"/leases/{lease.pk}/").content.decode()
    assert 'data-testid="workspace-warning"' in page


def test_measure_counts_blocks_and_skips_links(tmp_path):
    (tmp_path / "f").write_bytes(b"y" * 10_000)
    (tmp_path / "link").symlink_to("/usr")
    size, files = workspace.measure(str(tmp_path))
    assert files == 2 and 10_000 <= size < 20_000
    assert workspace.measure(str(tmp_path / "missing")) == (0, 0)


# --- sessions ----------------------------------------------------------------------------


def _session_client(client, session_id):
    """A client on session *session_id*'s own origin, holding its pass when the portal login
    of *client* is let in (a running session of theirs): "Open JupyterLab" gives the browser
    a one-time ticket for the origin, which it trades for the origin's pass cookie."""
    on_origin = Client(HTTP_HOST=f"s{session_id}.testserver")
    lease_id = Session.objects.get(pk=session_id).lease_id
    go = client.get(f"/leases/{lease_id}/session/go/")
    if go.status_code == 302 and "/_cardpool/session-login/" in go["Location"]:
        ticket = urlsplit(go["Location"])
        assert ticket.netloc == f"s{session_id}.testserver"
        assert on_origin.get(f"{ticket.path}?{ticket.query}").status_code == 302
    return on_origin


def _auth(client, session_id, secret=None):
    """The proxy's question on the session's origin, as nginx asks it."""
    return _session_client(client, session_id).get(
        "/sessions/auth/",
        HTTP_X_ORIGINAL_URI=f"/sessions/{session_id}/lab",
        HTTP_X_CARDPOOL_PROXY=proxy_secret() if secret is None else secret,
    )


def test_only_the_holder_reaches_a_running_session_while_its_lease_runs(
    alice, bob, ops, vision, a10, sent_tasks, django_capture_on_commit_callbacks
):
    lease = _active(alice, vision, a10)
    with pytest.raises(PermissionDenied):
        sessions.session_open(lease=lease, user=bob)
    with django_capture_on_commit_callbacks(execute=True):
        session = sessions.session_open(lease=lease, user=alice)
    assert sessions.session_open(lease=lease, user=alice) == session  # one live per lease
    assert [t.name for t in sent_tasks].count("leasing.tasks.session_start") == 1
    as_alice, as_bob, as_ops = Client(), Client(), Client()
    as_alice.force_login(alice)
    as_bob.force_login(bob)
    as_ops.force_login(ops)

    assert _auth(as_alice, session.pk).status_code == 403  # still starting
    assert as_alice.get(f"/sessions/{session.pk}/lab").status_code == 200  # "starting…"
    sessions.session_running(session_id=session.pk, address="10.0.0.7")
    allowed = _auth(as_alice, session.pk)
    assert allowed.status_code == 200
    assert allowed["X-Session-Upstream"] == f"10.0.0.7:{session.port}"
    assert allowed["X-Session-Token"] == session.token
    assert _auth(as_alice, session.pk, secret="guess").status_code == 404  # not the proxy
    for other in (as_bob, as_ops, Client()):
        assert _auth(other, session.pk).status_code == 403
    assert as_bob.get(f"/sessions/{session.pk}/lab").status_code == 404
    assert as_bob.get(f"/sessions/{session.pk}/api/status").status_code == 404

    changes.lease_release(lease=lease, user=alice)
    session.refresh_from_db()
    assert (session.status, session.end_reason) == ("ended", "lease_ended")
    assert _auth(as_alice, session.pk).status_code == 403
    assert as_alice.get(f"/sessions/{session.pk}/lab").status_code == 410
    assert as_bob.get(f"/sessions/{session.pk}/lab").status_code == 404
    kinds = set(LeaseEvent.objects.filter(lease=lease).values_list("kind", flat=True))
    assert {"session_opened", "session_running"} <= kinds


def test_a_session_is_opened_only_on_an_active_lease(alice, vision, a10):
    lease = ask(alice, vision, a10, start_at=None)
    assert lease.status == LeaseStatus.PROVISIONING
    with pytest.raises(ValidationError):
        sessions.session_open(lease=lease, user=alice)


def test_stopping_a_session_early(
    api, alice, bob, vision, a10, sent_tasks, django_capture_on_commit_callbacks
):
    lease = _active(alice, vision, a10)
    api.force_authenticate(alice)
    r = api.post(f"/api/v1/leases/{lease.pk}/session/", {}, format="json")
    assert r.status_code == 202 and r.json()["status"] == "starting"
    assert r.json()["url"].endswith(f"/sessions/{r.json()['id']}/lab")
    api.force_authenticate(bob)
    assert api.get(f"/api/v1/leases/{lease.pk}/session/").status_code == 404
    assert api.delete(f"/api/v1/leases/{lease.pk}/session/").status_code == 404
    api.force_authenticate(alice)
    with django_capture_on_commit_callbacks(execute=True):
        assert api.delete(f"/api/v1/leases/{lease.pk}/session/").status_code == 204
    session = Session.objects.get(lease=lease)
    assert (session.status, session.end_reason) == ("ended", "stopped")
    assert "leasing.tasks.session_stop" in [t.name for t in sent_tasks]
    assert api.get(f"/api/v1/leases/{lease.pk}/session/").json()["status"] == "ended"


def test_the_agent_is_told_its_sessions_and_reports_them(alice, vision, a10, torch_env):
    lease = _active(alice, vision, a10, environment=torch_env)
    node = lease.allocations.get().card.node
    other = make_node(a10, cards=1, hostname="wb-other")
    session = sessions.session_open(lease=lease, user=alice)
    mine = Client(HTTP_AUTHORIZATION=f"Node {node_token_issue(node=node)}")
    theirs = Client(HTTP_AUTHORIZATION=f"Node {node_token_issue(node=other)}")
    work = mine.get("/api/v1/agent/work/").json()
    [item] = work["sessions"]
    assert (item["id"], item["user"], item["port"]) == (session.pk, "alice", session.port)
    assert f"export JUPYTER_TOKEN={session.token}" in item["script"]
    devices = lease.access["nodes"][0]["env"]["CUDA_VISIBLE_DEVICES"]
    assert f'export CUDA_VISIBLE_DEVICES="${{CUDA_VISIBLE_DEVICES-{devices}}}"' in item["script"]
    assert f"--ServerApp.base_url=/sessions/{session.pk}/" in item["script"]
    assert theirs.get("/api/v1/agent/work/").json()["sessions"] == []

    node.session_addresses = ["10.0.0.9"]  # an address the operator recorded on the node
    node.save()
    report = {"sessions": [{"id": session.pk, "state": "running", "address": "10.0.0.9"}]}
    theirs.post("/api/v1/agent/sessions/", report, content_type="application/json")
    assert Session.objects.get(pk=session.pk).status == "starting"  # not theirs to say
    answer = mine.post("/api/v1/agent/sessions/", report, content_type="application/json")
    assert answer.json() == {"changed": 1}
    session.refresh_from_db()
    assert (session.status, session.address) == ("running", "10.0.0.9")


def test_a_starting_session_that_never_answers_fails_and_sweeps_end_orphans(
    alice, vision, a10, settings
):
    import time_machine
    from django.utils import timezone

    from leasing.lifecycle import session_steps

    lease = _active(alice, vision, a10)
    session = sessions.session_open(lease=lease, user=alice)
    later = timezone.now() + timedelta(seconds=settings.CARDPOOL_SESSIONS["START_TIMEOUT"] + 5)
    with time_machine.travel(later, tick=False):
        assert session_steps.sessions_sweep() == {"failed": 1, "ended": 0}
    session.refresh_from_db()
    assert session.status == "failed" and "did not answer" in session.failure_reason


def test_the_script_enters_the_environment_with_quoted_paths(alice, vision, a10):
    lease = _active(alice, vision, a10)
    env = Environment.objects.create(
        slug="img",
        name="Image",
        stack_family="cuda",
        vendors=["nvidia"],
        entry_kind=Environment.Entry.APPTAINER,
        entry="/images/torch; rm -rf ~.sif",
    )
    session = Session(lease=lease, user=alice, environment=env, host="h", port=20001, token="t")
    session.pk = 5
    script = sessions.session_script(session, lease, {"CUDA_VISIBLE_DEVICES": "0"})
    assert "apptainer exec --nv" in script
    assert "'/images/torch; rm -rf ~.sif'" in script


def test_the_preview_refuses_an_unfitting_environment_as_the_submit_does(
    alice, vision, ascend, torch_env
):
    """The form's live preview runs the submit's first steps, the environment's fit included."""
    from leasing.lifecycle.request_steps import lease_request_check

    with pytest.raises(ValidationError) as refused:
        lease_request_check(
            user=alice,
            team=vision,
            card_model=ascend,
            count=1,
            duration=timedelta(hours=1),
            environment=torch_env,
        )
    assert "910B" in str(refused.value.message_dict["environment"])
