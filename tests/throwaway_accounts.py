"""A throwaway passwd for tests that need real Unix accounts: a process holding a mount
namespace whose /etc is an overlay over the machine's (writes land in a temporary directory),
and the agent's ``Accounts`` running getent/useradd/runuser in it through ``nsenter``. The
accounts the agent creates there never reach the machine's own /etc/passwd; they vanish with
the namespace. Needs root; ``why_not()`` says why it cannot run somewhere."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from contextlib import contextmanager
from functools import cache
from pathlib import Path

from inventory import agent_sessions

_HOLD = (
    'mount -t overlay overlay -o "lowerdir=/etc,upperdir=$1/upper,workdir=$1/work" /etc '
    "&& echo ready && exec sleep infinity"
)


@cache
def why_not() -> str:
    """Why throwaway accounts cannot be made here ("" when they can)."""
    if os.geteuid() != 0:
        return "needs root (accounts are made in a throwaway mount namespace with overlay /etc)"
    for tool in ("unshare", "nsenter", "useradd", "runuser"):
        if shutil.which(tool) is None:
            return f"needs {tool} (util-linux / passwd)"
    try:
        with throwaway_accounts() as accounts:
            if accounts.run(["true"]).returncode != 0:
                return "nsenter into the throwaway namespace failed"
    except (OSError, RuntimeError) as exc:
        return f"cannot make a throwaway /etc overlay here: {exc}"
    return ""


@contextmanager
def stand_in_devices(names=("nvidia0", "nvidia1", "nvidia2", "nvidia3", "nvidiactl")):
    """A directory anyone can read holding stand-in device nodes (char 1:3, like /dev/null)
    for the cards: what a fence binds instead of real ones (needs root: mknod)."""
    root = Path(tempfile.mkdtemp(prefix="cardpool-dev-", dir="/tmp"))
    try:
        root.chmod(0o755)
        for name in names:
            os.mknod(root / name, 0o666 | 0o020000, os.makedev(1, 3))  # S_IFCHR
            (root / name).chmod(0o666)
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


@contextmanager
def throwaway_accounts():
    """Yields an ``agent_sessions.Accounts`` whose changes stay in a throwaway /etc."""
    with tempfile.TemporaryDirectory(prefix="cardpool-etc-") as tmp:
        for sub in ("upper", "work"):
            Path(tmp, sub).mkdir()
        holder = subprocess.Popen(  # noqa: S603 - fixed argv
            ["unshare", "--mount", "--propagation", "private", "sh", "-c", _HOLD, "sh", tmp],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            assert holder.stdout is not None
            if holder.stdout.readline().strip() != "ready":
                raise RuntimeError((holder.stderr.read() if holder.stderr else "")[:300])
            yield agent_sessions.Accounts(prefix=["nsenter", "-t", str(holder.pid), "-m", "--"])
        finally:
            holder.kill()
            holder.wait()
