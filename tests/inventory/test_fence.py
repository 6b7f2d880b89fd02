"""Fences on local nodes (inventory.agent_sessions.Fence, docs/decisions.md): a session, a
key's login and a checkpoint command see a private /dev holding only the leased cards'
device files. Stand-in device nodes (``mknod``, char 1:3 like /dev/null) play the cards, so
this runs on any machine with bubblewrap and root; it skips with the reason elsewhere."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from inventory import agent_sessions
from inventory.agent_sessions import Fence
from tests.throwaway_accounts import stand_in_devices

LEASED = {"vendor": "nvidia", "devices": [1, 3]}


def _why_not() -> str:
    if shutil.which("bwrap") is None:
        return "needs bubblewrap (apt-get install bubblewrap)"
    if os.geteuid() != 0:
        return "needs root (stand-in device nodes are made with mknod)"
    if shutil.which("runuser") is None:
        return "needs runuser (util-linux) to run the fenced process as nobody"
    probe = subprocess.run(
        ["runuser", "-u", "nobody", "--", "bwrap", "--bind", "/", "/", "--", "true"],
        capture_output=True,
        text=True,
    )
    if probe.returncode != 0:
        return f"bubblewrap cannot make namespaces here: {probe.stderr.strip()[:200]}"
    return ""


WHY_NOT = _why_not()
needs_fence = pytest.mark.skipif(bool(WHY_NOT), reason=WHY_NOT or "-")


@pytest.fixture
def stand_ins():
    """Stand-in nodes for 4 NVIDIA cards and nvidiactl, in a directory anyone can read."""
    with stand_in_devices() as root:
        yield root


def test_each_vendor_names_its_cards_device_files(tmp_path):
    for name in ("nvidia0", "nvidia1", "nvidia3", "nvidiactl", "davinci2", "kfd", "card0"):
        (tmp_path / name).touch()
    (tmp_path / "dri").mkdir()
    (tmp_path / "dri" / "renderD129").touch()
    fence = Fence(bwrap="/usr/bin/bwrap", dev_root=tmp_path)
    assert fence.device_files(LEASED) == ["nvidia1", "nvidia3", "nvidiactl"]
    assert fence.device_files({"vendor": "huawei", "devices": [2]}) == ["davinci2"]
    assert fence.device_files({"vendor": "amd", "devices": [1]}) == ["dri/renderD129", "kfd"]
    assert fence.device_files({"vendor": "other", "devices": [0]}) == ["card0"]
    argv = fence.argv(LEASED)
    assert argv[:6] == ["/usr/bin/bwrap", "--bind", "/", "/", "--dev", "/dev"]
    assert ["--dev-bind", str(tmp_path / "nvidia0"), "/dev/nvidia0"] not in [
        argv[i : i + 3] for i in range(len(argv))
    ]
    assert "--unshare-pid" in argv and argv[-1] == "--"


def test_a_fenced_key_is_restricted_and_forced_into_the_fence(tmp_path):
    spec = Fence(bwrap="/usr/bin/bwrap", dev_root=tmp_path).spec_file(tmp_path / "f", 7, LEASED)
    line = 'expiry-time="202601010000Z" ssh-ed25519 AAAA cardpool-lease-7'
    fenced = agent_sessions.fenced_key_line(line, agent_sessions.forced_command(spec))
    assert fenced.startswith('restrict,pty,command="') and fenced.endswith(f",{line}")
    assert f"agent_sessions.py fence {spec}" in fenced
    assert oct(spec.stat().st_mode & 0o777) == "0o644"


def _fenced_python(argv: list[str], code: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["runuser", "-u", "nobody", "--", *argv, sys.executable, "-I", "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
    )


PROBE = """
import os, stat
print("DEV", sorted(n for n in os.listdir("/dev") if n.startswith("nvidia")))
for n in ("nvidia1", "nvidia0", "nvidia2"):
    try:
        fd = os.open("/dev/" + n, os.O_RDWR)
        print("OPEN", n, stat.S_ISCHR(os.fstat(fd).st_mode))
        os.close(fd)
    except OSError as e:
        print("REFUSED", n, type(e).__name__)
try:
    os.mknod("/dev/shm/nvidia0", 0o666 | stat.S_IFCHR, os.makedev(195, 0))
    print("MKNOD ok")
except OSError as e:
    print("MKNOD", type(e).__name__)
print("PROCS", len([p for p in os.listdir("/proc") if p.isdigit()]))
"""


@needs_fence
def test_a_fenced_process_cannot_open_a_device_it_did_not_lease(stand_ins):
    done = _fenced_python(Fence(dev_root=stand_ins).argv(LEASED), PROBE)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "DEV ['nvidia1', 'nvidia3', 'nvidiactl']" in out
    assert "OPEN nvidia1 True" in out
    assert "REFUSED nvidia0 FileNotFoundError" in out and "REFUSED nvidia2 FileNotFoundError" in out
    assert "MKNOD PermissionError" in out  # nor can it make one
    assert int(out.split("PROCS ")[1]) <= 3  # its own PID namespace: the node's are hidden
    # Unfenced, the same process would open every card: the fence is what stops it.
    assert "OPEN nvidia0" in _fenced_python([], PROBE.replace("/dev/", f"{stand_ins}/")).stdout


@needs_fence
def test_the_agent_starts_a_session_inside_the_fence(stand_ins, tmp_path):
    out = Path(tempfile.mkdtemp(prefix="cardpool-out-", dir="/tmp"))
    out.chmod(0o777)
    keeper = agent_sessions.SessionKeeper(
        tmp_path / "state", fence=Fence(dev_root=stand_ins), log=lambda m: None
    )
    item = {
        "id": 1,
        "user": "nobody",
        "port": 1,
        "fence": LEASED,
        "script": f"ls /dev > {out}/dev.txt; exec sleep 60\n",
    }
    try:
        pid = keeper.start(item)
        deadline = time.monotonic() + 20
        while not (out / "dev.txt").exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        listed = (out / "dev.txt").read_text().split()
        assert [n for n in listed if n.startswith("nvidia")] == ["nvidia1", "nvidia3", "nvidiactl"]
        keeper.stop(1, pid)
        assert not agent_sessions._alive(pid)
        assert agent_sessions.descendants(pid) == []  # the fence's PID namespace went with it
    finally:
        for session_id, running in keeper.running().items():
            keeper.stop(session_id, running)
        shutil.rmtree(out, ignore_errors=True)


@needs_fence
def test_a_fenced_key_login_runs_in_the_fence(stand_ins):
    spec = Fence(dev_root=stand_ins).spec_file(stand_ins / "fences", 7, LEASED)
    command = agent_sessions.forced_command(spec)
    env = {"PATH": "/usr/bin:/bin", "SHELL": "/bin/sh", "SSH_ORIGINAL_COMMAND": "ls /dev"}
    done = subprocess.run(  # what sshd does with command=: the user's shell runs it
        ["runuser", "-u", "nobody", "--", "env", "-i", *[f"{k}={v}" for k, v in env.items()],
         "/bin/sh", "-c", command],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert [n for n in done.stdout.split() if n.startswith("nvidia")] == [
        "nvidia1",
        "nvidia3",
        "nvidiactl",
    ]


def test_the_keeper_forces_each_leases_keys_into_its_fence_and_forgets_it_after(tmp_path):
    from tests.leasing.test_workbench import HomesUnder

    (tmp_path / "alice").mkdir()
    keeper = agent_sessions.SessionKeeper(
        tmp_path / "state",
        accounts=HomesUnder(tmp_path),
        fence=Fence(bwrap="/usr/bin/bwrap", dev_root=tmp_path),
        log=lambda m: None,
    )
    line = 'expiry-time="202601010000Z" ssh-ed25519 AAAA cardpool-lease-7'
    item = {"user": "alice", "lease": 7, "lines": [line], "fence": LEASED}
    assert keeper.reconcile_keys([item]) == 1
    spec = tmp_path / "state" / "fences" / "lease-7.json"
    [written] = (tmp_path / "alice" / ".ssh" / "authorized_keys").read_text().splitlines()
    assert written.startswith('restrict,pty,command="') and f"fence {spec}" in written
    assert spec.exists()
    assert keeper.reconcile_keys([]) == 1
    assert not spec.exists()
    assert (tmp_path / "alice" / ".ssh" / "authorized_keys").read_text() == ""


@needs_fence
def test_a_checkpoint_command_runs_as_the_holder_inside_the_fence(stand_ins):
    from inventory import agent

    out = stand_ins / "out"
    out.mkdir(mode=0o777)
    out.chmod(0o777)
    item = {
        "lease": 9,
        "user": "nobody",
        "command": f"id -un > {out}/who; ls /dev > {out}/dev",
        "seconds": 30,
        "env_var": "CUDA_VISIBLE_DEVICES",
        "devices": [1, 3],
        "fence": LEASED,
    }
    fence = Fence(dev_root=stand_ins)
    wrap = lambda i: agent_sessions.checkpoint_wrap(  # noqa: E731
        i, accounts=agent_sessions.Accounts(), fence=fence
    )
    ok, detail = agent.deliver_checkpoint(item, wrap=wrap)
    assert ok, detail
    assert (out / "who").read_text().strip() == "nobody"  # never root
    listed = (out / "dev").read_text().split()
    assert [n for n in listed if n.startswith("nvidia")] == ["nvidia1", "nvidia3", "nvidiactl"]
    ok, detail = agent.deliver_checkpoint({**item, "user": "root"}, wrap=wrap)
    assert not ok and "never run as root" in detail
