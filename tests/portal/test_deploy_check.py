"""`manage.py check --deploy` is clean under the production settings, which are the defaults of
docker-compose.yml (the documented production shape)."""

import os
import re
import secrets
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
VARIABLE = re.compile(r"\$\{(\w+)(?::([-?])([^}]*))?\}")


def compose_environment() -> dict[str, str]:
    """The app's environment in docker-compose.yml with every ${NAME:-default} at its default;
    the required secret key (${NAME:?...}) is a freshly generated one, as the comment says."""
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    raw = compose["x-app"]["environment"]

    def resolve(match: re.Match) -> str:
        name, kind, default = match.groups()
        if kind == "-":
            return default
        assert name == "CARDPOOL_SECRET_KEY", f"{name} has no default in docker-compose.yml"
        return secrets.token_hex(32)

    return {name: VARIABLE.sub(resolve, str(value)) for name, value in raw.items()}


def _deploy_check(env: dict[str, str], tmp_path: Path) -> subprocess.CompletedProcess:
    clean = {key: os.environ[key] for key in ("PATH", "HOME", "LANG") if key in os.environ}
    clean |= env | {"CARDPOOL_VAR_DIR": str(tmp_path), "DJANGO_SETTINGS_MODULE": "portal.settings"}
    return subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "DEBUG"],
        cwd=ROOT,
        env=clean,
        capture_output=True,
        text=True,
    )


def test_compose_defaults_are_the_production_settings():
    env = compose_environment()
    assert env["CARDPOOL_SECURE_COOKIES"] == "true" and env["CARDPOOL_SSL_REDIRECT"] == "true"
    assert int(env["CARDPOOL_HSTS_SECONDS"]) >= 31536000
    assert env["CARDPOOL_BEHIND_TLS_PROXY"] == "true"
    assert env.get("CARDPOOL_DEBUG", "false") == "false"


def test_check_deploy_is_clean_with_the_compose_defaults(tmp_path):
    done = _deploy_check(compose_environment(), tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "System check identified no issues" in done.stdout, done.stdout + done.stderr
