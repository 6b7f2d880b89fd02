#!/usr/bin/env python3
"""Cardpool's two commands for a fresh machine with only Python 3.11+.

    python3 cardpool.py demo    install into .venv, migrate, load demo data, and run the web
                                server with a real Celery worker and beat (restarted when they
                                stop; Ctrl-C or SIGTERM stops all)
    python3 cardpool.py test    install into .venv (with test tools) and run the whole test suite

Only the standard library is used here: this file runs before anything is installed.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = Path(os.environ.get("CARDPOOL_VENV", ROOT / ".venv"))
PY = VENV / "bin" / "python"


def say(msg: str) -> None:
    print(f"[cardpool] {msg}", flush=True)


def run(*args: str, env: dict | None = None) -> None:
    subprocess.run(args, cwd=ROOT, env=env, check=True)


def ensure_venv(extras: str = "") -> None:
    """Create .venv and install the project (editable) when pyproject.toml changed."""
    if sys.version_info < (3, 11):  # noqa: UP036 - this file runs on whatever python3 is
        sys.exit(f"Cardpool needs Python 3.11 or newer; this is {sys.version.split()[0]}.")
    if not PY.exists():
        say(f"creating a virtual environment in {VENV}")
        venv.EnvBuilder(with_pip=True).create(VENV)
    spec = f".[{extras}]" if extras else "."
    digest = hashlib.sha256((ROOT / "pyproject.toml").read_bytes() + spec.encode()).hexdigest()
    stamp = VENV / f".cardpool-installed-{extras or 'base'}"
    if stamp.exists() and stamp.read_text() == digest:
        return
    say(f"installing Cardpool and its dependencies ({spec}) — the first time takes a minute")
    run(str(PY), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "-e", spec)
    stamp.write_text(digest)


def _signal_group(proc: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)
    except ProcessLookupError:
        pass


def _stop(signum, frame) -> None:
    raise KeyboardInterrupt


class Child:
    """One supervised process: started in its own session so its children (the worker's pool)
    stop with it, restarted with a growing pause when it exits on its own."""

    def __init__(self, name: str, argv: list[str], *, cwd=ROOT, env=None) -> None:
        self.name, self.argv, self.cwd, self.env = name, argv, cwd, env
        self.proc: subprocess.Popen | None = None
        self.started_at = 0.0
        self.restarts = 0
        self.failures = 0  # exits in a row without a healthy run in between
        self.restart_at: float | None = None

    def start(self) -> None:
        self.proc = subprocess.Popen(self.argv, cwd=self.cwd, env=self.env, start_new_session=True)
        self.started_at = time.monotonic()
        self.restart_at = None


class Supervisor:
    """Keeps every child running until it is told to stop (Ctrl-C, SIGTERM): a worker or beat
    that crashes is started again after a pause (``backoff`` seconds, doubling up to
    ``max_backoff`` while it keeps crashing) with a line in the log; the others keep running."""

    def __init__(
        self,
        children: list[Child],
        *,
        backoff: float = 1.0,
        max_backoff: float = 60.0,
        healthy_after: float = 60.0,
        state_file: Path | None = None,
        log=say,
    ) -> None:
        self.children = children
        self.backoff, self.max_backoff, self.healthy_after = backoff, max_backoff, healthy_after
        self.state_file = state_file
        self.log = log

    def start(self) -> None:
        for child in self.children:
            child.start()
        self._write_state()

    def step(self) -> None:
        """Notice exits and restart whatever is due; call it every fraction of a second."""
        now = time.monotonic()
        changed = False
        for child in self.children:
            if child.restart_at is None and child.proc.poll() is not None:
                ran = now - child.started_at
                child.failures = 1 if ran >= self.healthy_after else child.failures + 1
                pause = min(self.backoff * 2 ** (child.failures - 1), self.max_backoff)
                child.restart_at = now + pause
                self.log(
                    f"{child.name} (pid {child.proc.pid}) exited with code {child.proc.returncode}"
                    f" after {ran:.0f} s; restarting it in {pause:g} s"
                )
            if child.restart_at is not None and now >= child.restart_at:
                _signal_group(child.proc, signal.SIGKILL)  # what is left of its pool
                child.restarts += 1
                child.start()
                self.log(f"{child.name} restarted (pid {child.proc.pid}, restart {child.restarts})")
                changed = True
        if changed:
            self._write_state()

    def stop(self) -> None:
        # SIGTERM to each child itself (a worker then stops its own pool: a warm shutdown),
        # SIGKILL to the whole group of whatever has not stopped in 15 s.
        for child in self.children:
            if child.proc is not None and child.proc.poll() is None:
                child.proc.terminate()
        for child in self.children:
            if child.proc is None:
                continue
            try:
                child.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                pass
            _signal_group(child.proc, signal.SIGKILL)  # whatever is left of its children

    def _write_state(self) -> None:
        """Who runs under which pid, and how often each was restarted (bench/soak.py reads it)."""
        if self.state_file is None:
            return
        state = {
            "launcher": os.getpid(),
            "children": {
                c.name: {"pid": c.proc.pid, "restarts": c.restarts} for c in self.children
            },
        }
        tmp = self.state_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(state, indent=1))
        os.replace(tmp, self.state_file)


def demo_env(environ: dict[str, str]) -> dict[str, str]:
    """The demo's settings: the production ones (no debug pages, own error pages, a secret key
    of its own kept in var/demo-secret-key) except for plain-HTTP cookies on this machine.
    CARDPOOL_DEBUG=true asks for Django's debug mode."""
    env = dict(environ)
    env.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
    host = env.get("CARDPOOL_HOST", "127.0.0.1")
    port = env.get("CARDPOOL_PORT", "8000")
    env.setdefault("CARDPOOL_SITE_URL", f"http://{host}:{port}")
    env.setdefault(
        "CARDPOOL_ALLOWED_HOSTS", ",".join(dict.fromkeys([host, "localhost", "127.0.0.1", "[::1]"]))
    )
    env.setdefault("CARDPOOL_SECURE_COOKIES", "false")  # the demo speaks plain HTTP
    if not env.get("CARDPOOL_SECRET_KEY") and not env.get("CARDPOOL_SECRET_KEY_FILE"):
        var_dir = Path(env.get("CARDPOOL_VAR_DIR", ROOT / "var"))
        var_dir.mkdir(parents=True, exist_ok=True)
        key_file = var_dir / "demo-secret-key"
        if not key_file.exists():
            fd = os.open(key_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(secrets.token_hex(32))
        key_file.chmod(0o600)  # narrowed also when an older demo left it wider
        env["CARDPOOL_SECRET_KEY_FILE"] = str(key_file)
    return env


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def let_everyone_through(path: Path) -> list[Path]:
    """Give others search (o+x, not read) on *path* and each directory above it that lacks
    it; the directories changed."""
    changed = []
    for directory in [path.resolve(), *path.resolve().parents]:
        mode = directory.stat().st_mode
        if not mode & 0o001:
            directory.chmod(mode | 0o001)
            changed.append(directory)
    return changed


def demo_sessions(env: dict, var_dir: Path, host: str, port: str) -> tuple[str, list]:
    """When nginx and JupyterLab are here: this machine becomes a node whose cardpool-agent
    runs the sessions, and nginx (the session proxy) listens on the demo's port in front of
    the portal. Returns the portal's own address and the extra children ([] = no sessions)."""
    if os.environ.get("CARDPOOL_DEMO_SESSIONS") == "1":
        ensure_venv("sessions")
    jupyter = VENV / "bin" / "jupyter"
    if shutil.which("nginx") is None or not jupyter.exists():
        say("sessions off: they need nginx and JupyterLab (CARDPOOL_DEMO_SESSIONS=1 installs it)")
        return f"{host}:{port}", []
    manage = [str(PY), "manage.py"]
    workspaces = var_dir / "workspaces"
    for sub in ("users", "teams"):
        (workspaces / sub).mkdir(parents=True, exist_ok=True)
        (workspaces / sub).chmod(0o1777)
    env["CARDPOOL_SESSION_JUPYTER"] = str(jupyter)
    env.setdefault("CARDPOOL_WORKSPACE_ROOT", str(workspaces))
    if os.geteuid() == 0:
        # As root the agent creates each person's account (cardpool-bob, no password, home
        # under the workspaces); they run JupyterLab from this venv, so must reach it.
        env.setdefault("CARDPOOL_SESSION_ACCOUNTS", "managed")
        # The demo cards' stand-in device nodes (like /dev/null): a session's private /dev
        # (bubblewrap) holds only the leased one's, as a real card's would.
        devices = var_dir / "demo-dev"
        devices.mkdir(exist_ok=True)
        for index in range(2):
            node = devices / f"card{index}"
            if not node.exists():
                os.mknod(node, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
            node.chmod(0o666)
        env.setdefault("CARDPOOL_AGENT_DEV_ROOT", str(devices))
        for path in (VENV, workspaces):
            for opened in let_everyone_through(path):
                say(f"made {opened} traversable (o+x) so the session accounts reach {path}")
    token_file = var_dir / "agent-token"
    run(*manage, "demo_this_machine", "--token-file", str(token_file), env=env)
    inner = f"127.0.0.1:{_free_port()}"
    conf = var_dir / "nginx" / "nginx.conf"
    run(
        *manage,
        "session_proxy_config",
        "--listen",
        f"{host}:{port}",
        "--portal",
        inner,
        "--var-dir",
        str(var_dir / "nginx"),
        "--output",
        str(conf),
        env=env,
    )
    agent = [
        str(PY),
        "-m",
        "inventory.agent",
        "--sessions",
        "--no-telemetry",
        "--url",
        f"http://{inner}/api/v1/telemetry/",
        "--token-file",
        str(token_file),
        "--state-dir",
        str(var_dir / "agent"),
        "--session-address",
        "127.0.0.1",
        "--session-interval",
        "2",
    ]
    children = [
        Child("proxy", ["nginx", "-c", str(conf)], env=env),
        Child("agent", agent, env=env),
    ]
    return inner, children


def demo() -> int:
    ensure_venv()
    env = demo_env(dict(os.environ))
    host = env.get("CARDPOOL_HOST", "127.0.0.1")
    port = env.get("CARDPOOL_PORT", "8000")
    manage = [str(PY), "manage.py"]
    run(*manage, "migrate", "--no-input", "-v", "0", env=env)
    run(*manage, "seed_demo", env=env)
    # Without debug the portal serves its assets the production way (whitenoise, collected).
    run(*manage, "collectstatic", "--no-input", "-v", "0", env=env)
    celery = [str(PY), "-m", "celery", "-A", "portal"]
    var_dir = Path(env.get("CARDPOOL_VAR_DIR", ROOT / "var"))
    var_dir.mkdir(parents=True, exist_ok=True)
    web_at, session_children = demo_sessions(env, var_dir, host, port)
    supervisor = Supervisor(
        [
            *session_children,
            Child("web", [*manage, "runserver", "--noreload", web_at], env=env),
            # One worker, no broadcasts between workers (gossip, mingle, heartbeats): there is
            # nobody to talk to, and they are what the server-less broker handles worst.
            Child(
                "worker",
                [
                    *celery,
                    "worker",
                    "--loglevel",
                    "INFO",
                    "--concurrency",
                    "2",
                    "--hostname",
                    "cardpool-demo@%h",
                    "--without-gossip",
                    "--without-mingle",
                    "--without-heartbeat",
                ],
                env=env,
            ),
            Child("beat", [*celery, "beat", "--loglevel", "INFO"], env=env),
        ],
        state_file=var_dir / "demo-processes.json",
    )
    # SIGTERM (a service manager, `timeout`) stops everything like Ctrl-C does.
    signal.signal(signal.SIGTERM, _stop)
    password = env.get("CARDPOOL_DEMO_PASSWORD", "cardpool-demo")
    try:
        supervisor.start()
        time.sleep(2)
        say("")
        say(f"Cardpool is running at  http://{host}:{port}/")
        say(f"API docs:               http://{host}:{port}/api/v1/docs/")
        say(f"demo logins (password '{password}'):")
        say("  alice  member of team vision      lena  lead of team vision")
        say("  bob    member of team nlp         fin   finance")
        say("  chen   member of team vision      ops   operator (also /admin/)")
        say("a Celery worker and beat run alongside (restarted if they stop);")
        if session_children:
            say("this machine is a node too: lease a 'Demo card (this machine)' and open")
            say("JupyterLab, a terminal or a desktop from the lease page (nginx and")
            say("cardpool-agent run alongside; with bubblewrap a session sees only its card;")
            say("bob has room in his quota; as root the agent runs each person's sessions as")
            say("an account it creates (cardpool-bob), else they run as you);")
        say("press Ctrl-C to stop everything")
        while True:
            supervisor.step()
            time.sleep(0.5)
    except KeyboardInterrupt:
        pass
    finally:
        supervisor.stop()
    return 0


def test_workers(args: list[str]) -> list[str]:
    """pytest-xdist's option: one worker per core (at most 4; tests/conftest.py keeps the tests
    of one-per-machine things on one worker); none when the caller chose (``-n``,
    ``-p no:xdist``) or there is one core."""
    chose = any(a.startswith(("-n", "--numprocesses")) or a.endswith("no:xdist") for a in args)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    if chose or not cores or cores < 2:
        return []
    return ["-n", str(min(cores, 4))]


def test(args: list[str]) -> int:
    ensure_venv("test")
    return subprocess.call([str(PY), "-m", "pytest", *test_workers(args), *args], cwd=ROOT)


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in {"demo", "test"}:
        print(__doc__)
        return 2
    if argv[0] == "demo":
        return demo()
    return test(argv[1:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
