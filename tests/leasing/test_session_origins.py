"""Each session on its own origin (portal/session_hosts.py, leasing/workbench/views.py): the
ticket and pass rules, what the portal answers on a session's host, the cookie names, the
migration that ends earlier logins, and the generated proxy configuration (mode 0600)."""

from __future__ import annotations

import importlib
import os
import secrets
import stat
import subprocess
import sys
from urllib.parse import urlsplit

import pytest
from django.contrib.sessions.models import Session as LoginSession
from django.core.management import call_command
from django.test import Client

from leasing.lifecycle import provisioning
from leasing.workbench import sessions
from leasing.workbench.proxy import nginx_config
from leasing.workbench.views import proxy_secret
from portal.secret_key import secret_file_write
from portal.session_hosts import cookie_names, session_host_id
from tests.factories import CardModelFactory, make_node
from tests.leasing.conftest import ask


@pytest.fixture
def running(alice, vision):
    model = CardModelFactory(slug="so-a10", name="A10", vendor="nvidia")
    make_node(model, cards=2, hostname="so-node")
    lease = ask(alice, vision, model, start_at=None)
    assert provisioning.provision_step(lease_id=lease.pk)
    lease.refresh_from_db()
    session = sessions.session_open(lease=lease, user=alice)
    sessions.session_running(session_id=session.pk, address="10.0.0.9")
    return lease, session


def _ticket(user, lease) -> str:
    client = Client()
    client.force_login(user)
    go = client.get(f"/leases/{lease.pk}/session/go/")
    assert go.status_code == 302
    return go["Location"]


def _ask(client, session_id, uri=None):
    return client.get(
        "/sessions/auth/",
        HTTP_X_ORIGINAL_URI=uri or f"/sessions/{session_id}/lab",
        HTTP_X_CARDPOOL_PROXY=proxy_secret(),
    )


def test_a_ticket_opens_its_sessions_origin_once(running, alice):
    lease, session = running
    location = urlsplit(_ticket(alice, lease))
    assert location.netloc == f"s{session.pk}.testserver"
    origin = Client(HTTP_HOST=location.netloc)
    assert _ask(origin, session.pk).status_code == 403  # no pass yet
    answer = origin.get(f"{location.path}?{location.query}")
    assert answer.status_code == 302 and answer["Location"] == f"/sessions/{session.pk}/lab"
    assert _ask(origin, session.pk).status_code == 200
    # The ticket is spent; another browser with it gets nothing.
    again = Client(HTTP_HOST=location.netloc).get(f"{location.path}?{location.query}")
    assert again.status_code == 403
    # Only /sessions/<id>/ of its own id is passed to the node.
    assert _ask(origin, session.pk, uri="/api/v1/leases/").status_code == 403
    assert _ask(origin, session.pk, uri=f"/sessions/{session.pk + 1}/lab").status_code == 403


def test_a_ticket_or_pass_does_not_open_another_sessions_origin(running, alice):
    lease, session = running
    location = urlsplit(_ticket(alice, lease))
    other = Client(HTTP_HOST=f"s{session.pk + 1}.testserver")
    assert other.get(f"{location.path}?{location.query}").status_code == 403
    origin = Client(HTTP_HOST=location.netloc)
    origin.get(f"{location.path}?{location.query}")
    other.cookies = origin.cookies
    assert _ask(other, session.pk + 1).status_code == 403


def test_a_password_change_ends_the_pass(running, alice):
    lease, session = running
    location = urlsplit(_ticket(alice, lease))
    origin = Client(HTTP_HOST=location.netloc)
    origin.get(f"{location.path}?{location.query}")
    assert _ask(origin, session.pk).status_code == 200
    alice.set_password("a-new-password-for-alice")
    alice.save()
    assert _ask(origin, session.pk).status_code == 403


def test_the_portal_login_does_not_open_a_session_origin(running, alice):
    """The portal's cookie (had the browser sent it) is not the session's pass."""
    _lease, session = running
    origin = Client(HTTP_HOST=f"s{session.pk}.testserver")
    origin.force_login(alice)
    assert _ask(origin, session.pk).status_code == 403


def test_on_a_session_origin_the_portal_answers_only_the_sessions_paths(running, alice):
    _lease, session = running
    origin = Client(HTTP_HOST=f"s{session.pk}.testserver")
    origin.force_login(alice)
    for path in ("/api/v1/leases/", "/", "/accounts/login/", "/admin/", "/leases/"):
        answer = origin.get(path)
        assert answer.status_code == 404, path
        assert not answer.cookies, path  # not even a CSRF cookie for its scripts to read


def test_on_the_portal_a_running_session_is_opened_on_its_own_origin(running, alice):
    _lease, session = running
    client = Client()
    client.force_login(alice)
    answer = client.get(f"/sessions/{session.pk}/lab")
    assert answer.status_code == 302
    assert urlsplit(answer["Location"]).netloc == f"s{session.pk}.testserver"


@pytest.mark.parametrize(
    ("host", "expected"),
    [
        ("s12.localhost:8000", 12),
        ("S7.portal.example", 7),
        ("portal.example", None),
        ("sx.portal.example", None),
        ("s" + "9" * 5000 + ".localhost", 0),
        ("[::1]:8000", None),
    ],
)
def test_session_hosts_are_recognised(host, expected):
    assert session_host_id(host) == expected


def test_cookie_names_carry_the_host_prefix_under_https():
    assert cookie_names(secure=True) == ("__Host-cardpool-session", "__Host-cardpool-csrf")
    code = (
        "import portal.settings as s;"
        "print(s.SESSION_COOKIE_NAME, s.CSRF_COOKIE_NAME, s.SESSION_COOKIE_SECURE,"
        " s.SESSION_COOKIE_DOMAIN, '.sessions.lab.example' in s.ALLOWED_HOSTS)"
    )
    env = {
        **os.environ,
        "CARDPOOL_SECRET_KEY": secrets.token_hex(32),
        "CARDPOOL_ALLOWED_HOSTS": "portal.lab.example",
        "CARDPOOL_SESSION_DOMAIN": "sessions.lab.example",
    }
    env.pop("CARDPOOL_SECURE_COOKIES", None)
    env.pop("CARDPOOL_DEBUG", None)
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    ).stdout.split()
    assert out == ["__Host-cardpool-session", "__Host-cardpool-csrf", "True", "None", "True"]


def test_the_upgrade_ends_every_earlier_login(alice, bob):
    for user in (alice, bob):
        Client().force_login(user)
    assert LoginSession.objects.count() == 2
    migration = importlib.import_module(
        "portal.migrations.0011_end_sessions_before_session_origins"
    )
    from django.apps import apps

    migration.end_sessions(apps, None)
    assert LoginSession.objects.count() == 0


def test_the_proxy_configuration_is_written_for_its_owner_only(tmp_path, settings):
    target = tmp_path / "nginx.conf"
    target.write_text("old")
    target.chmod(0o644)
    old = os.umask(0o022)
    try:
        call_command("session_proxy_config", "--output", str(target), "--var-dir", str(tmp_path))
    finally:
        os.umask(old)
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    assert proxy_secret() in target.read_text()
    fresh = tmp_path / "token"
    secret_file_write(fresh, "s3cret")
    assert stat.S_IMODE(fresh.stat().st_mode) == 0o600 and fresh.read_text() == "s3cret"


def test_the_session_server_block_strips_the_visitors_login(tmp_path):
    conf = nginx_config(
        listen="8080", portal="127.0.0.1:8000", var_dir=str(tmp_path), domain="s.example"
    )
    session_block = conf.split("# Session <id> on its own origin")[1]
    location = session_block.split("location /sessions/ {")[1].split("}")[0]
    for line in (
        'proxy_set_header Cookie "";',
        'proxy_set_header Authorization "token $session_token";',
        'proxy_set_header X-CSRFToken "";',
        'sub_filter $session_token "";',
    ):
        assert line in location
    assert "server_name ~^s[0-9]+\\.s\\.example$;" in session_block
    # The portal's block passes nothing on to a node.
    assert "session_upstream" not in conf.split("# Session <id> on its own origin")[0]
