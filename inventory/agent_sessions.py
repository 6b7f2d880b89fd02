"""cardpool-agent's sessions and SSH keys (``cardpool-agent --sessions``): make the node match
what the portal says its active local leases need.

Each round asks ``GET /api/v1/agent/work/`` (saying what this node can run: ``?can=…&gl=…``,
``node_can``) and then:

* starts every listed session that is not running, as its holder's Unix account (``Accounts``:
  looked up with getent, or made by ``useradd`` when the portal manages accounts,
  ``cardpool-<name>``), through ``runuser``, inside the lease's ``Fence`` (bubblewrap: a
  private /dev holding only the leased cards' device files); the script comes on stdin, so
  Jupyter's token never shows in ``ps``. It stops (the whole process tree) every running one no
  longer listed — a stopped session or an ended lease — and reports which answer on their port,
  or failed and why (a kind the portal words for the holder), to ``POST /api/v1/agent/sessions/``;
* rewrites each holder's ``~/.ssh/authorized_keys``: lines marked ``cardpool-lease-<id>``
  are exactly the listed ones (each carries OpenSSH's ``expiry-time`` at the lease's end, so a
  key expires even if the agent is down, and ``restrict,pty,command=`` forcing the login into
  the lease's fence); other lines are never touched;
* every 5 minutes asks ``POST /api/v1/agent/accounts/`` which managed accounts' people left
  the portal, and locks those.

Standard library only, beside agent.py: copy both files to a node. That is why it is one
module of some 600 lines (accounts, fences, sessions, keys): it must stand alone there, and
the forced command of a fenced key runs this file itself (``python3 -I agent_sessions.py
fence SPEC``).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import NamedTuple
from urllib.parse import urlencode
from urllib.request import Request, urlopen

MARK = "cardpool-lease-"
PATH = "/usr/local/bin:/usr/bin:/bin"


# The names of the accounts the agent may create itself (``ACCOUNTS = "managed"``).
MANAGED = re.compile(r"^cardpool-[a-z0-9][a-z0-9_-]{0,22}$")


class Account(NamedTuple):
    name: str
    uid: int
    gid: int
    home: Path


class StartError(ValueError):
    """A session cannot start here; the message says what the operator can do. *kind* is
    how the portal tells the holder (sessions.FAILURES)."""

    def __init__(self, message: str, *, kind: str = "backend"):
        super().__init__(message)
        self.kind = kind


class AccountError(StartError):
    """No Unix account to run as."""

    def __init__(self, message: str, *, kind: str = "no_account"):
        super().__init__(message, kind=kind)


class Accounts:
    """This node's Unix accounts, read with ``getent passwd`` and changed with ``useradd`` /
    ``usermod`` (never through Python's ``pwd``), each run after *prefix*: tests give
    ``nsenter`` into a mount namespace whose /etc is a throwaway overlay, so the accounts they
    create never reach the machine's own passwd."""

    def __init__(self, prefix: Sequence[str] = ()):
        self.prefix = list(prefix)

    def run(self, argv: list[str], **kwargs) -> subprocess.CompletedProcess:
        return subprocess.run(  # noqa: S603 - fixed argv
            [*self.prefix, *argv], capture_output=True, text=True, timeout=60, check=False, **kwargs
        )

    def lookup(self, name: str) -> Account | None:
        done = self.run(["getent", "passwd", name])
        if done.returncode != 0 or not done.stdout.strip():
            return None
        fields = done.stdout.strip().split("\n")[0].split(":")
        return Account(fields[0], int(fields[2]), int(fields[3]), Path(fields[5]))

    def get(self, item: dict) -> Account:
        """The account *item* (a session or key from the work) runs as: looked up, or created
        when the portal says the agent manages it. Never root."""
        name = str(item["user"])
        account = self.lookup(name)
        if account is None and item.get("create"):
            account = self.create(name, home=Path(str(item.get("home") or f"/home/{name}")))
        if account is None:
            raise AccountError(f"no Unix account {name} on this node")
        if account.uid == 0:
            raise AccountError("sessions never run as root")
        return account

    def create(self, name: str, *, home: Path) -> Account:
        """``cardpool-<name>``: no password (locked), its own group, home *home*."""
        if not MANAGED.match(name):
            raise AccountError(f"the agent creates only cardpool-<name> accounts, not {name}")
        if os.geteuid() != 0:
            raise AccountError(
                f"the agent must run as root to create the account {name}", kind="agent_not_root"
            )
        home.parent.mkdir(parents=True, exist_ok=True)
        done = self.run(
            ["useradd", "--create-home", "--home-dir", str(home), "--shell", "/bin/bash",
             "--user-group", "--comment", "cardpool managed account", name]
        )  # fmt: skip
        account = self.lookup(name)
        if account is None:
            raise AccountError(f"useradd {name} failed: {done.stderr.strip()[:300]}")
        return account

    def lock(self, name: str) -> bool:
        """A leaver's managed account: locked, expired, its processes ended; files kept."""
        if not MANAGED.match(name) or self.lookup(name) is None:
            return False
        self.run(["usermod", "--lock", "--expiredate", "1", "--shell", "/usr/sbin/nologin", name])
        self.run(["pkill", "-KILL", "-u", name])
        return True


def _alive(pid: int) -> bool:
    try:
        done, _status = os.waitpid(pid, os.WNOHANG)  # our own child: reap it if it ended
        if done == pid:
            return False
    except ChildProcessError:
        pass  # started by an earlier agent: init reaps it
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    stat = Path(f"/proc/{pid}/stat")
    return not (stat.exists() and stat.read_text().split(") ", 1)[-1].startswith("Z"))


def desktop_display(session_id: int) -> int:
    """The X display of a session's desktop (as its script computes it)."""
    return 100 + int(session_id) % 5000


def descendants(pid: int, *, proc: Path = Path("/proc")) -> list[int]:
    """Every process under *pid* (children, theirs, …), read from /proc."""
    children: dict[int, list[int]] = {}
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            parent = int((entry / "stat").read_text().rsplit(") ", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(parent, []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def port_open(address: str, port: int) -> bool:
    try:
        socket.create_connection((address, port), timeout=0.5).close()
    except OSError:
        return False
    return True


# --- fences -----------------------------------------------------------------------------

# The device files of card *i* per vendor, and those every process using such a card needs.
VENDOR_DEVICES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "nvidia": (
        ("nvidia{i}",),
        ("nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset", "nvidia-caps"),
    ),
    "huawei": (("davinci{i}",), ("davinci_manager", "devmm_svm", "hisi_hdc")),
    "amd": (("dri/renderD{r}",), ("kfd",)),
    "other": (("card{i}",), ()),
}


class Fence:
    """What a fenced process sees of /dev: a private one (bubblewrap) holding only the leased
    cards' device files (and their vendor's shared control files), read-only apart from its
    own /dev/shm, in its own PID namespace (it dies with whoever started it, and cannot see
    the node's other processes). The rest of the filesystem is the node's. *dev_root* is
    where the real device files are (tests give stand-in nodes made with mknod)."""

    def __init__(self, *, bwrap: str | None = None, dev_root: str | Path = "/dev"):
        """*bwrap*: its path; None finds it on PATH, "" means no fence."""
        self.bwrap = (shutil.which("bwrap") or "") if bwrap is None else bwrap
        self.dev_root = Path(dev_root)

    @property
    def usable(self) -> bool:
        return bool(self.bwrap)

    def device_files(self, spec: dict) -> list[str]:
        """The files under /dev that the lease's cards need (those present on this node)."""
        per_card, shared = VENDOR_DEVICES.get(str(spec.get("vendor")), VENDOR_DEVICES["other"])
        names = []
        for index in spec.get("devices") or []:
            i = int(index)
            names += [pattern.format(i=i, r=128 + i) for pattern in per_card]
        names += shared
        return [name for name in names if (self.dev_root / name).exists()]

    def argv(self, spec: dict) -> list[str]:
        """The bwrap command line to prefix a command with."""
        argv = [self.bwrap, "--bind", "/", "/", "--dev", "/dev"]
        for name in self.device_files(spec):
            argv += ["--dev-bind", str(self.dev_root / name), f"/dev/{name}"]
        argv += ["--remount-ro", "/dev", "--tmpfs", "/dev/shm", "--proc", "/proc"]
        argv += ["--unshare-pid", "--die-with-parent", "--"]
        return argv

    def spec_file(self, spec_dir: Path, lease_id: int, spec: dict) -> Path:
        """The fence of a lease as a file the forced command of its SSH keys reads (readable
        by the holder: device paths only, nothing secret)."""
        spec_dir.mkdir(parents=True, exist_ok=True)
        spec_dir.chmod(0o755)
        path = spec_dir / f"lease-{int(lease_id)}.json"
        body = json.dumps({"argv": self.argv(spec)})
        if not path.exists() or path.read_text() != body:
            tmp = path.with_suffix(".tmp")
            tmp.write_text(body)
            tmp.chmod(0o644)
            os.replace(tmp, path)
        return path


def forced_command(spec_path: Path) -> str:
    """The ``command=`` of a fenced key: this file, run by the node's python3 in isolated
    mode, puts the login (or the command the client asked for) into the lease's fence."""
    here = Path(__file__).resolve()
    return f"{sys.executable} -I {here} fence {spec_path}"


def fence_login(spec_path: str, environ=os.environ) -> int:
    """Run by sshd as the holder (``command=``): exec the login shell, or the command the
    client asked for (``SSH_ORIGINAL_COMMAND``), inside the lease's fence."""
    argv = json.loads(Path(spec_path).read_text())["argv"]
    shell = environ.get("SHELL") or "/bin/bash"
    asked = environ.get("SSH_ORIGINAL_COMMAND")
    command = [shell, "-c", asked] if asked else [shell, "-l"]
    os.execv(argv[0], [*argv, *command])
    return 1  # not reached


def fenced_key_line(line: str, command: str) -> str:
    """*line* (``expiry-time="…" ssh-… KEY comment``) with its login forced into the fence:
    ``restrict`` (no forwarding of ports, agents or X11), ``pty`` (an interactive shell may
    have a terminal) and ``command=``."""
    quoted = command.replace('"', '\\"')  # sshd unescapes only \"
    return f'restrict,pty,command="{quoted}",{line}'


def checkpoint_wrap(item: dict, *, accounts: Accounts, fence: Fence) -> list[str]:
    """The argv prefix a checkpoint command runs under: as the lease holder's account (never
    root; the agent as root uses runuser) inside the lease's fence where bwrap is here."""
    account = accounts.get(item)
    fenced = fence.argv(item["fence"]) if fence.usable and item.get("fence") else []
    if os.geteuid() == 0:
        return [*accounts.prefix, "runuser", "-u", account.name, "--", *fenced]
    if os.geteuid() != account.uid:
        raise AccountError(f"the agent must run as root to act as {account.name}")
    return fenced


NOVNC = Path("/usr/share/novnc")
EGL_VENDORS = Path("/usr/share/glvnd/egl_vendor.d")


def node_can(jupyter: str = "", *, root: bool | None = None) -> tuple[list[str], str]:
    """What this node can run for the portal to offer — ``jupyterlab`` and ``terminal`` (a
    jupyter to run), ``desktop`` (Xvnc, websockify, noVNC), ``keys`` (an SSH server, and an
    agent that may write other users' keys), ``fence`` (bubblewrap) — and what OpenGL draws
    with (``llvmpipe``, or the vendor of an EGL driver: ``nvidia``)."""
    root = os.geteuid() == 0 if root is None else root
    can = []
    jupyter = (
        jupyter
        or os.environ.get("CARDPOOL_SESSION_JUPYTER", "")
        or shutil.which("jupyter")
        or str(Path(sys.prefix) / "bin" / "jupyter")
    )
    if Path(jupyter).exists():
        can += ["jupyterlab", "terminal"]
    vnc = shutil.which("Xvnc") or shutil.which("Xtigervnc")
    if vnc and shutil.which("websockify") and (NOVNC / "vnc.html").exists():
        can.append("desktop")
    if root and (shutil.which("sshd") or Path("/usr/sbin/sshd").exists()):
        can.append("keys")
    if shutil.which("bwrap"):
        can.append("fence")
    gl = "llvmpipe"
    vendors = sorted(p.name for p in EGL_VENDORS.glob("*.json")) if EGL_VENDORS.is_dir() else []
    for name in vendors:
        if "mesa" not in name:
            gl = name.split("_", 1)[-1].removesuffix(".json")
            break
    return can, gl


class SessionKeeper:
    """The sessions and keys of one node; its state (pid files, logs) under *state_dir*."""

    def __init__(
        self,
        state_dir: str | Path,
        *,
        address: str = "127.0.0.1",
        accounts: Accounts | None = None,
        fence: Fence | None = None,
        require_fence: bool = False,
        log: Callable[[str], None] = print,
    ):
        self.state = Path(state_dir)
        # 0711: others may not list it, but a holder's fenced key login reads its lease's
        # fence under fences/ (the session logs in it are 0600).
        self.state.mkdir(parents=True, exist_ok=True, mode=0o711)
        self.state.chmod(0o711)
        self.address = address
        self.accounts = accounts or Accounts()
        self.fence = fence or Fence()
        self.require_fence = require_fence
        self.log = log
        self.can, self.gl = node_can()
        if not self.fence.usable:
            self.can = [c for c in self.can if c != "fence"]

    # --- accounts ------------------------------------------------------------------------

    def account(self, item: dict) -> Account:
        """The account to run *item* as; one the agent may create is remembered, so that it
        can be locked when its person leaves."""
        account = self.accounts.get(item)
        if item.get("create") and account.name not in self.managed():
            self._managed_file.write_text(json.dumps(sorted({*self.managed(), account.name})))
        return account

    @property
    def _managed_file(self) -> Path:
        return self.state / "managed-accounts.json"

    def managed(self) -> list[str]:
        """The accounts this agent created (and has not locked)."""
        try:
            return sorted(json.loads(self._managed_file.read_text()))
        except (OSError, ValueError):
            return []

    def lock_leavers(self, leavers: list[str]) -> int:
        """Lock the managed accounts of people who left (their files stay)."""
        managed = self.managed()
        locked = [name for name in leavers if name in managed and self.accounts.lock(name)]
        for name in locked:
            self.log(f"cardpool-agent: account {name} locked: its person left the portal")
        rest = sorted(set(managed) - set(leavers))
        self._managed_file.write_text(json.dumps(rest))
        return len(locked)

    # --- sessions ------------------------------------------------------------------------

    def _pidfile(self, session_id: int) -> Path:
        return self.state / f"session-{session_id}.pid"

    def running(self) -> dict[int, int]:
        """{session id: pid} of the sessions this node runs."""
        found = {}
        for path in self.state.glob("session-*.pid"):
            try:
                session_id = int(path.stem.split("-", 1)[1])
                pid = int(path.read_text().strip())
            except ValueError:
                continue
            found[session_id] = pid
        return found

    def start(self, item: dict) -> int:
        account = self.account(item)
        user = account.name
        session_id = int(item["id"])
        env = [f"PATH={PATH}", "LANG=C.UTF-8", f"CARDPOOL_SESSION_IP={self.address}"]
        fence: list[str] = []
        if self.fence.usable and item.get("fence") is not None:
            fence = self.fence.argv(item["fence"])
        elif self.require_fence:
            raise StartError("bubblewrap (bwrap) is needed to fence the cards", kind="fence")
        if os.geteuid() == 0:
            argv = [
                *self.accounts.prefix,
                *["runuser", "-u", user, "--", "env", "-i", *env, *fence, "/bin/bash", "-s"],
            ]
        elif os.geteuid() == account.uid:
            argv = ["env", "-i", *env, *fence, "/bin/bash", "-s"]
        else:
            raise AccountError(
                f"the agent must run as root to start sessions as {user}", kind="agent_not_root"
            )
        log_path = self.state / f"session-{session_id}.log"
        with open(log_path, "ab") as out:
            os.chmod(log_path, 0o600)
            proc = subprocess.Popen(  # noqa: S603 - fixed argv
                argv,
                stdin=subprocess.PIPE,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        assert proc.stdin is not None
        proc.stdin.write(str(item["script"]).encode())
        proc.stdin.close()
        self._pidfile(session_id).write_text(str(proc.pid))
        self.log(f"cardpool-agent: session {session_id} started for {user} (pid {proc.pid})")
        return proc.pid

    def stop(self, session_id: int, pid: int) -> None:
        """End the session's process group and every process under it (JupyterLab starts its
        kernels and terminals in sessions of their own): TERM, then KILL after 5 s."""
        tree = [pid, *descendants(pid)]
        for sig, wait in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 2.0)):
            tree += [p for p in descendants(pid) if p not in tree]
            for target in tree:
                try:
                    os.killpg(target, sig) if target == pid else os.kill(target, sig)
                except (ProcessLookupError, PermissionError):
                    pass
            deadline = time.monotonic() + wait
            while time.monotonic() < deadline and any(_alive(p) for p in tree):
                time.sleep(0.1)
            if not any(_alive(p) for p in tree):
                break
        self._pidfile(session_id).unlink(missing_ok=True)
        for left in Path("/tmp").glob(f"cardpool-desktop-{int(session_id)}-*"):
            shutil.rmtree(left, ignore_errors=True)  # the desktop's socket, token and logs
        display = desktop_display(session_id)  # its X lock names a PID of another namespace
        for left in (Path(f"/tmp/.X{display}-lock"), Path(f"/tmp/.X11-unix/X{display}")):
            left.unlink(missing_ok=True)
        self.log(f"cardpool-agent: session {session_id} stopped")

    def log_tail(self, session_id: int) -> str:
        try:
            return (
                (self.state / f"session-{session_id}.log")
                .read_bytes()[-1500:]
                .decode(errors="replace")
            )
        except OSError:
            return ""

    def reconcile_sessions(self, wanted: list[dict]) -> list[dict]:
        """Start, stop and check; the reports for the portal."""
        running = self.running()
        listed = {int(item["id"]): item for item in wanted}
        for session_id, pid in running.items():
            if session_id not in listed:
                self.stop(session_id, pid)
        reports = []
        for session_id, item in listed.items():
            pid = running.get(session_id)
            failed = self.state / f"session-{session_id}.failed"
            if pid is not None and not _alive(pid):
                self._pidfile(session_id).unlink(missing_ok=True)
                failed.write_text("exited")
                reports.append(
                    {
                        "id": session_id,
                        "state": "failed",
                        "kind": "exited",
                        "message": self.log_tail(session_id),
                    }
                )
                continue
            if pid is None:
                if failed.exists():
                    continue
                try:
                    self.start(item)
                except (OSError, KeyError, StartError) as exc:
                    failed.write_text(str(exc))
                    kind = exc.kind if isinstance(exc, StartError) else "backend"
                    reports.append(
                        {"id": session_id, "state": "failed", "kind": kind, "message": str(exc)}
                    )
                continue
            if item.get("state") == "starting" and port_open(self.address, int(item["port"])):
                reports.append({"id": session_id, "state": "running", "address": self.address})
        return reports

    # --- SSH keys --------------------------------------------------------------------------

    def reconcile_keys(self, wanted: list[dict]) -> int:
        """Rewrite the marked lines of each user's authorized_keys; returns files changed."""
        lines: dict[str, set[str]] = {}
        items: dict[str, dict] = {}
        fences = self.state / "fences"
        kept = set()
        for item in wanted:
            marked = list(item.get("lines") or [])
            if self.fence.usable and item.get("fence") is not None and "lease" in item:
                spec = self.fence.spec_file(fences, int(item["lease"]), item["fence"])
                kept.add(spec.name)
                marked = [fenced_key_line(line, forced_command(spec)) for line in marked]
            lines.setdefault(str(item["user"]), set()).update(marked)
            items[str(item["user"])] = item
        for stale in fences.glob("lease-*.json") if fences.is_dir() else ():
            if stale.name not in kept:
                stale.unlink(missing_ok=True)
        seen_file = self.state / "key-users.json"
        try:
            before = set(json.loads(seen_file.read_text()))
        except (OSError, ValueError):
            before = set()
        changed = 0
        for user in sorted(before | set(lines)):
            try:
                account = self.account(items.get(user, {"user": user}))
                changed += self._write_keys(account, sorted(lines.get(user, ())))
            except (KeyError, OSError, AccountError) as exc:
                self.log(f"cardpool-agent: keys of {user}: {exc}")
        seen_file.write_text(json.dumps(sorted(set(lines))))
        return changed

    def _write_keys(self, account: Account, marked: list[str]) -> int:
        ssh = account.home / ".ssh"
        path = ssh / "authorized_keys"
        try:
            old = path.read_text().splitlines()
        except FileNotFoundError:
            old = []
        new = [line for line in old if MARK not in line] + marked
        if new == old:
            return 0
        ssh.mkdir(mode=0o700, exist_ok=True)
        tmp = ssh / ".authorized_keys.cardpool"
        tmp.write_text("\n".join(new) + ("\n" if new else ""))
        os.chmod(tmp, 0o600)
        if os.geteuid() == 0:
            for target in (ssh, tmp):
                os.chown(target, account.uid, account.gid)
        os.replace(tmp, path)
        return 1


def _call(url: str, token: str, *, body: dict | None = None, timeout: float = 10, opener=None):
    request = Request(  # noqa: S310 - the operator gives the portal's URL
        url,
        data=json.dumps(body).encode() if body is not None else None,
        method="POST" if body is not None else "GET",
        headers={
            "Authorization": f"Node {token}",
            "Content-Type": "application/json",
            "Accept": "application/json",
            "User-Agent": "cardpool-agent/1",
        },
    )
    with (opener or urlopen)(request, timeout=timeout) as response:
        return json.loads(response.read() or b"{}")


ACCOUNTS_EVERY = 300.0  # seconds between two questions about the managed accounts' people


def sessions_round(
    api_base: str, token: str, keeper: SessionKeeper, *, leavers_due: bool = False, **kwargs
) -> dict:
    """One round: fetch the work, converge sessions and keys, report; with *leavers_due*, ask
    which managed accounts' people left and lock those. *api_base* is ``…/api/v1/``."""
    base = api_base.rstrip("/") + "/"
    said = urlencode({"can": ",".join(keeper.can), "gl": keeper.gl})
    work = _call(f"{base}agent/work/?{said}", token, **kwargs)
    reports = keeper.reconcile_sessions(work.get("sessions", []))
    keys = keeper.reconcile_keys(work.get("keys", []))
    if reports:
        _call(base + "agent/sessions/", token, body={"sessions": reports}, **kwargs)
    locked = 0
    if leavers_due and keeper.managed():
        answer = _call(
            base + "agent/accounts/", token, body={"accounts": keeper.managed()}, **kwargs
        )
        locked = keeper.lock_leavers(list(answer.get("leavers", [])))
    return {
        "sessions": len(work.get("sessions", [])),
        "reports": reports,
        "keys_changed": keys,
        "locked": locked,
    }


if __name__ == "__main__":  # the forced command of a fenced key: agent_sessions.py fence SPEC
    if len(sys.argv) == 3 and sys.argv[1] == "fence":
        sys.exit(fence_login(sys.argv[2]))
    sys.exit("usage: agent_sessions.py fence SPEC")
