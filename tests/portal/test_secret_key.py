"""Outside debugging the portal refuses to start with a missing, published or short secret key."""

import os
import secrets
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured

from portal.secret_key import DEV_SECRET_KEY, checked_secret_key

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("key", "words"),
    [
        (None, "must be set"),
        ("", "must be set"),
        (DEV_SECRET_KEY, "published"),
        ("test-only-not-secret", "published"),
        ("x", "too short"),
        ("a" * 64, "too plain"),
        ("5f0c" * 10, "too short"),  # 40 characters, varied
    ],
)
def test_production_refuses_known_or_short_keys(key, words):
    with pytest.raises(ImproperlyConfigured, match=words):
        checked_secret_key(key, debug=False)


def test_a_random_key_is_accepted_and_debug_takes_anything():
    key = secrets.token_hex(32)
    assert checked_secret_key(key, debug=False) == key
    assert checked_secret_key(None, debug=True) == DEV_SECRET_KEY
    assert checked_secret_key("x", debug=True) == "x"


def test_start_stops_with_the_published_key(tmp_path):
    """The refusal happens when the settings load: `manage.py check` exits with the message."""
    env = {
        **os.environ,
        "CARDPOOL_DEBUG": "false",
        "CARDPOOL_SECRET_KEY": DEV_SECRET_KEY,
        "CARDPOOL_VAR_DIR": str(tmp_path),
        "DJANGO_SETTINGS_MODULE": "portal.settings",
    }
    done = subprocess.run(
        [sys.executable, "manage.py", "check"], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert done.returncode != 0
    assert "ImproperlyConfigured" in done.stderr and "published" in done.stderr
