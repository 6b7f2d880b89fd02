#!/usr/bin/env python3
"""Cardpool's two commands for a fresh machine with only Python 3.11+.

    python3 cardpool.py demo    install into .venv, migrate, load demo data, and run the web
                                server with a real Celery worker and beat (Ctrl-C stops all)
    python3 cardpool.py test    install into .venv (with test tools) and run the whole test suite

Only the standard library is used here: this file runs before anything is installed.
"""

from __future__ import annotations

import hashlib
import os
import signal
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


def demo() -> int:
    ensure_venv()
    env = os.environ.copy()
    env.setdefault("CARDPOOL_DEBUG", "true")
    env.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
    host = env.get("CARDPOOL_HOST", "127.0.0.1")
    port = env.get("CARDPOOL_PORT", "8000")
    env.setdefault("CARDPOOL_SITE_URL", f"http://{host}:{port}")
    manage = [str(PY), "manage.py"]
    run(*manage, "migrate", "--no-input", "-v", "0", env=env)
    run(*manage, "seed_demo", env=env)
    procs = [
        subprocess.Popen(
            [
                str(PY),
                "-m",
                "celery",
                "-A",
                "portal",
                "worker",
                "--beat",
                "--loglevel",
                "INFO",
                "--concurrency",
                "2",
                "--hostname",
                "cardpool-demo@%h",
            ],
            cwd=ROOT,
            env=env,
            start_new_session=True,  # its pool and beat children stop with it (killpg below)
        ),
        subprocess.Popen(
            [*manage, "runserver", "--noreload", f"{host}:{port}"],
            cwd=ROOT,
            env=env,
            start_new_session=True,
        ),
    ]
    # SIGTERM (a service manager, `timeout`) stops everything like Ctrl-C does.
    signal.signal(signal.SIGTERM, _stop)
    password = env.get("CARDPOOL_DEMO_PASSWORD", "cardpool-demo")
    time.sleep(2)
    say("")
    say(f"Cardpool is running at  http://{host}:{port}/")
    say(f"API docs:               http://{host}:{port}/api/v1/docs/")
    say(f"demo logins (password '{password}'):")
    say("  alice  member of team vision      lena  lead of team vision")
    say("  bob    member of team nlp         fin   finance")
    say("  ops    operator (also /admin/)")
    say("a Celery worker and beat run alongside; press Ctrl-C to stop everything")
    try:
        while all(p.poll() is None for p in procs):
            time.sleep(0.5)
    except KeyboardInterrupt:
        pass
    finally:
        for p in procs:
            _signal_group(p, signal.SIGTERM)
        for p in procs:
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                pass
            _signal_group(p, signal.SIGKILL)  # whatever is left of its children (beat, pool)
    codes = [p.returncode for p in procs if p.returncode not in (None, 0, -signal.SIGTERM)]
    return max(codes, default=0)


def test(args: list[str]) -> int:
    ensure_venv("test")
    return subprocess.call([str(PY), "-m", "pytest", *args], cwd=ROOT)


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in {"demo", "test"}:
        print(__doc__)
        return 2
    if argv[0] == "demo":
        return demo()
    return test(argv[1:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
