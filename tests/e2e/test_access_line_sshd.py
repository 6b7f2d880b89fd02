"""The access line the API prints, run as printed against a real sshd: the login lands on the
node with the vendor's variable set in the shell there (the old ``ssh host && export …`` set
it on the person's own machine after ssh exited).

The test starts its own ``sshd -D -f <temp config>`` on a free port of 127.0.0.1, with a
temporary host key, logging in as the Unix user running the tests with a key generated here
(``AuthorizedKeysFile`` in the temp config; nothing under ~/.ssh is read or written). ``ssh``
on the line reaches it through a wrapper first on PATH that adds ``-F <temp client config>``
(the node's name points at 127.0.0.1 and the port), so the line itself runs unchanged, in a
pseudo-terminal as a person's would. Skips with the reason without openssh-server/-client.
"""

from __future__ import annotations

import os
import pwd
import select
import shutil
import socket
import subprocess
import time

import pytest
from django.test import Client

from leasing.lifecycle import provisioning
from tests.factories import CardModelFactory, UserFactory, make_node
from tests.leasing.conftest import ask

HOST = "gpu-node-1"
_SBIN = "/usr/sbin:/usr/local/sbin:/sbin"


def _why_not() -> str:
    if shutil.which("sshd", path=_SBIN + ":" + os.environ.get("PATH", "")) is None:
        return "needs sshd (Debian's openssh-server; .ci/run installs it)"
    for tool in ("ssh", "ssh-keygen"):
        if shutil.which(tool) is None:
            return f"needs {tool} (Debian's openssh-client)"
    me = pwd.getpwuid(os.geteuid())
    if not me.pw_shell or me.pw_shell.endswith(("nologin", "false")):
        return f"the Unix user running the tests ({me.pw_name}) has no login shell"
    return ""


pytestmark = pytest.mark.skipif(bool(_why_not()), reason=_why_not() or "runs")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _keygen(path) -> None:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True)


@pytest.fixture
def sshd(tmp_path):
    """An sshd for the current Unix user on 127.0.0.1; yields the directory holding the
    client's wrapper (first on PATH for the line)."""
    if os.geteuid() == 0 and not os.path.isdir("/run/sshd"):
        # sshd as root wants its privilege-separation directory (systemd's tmpfiles.d makes
        # it at boot; a container without systemd has none).
        os.makedirs("/run/sshd", mode=0o755, exist_ok=True)
    user = pwd.getpwuid(os.geteuid()).pw_name
    _keygen(tmp_path / "host_key")
    _keygen(tmp_path / "client_key")
    shutil.copy(tmp_path / "client_key.pub", tmp_path / "authorized_keys")
    sshd_path = shutil.which("sshd", path=_SBIN + ":" + os.environ.get("PATH", ""))
    log = open(tmp_path / "sshd.log", "w")  # noqa: SIM115 (closed at teardown)
    for _attempt in range(3):  # another process may take the free port first
        port = _free_port()
        (tmp_path / "sshd_config").write_text(
            f"Port {port}\nListenAddress 127.0.0.1\nHostKey {tmp_path}/host_key\n"
            f"PidFile {tmp_path}/sshd.pid\nAuthorizedKeysFile {tmp_path}/authorized_keys\n"
            "StrictModes no\nUsePAM no\nPasswordAuthentication no\n"
            "KbdInteractiveAuthentication no\nPubkeyAuthentication yes\n"
            f"PermitRootLogin prohibit-password\nAllowUsers {user}\nPrintMotd no\n"
            "PrintLastLog no\n"
        )
        server = subprocess.Popen(
            [sshd_path, "-D", "-e", "-f", str(tmp_path / "sshd_config")],
            stdout=subprocess.DEVNULL,
            stderr=log,
        )
        deadline = time.monotonic() + 30
        while server.poll() is None and time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.1)
        if server.poll() is None:
            break
    else:
        log.close()
        pytest.fail(f"sshd did not start: {(tmp_path / 'sshd.log').read_text()}")
    (tmp_path / "ssh_config").write_text(
        f"Host {HOST}\n  HostName 127.0.0.1\n  Port {port}\n"
        f"  IdentityFile {tmp_path}/client_key\n  IdentitiesOnly yes\n"
        "  StrictHostKeyChecking no\n  UserKnownHostsFile /dev/null\n"
        "  BatchMode yes\n  LogLevel ERROR\n"
    )
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "ssh").write_text(
        f'#!/bin/sh\nexec {shutil.which("ssh")} -F {tmp_path}/ssh_config "$@"\n'
    )
    (bin_dir / "ssh").chmod(0o755)
    try:
        yield bin_dir
    finally:
        server.terminate()
        server.wait(timeout=30)
        log.close()


def _run_in_a_terminal(line: str, bin_dir, *, typed: str, until: bytes) -> tuple[int, bytes]:
    """Run *line* with ``bash -c`` on a pseudo-terminal; type *typed* (again each second,
    since the remote shell may not read yet) until *until* appears, then ``exit``."""
    master, slave = os.openpty()
    env = os.environ | {"PATH": f"{bin_dir}:{os.environ.get('PATH', '/usr/bin:/bin')}"}
    env.pop("CUDA_VISIBLE_DEVICES", None)
    proc = subprocess.Popen(
        ["bash", "-c", line], stdin=slave, stdout=slave, stderr=slave, env=env,
        start_new_session=True,
    )  # fmt: skip
    os.close(slave)
    seen, typed_at, exited = b"", 0.0, False
    deadline = time.monotonic() + 60  # a hang fails the test instead of blocking it
    try:
        while time.monotonic() < deadline:
            if until not in seen and time.monotonic() - typed_at > 1:
                os.write(master, typed.encode())
                typed_at = time.monotonic()
            elif until in seen and not exited:
                os.write(master, b"exit\n")
                exited = True
            ready, _, _ = select.select([master], [], [], 0.2)
            if ready:
                try:
                    chunk = os.read(master, 4096)
                except OSError:  # EIO: every writer closed, the line has ended
                    break
                if not chunk:
                    break
                seen += chunk
            elif proc.poll() is not None:
                break
        if proc.poll() is None:  # still running at the deadline: the line never got there
            proc.kill()
        return proc.wait(timeout=30), seen
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(master)


def test_the_printed_line_logs_in_with_the_variable_set_on_the_node(sshd, settings, vision, api):
    settings.CARDPOOL_SESSIONS = {**settings.CARDPOOL_SESSIONS, "ACCOUNTS": "same"}
    me = UserFactory(username=pwd.getpwuid(os.geteuid()).pw_name)
    vision.memberships.create(user=me, role="member")
    model = CardModelFactory(slug="ssh-l40", name="L40S", vendor="nvidia")
    make_node(model, cards=4, hostname=HOST)
    lease = ask(me, vision, model, count=2)
    assert provisioning.provision_step(lease_id=lease.pk)
    api.force_authenticate(me)
    [node] = api.get(f"/api/v1/leases/{lease.pk}/").json()["access"]["nodes"]
    line = node["shell"]
    assert line.startswith(f"ssh -t {me.username}@{HOST} ")
    client = Client()
    client.force_login(me)
    assert line.replace("'", "&#x27;") in client.get(f"/leases/{lease.pk}/").content.decode()

    # The shell's echo of what is typed shows "SE""EN=$…"; only the node's shell prints this:
    rc, seen = _run_in_a_terminal(
        line, sshd, typed='echo "SE""EN=[$CUDA_VISIBLE_DEVICES]"\n', until=b"SEEN=[0,1]"
    )
    assert b"SEEN=[0,1]" in seen, seen.decode(errors="replace")
    assert rc == 0, seen.decode(errors="replace")
