"""The secret key good enough to start with (read by portal/settings.py, before Django is set
up: imports nothing from Django but its exception)."""

from __future__ import annotations

import os

from django.core.exceptions import ImproperlyConfigured

DEV_SECRET_KEY = "insecure-dev-key-only-for-CARDPOOL_DEBUG"  # noqa: S105 (published: debug only)
# Keys anyone can read in this repository or its docs: never good enough outside debugging.
KNOWN_SECRET_KEYS = frozenset(
    {DEV_SECRET_KEY, "test-only-not-secret", "ci", "build", "bench", "changeme", "change-me"}
)
MIN_SECRET_KEY_LENGTH = 50  # what `manage.py check --deploy` asks for (security.W009)


def checked_secret_key(key: str | None, debug: bool) -> str:
    """The secret key to run with: outside debugging a missing, published or short key (under
    50 characters or under 5 different ones) stops the process at start."""
    if debug:
        return key or DEV_SECRET_KEY
    if not key:
        raise ImproperlyConfigured(
            "CARDPOOL_SECRET_KEY (or CARDPOOL_SECRET_KEY_FILE) must be set unless CARDPOOL_DEBUG=true"
        )
    if key in KNOWN_SECRET_KEYS or key.startswith("django-insecure"):
        raise ImproperlyConfigured(
            "CARDPOOL_SECRET_KEY is a key published with Cardpool: generate one, "
            "e.g. `openssl rand -hex 32`"
        )
    if len(key) < MIN_SECRET_KEY_LENGTH or len(set(key)) < 5:
        raise ImproperlyConfigured(
            f"CARDPOOL_SECRET_KEY is too short or too plain ({len(key)} characters, "
            f"{len(set(key))} different): use at least {MIN_SECRET_KEY_LENGTH} random characters, "
            "e.g. `openssl rand -hex 32`"
        )
    return key


def secret_file_write(path, text: str) -> None:
    """Write *text* to *path* readable by its owner only (0600) from the first byte: created
    with that mode, and an existing file narrowed before it is written. For every file we
    generate that holds a secret (the session proxy's nginx.conf, a node's agent token)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.fchmod(fd, 0o600)
        os.write(fd, text.encode())
    finally:
        os.close(fd)
