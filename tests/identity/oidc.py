"""The test OpenID Connect provider (tests/identity/idp/, django-oidc-provider) as a separate
process on a free port with its own SQLite file in a temp directory."""

from __future__ import annotations

import os
import socket
import sqlite3
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CLIENT_ID = "cardpool"
CLIENT_SECRET = "cardpool-secret"


def missing() -> str | None:
    try:
        import oidc_provider  # noqa: F401
    except ImportError:
        return "needs django-oidc-provider (pip install -e '.[test]'; CI has it)"
    return None


@dataclass
class Provider:
    directory: Path
    url: str
    process: subprocess.Popen

    @property
    def issuer(self) -> str:
        return f"{self.url}/openid"

    def expire_codes(self) -> int:
        """Make every authorization code the provider has handed out expired."""
        with sqlite3.connect(self.directory / "idp.sqlite3") as db:
            return db.execute(
                "UPDATE oidc_provider_code SET expires_at = '2000-01-01 00:00:00'"
            ).rowcount

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)


def start(directory: Path, *, redirect_uri: str) -> Provider:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "CARDPOOL_"))} | {
        "DJANGO_SETTINGS_MODULE": "tests.identity.idp.settings",
        "IDP_DIR": str(directory),
        "IDP_URL": url,
        "PYTHONPATH": str(ROOT),
    }
    log = open(directory / "idp.log", "w")  # noqa: SIM115 - kept open for the process
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.identity.idp.serve", str(port), redirect_uri],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    provider = Provider(directory=directory, url=url, process=process)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(
                "the provider died on start:\n" + (directory / "idp.log").read_text()
            )
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return provider
        time.sleep(0.1)
    provider.stop()
    raise RuntimeError("the provider did not listen within 60 s")
