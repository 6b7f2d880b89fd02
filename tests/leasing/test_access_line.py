"""The access line works as printed: ``ssh -t <account>@<host> 'export VAR=…; exec $SHELL -l'``
with the session account of ``CARDPOOL_SESSION_ACCOUNTS``, the vendor's variable, every word
quoted for a shell; built when read, so a lease provisioned with the old line
(``ssh bob@host && export …``, which set the variable on the person's own machine after ssh
exited) shows the right one. tests/e2e/test_access_line_sshd.py runs it against a real sshd."""

from __future__ import annotations

import shlex
import subprocess

import pytest
from django.test import Client
from hypothesis import given
from hypothesis import strategies as st

from inventory.models import VISIBLE_DEVICES_ENV, Vendor
from leasing.lifecycle import provisioning
from leasing.models import Lease
from leasing.workbench import access
from tests.factories import CardModelFactory, make_node
from tests.leasing.conftest import ask

_TAIL = "; exec $SHELL -l"


@pytest.fixture
def mode(settings):
    def use(value):
        settings.CARDPOOL_SESSIONS = {**settings.CARDPOOL_SESSIONS, "ACCOUNTS": value}

    return use


def _active(user, team, *, vendor=Vendor.NVIDIA, env_name="", cards=2, count=2):
    model = CardModelFactory(
        slug=f"acc-{vendor}", name=f"Card {vendor}", vendor=vendor, visible_devices_env=env_name
    )
    make_node(model, cards=cards, hostname="gpu-node-1")
    lease = ask(user, team, model, count=count)
    assert provisioning.provision_step(lease_id=lease.pk)
    lease.refresh_from_db()
    return lease


def _page(user, lease) -> str:
    client = Client()
    client.force_login(user)
    client.cookies["django_language"] = "en"
    return client.get(f"/leases/{lease.pk}/").content.decode()


def _api_shell(api, user, lease) -> str:
    api.force_authenticate(user)
    [node] = api.get(f"/api/v1/leases/{lease.pk}/").json()["access"]["nodes"]
    return node["shell"]


def test_the_line_is_one_command_that_sets_the_variable_on_the_node():
    line = access.access_line("bob", "vm", {"CUDA_VISIBLE_DEVICES": "0"})
    assert line == "ssh -t bob@vm 'export CUDA_VISIBLE_DEVICES=0; exec $SHELL -l'"
    assert "&&" not in line and "\n" not in line
    assert access.access_line("bob", "vm") == "ssh bob@vm"  # nothing to set: a plain login
    assert access.access_line("bob", "vm", {"BAD NAME": "1", "1X": "2"}) == "ssh bob@vm"


@given(
    account=st.from_regex(r"[a-z_][a-z0-9_.-]{0,30}", fullmatch=True),
    host=st.from_regex(r"[a-z0-9][a-z0-9.-]{0,40}", fullmatch=True),
    env=st.dictionaries(
        st.from_regex(r"[A-Z_][A-Z0-9_]{0,30}", fullmatch=True),
        st.text(st.characters(blacklist_categories=("Cs", "Cc")), max_size=20),
        min_size=1,
        max_size=4,
    ),
)
def test_every_word_survives_the_shell_that_reads_it(account, host, env):
    """The person's shell splits the line into ssh's words; the node's shell then splits the
    remote command: both give back exactly the account, host, names and values."""
    words = shlex.split(access.access_line(account, host, env))
    assert words[:3] == ["ssh", "-t", f"{account}@{host}"] and len(words) == 4
    remote = words[3]
    assert remote.endswith(_TAIL)
    exported = shlex.split(remote.removesuffix(_TAIL))
    assert exported[0] == "export"
    assert dict(w.split("=", 1) for w in exported[1:]) == {k: str(v) for k, v in env.items()}


@pytest.mark.parametrize("value", ["0,1", "a b", "it's", '"$HOME"`id`', "x;y&&z"])
def test_a_real_shell_sets_the_value_as_given(tmp_path, value):
    """What the node's login runs (``sh -c <remote>``), with $SHELL standing in for the login
    shell: the variable reaches it unchanged, and nothing in the value runs."""
    shell = tmp_path / "login-shell"
    shell.write_text('#!/bin/sh\nprintf "%s|%s" "$1" "$CUDA_VISIBLE_DEVICES"\n')
    shell.chmod(0o755)
    remote = shlex.split(access.access_line("bob", "vm", {"CUDA_VISIBLE_DEVICES": value}))[3]
    done = subprocess.run(
        ["sh", "-c", remote],
        env={"SHELL": str(shell), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=True,
    )
    assert done.stdout == f"-l|{value}"


@pytest.mark.parametrize(
    ("chosen", "account"),
    [("same", "alice"), ("profile", "a.smith"), ("managed", "cardpool-alice")],
)
def test_each_account_mode_names_its_account_on_the_page_and_in_the_api(
    mode, alice, vision, api, chosen, account
):
    alice.profile.slurm_user = "a.smith"
    alice.profile.save()
    mode(chosen)
    lease = _active(alice, vision)
    line = f"ssh -t {account}@gpu-node-1 'export CUDA_VISIBLE_DEVICES=0,1; exec $SHELL -l'"
    assert _api_shell(api, alice, lease) == line
    page = _page(alice, lease)
    assert line.replace("'", "&#x27;") in page
    assert "&amp;&amp; export" not in page and "\nexport CUDA_VISIBLE_DEVICES" not in page


@pytest.mark.parametrize(
    ("vendor", "env_name", "expected"),
    [
        (Vendor.NVIDIA, "", "CUDA_VISIBLE_DEVICES"),
        (Vendor.HUAWEI, "", "ASCEND_RT_VISIBLE_DEVICES"),
        (Vendor.CAMBRICON, "", "MLU_VISIBLE_DEVICES"),
        (Vendor.AMD, "", "HIP_VISIBLE_DEVICES"),
        (Vendor.KUNLUNXIN, "", "XPU_VISIBLE_DEVICES"),
        (Vendor.MOORE_THREADS, "", "MUSA_VISIBLE_DEVICES"),
        (Vendor.NVIDIA, "NVIDIA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES"),
    ],
)
def test_each_vendor_sets_its_own_variable(mode, alice, vision, api, vendor, env_name, expected):
    mode("same")
    assert env_name or VISIBLE_DEVICES_ENV[vendor] == expected
    lease = _active(alice, vision, vendor=vendor, env_name=env_name, cards=4, count=3)
    assert (
        _api_shell(api, alice, lease)
        == f"ssh -t alice@gpu-node-1 'export {expected}=0,1,2; exec $SHELL -l'"
    )


def test_a_lease_stored_with_the_old_line_reads_the_new_one(mode, alice, vision, api):
    mode("managed")
    lease = _active(alice, vision)
    node = lease.access["nodes"][0]
    assert "shell" not in node  # not stored: built when read
    old = {**lease.access, "nodes": [{**node, "shell": "ssh alice@gpu-node-1 && export X=0,1"}]}
    Lease.objects.filter(pk=lease.pk).update(access=old)
    lease.refresh_from_db()
    line = "ssh -t cardpool-alice@gpu-node-1 'export CUDA_VISIBLE_DEVICES=0,1; exec $SHELL -l'"
    assert _api_shell(api, alice, lease) == line
    page = _page(alice, lease)
    assert line.replace("'", "&#x27;") in page and "&amp;&amp; export" not in page
    lease.refresh_from_db()
    assert lease.access == old  # reading changes nothing stored


@pytest.mark.parametrize("chosen", ["same", "profile", "managed"])
def test_the_list_reads_the_accounts_without_a_query_per_lease(
    mode, alice, vision, api, django_assert_max_num_queries, chosen
):
    mode(chosen)
    model = CardModelFactory(slug="acc-list", name="Card list", vendor=Vendor.NVIDIA)
    make_node(model, cards=6, hostname="gpu-node-1")
    for _ in range(6):
        lease = ask(alice, vision, model)
        assert provisioning.provision_step(lease_id=lease.pk)
    api.force_authenticate(alice)
    with django_assert_max_num_queries(8):
        leases = api.get("/api/v1/leases/").json()["results"]
    assert len(leases) == 6
    assert all(n["shell"].startswith("ssh -t ") for le in leases for n in le["access"]["nodes"])


def test_a_node_without_a_host_gets_no_line_and_no_error(alice, vision, api):
    lease = _active(alice, vision)
    Lease.objects.filter(pk=lease.pk).update(access={"backend": "local", "nodes": [{"env": {}}]})
    lease.refresh_from_db()
    assert access.access_for(lease) == {"backend": "local", "nodes": [{"env": {}}]}
    assert _page(alice, lease)  # renders (200), no line to show
    api.force_authenticate(alice)
    assert api.get(f"/api/v1/leases/{lease.pk}/").json()["access"]["nodes"] == [{"env": {}}]
