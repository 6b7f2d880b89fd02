"""`manage.py session_proxy_config`: which scheme nginx tells the portal."""

import re

from django.core.management import call_command


def _proto_headers(path) -> set[str]:
    return set(re.findall(r"X-Forwarded-Proto (\S+);", path.read_text()))


def test_alone_nginx_tells_its_own_scheme(tmp_path, settings):
    settings.SECURE_PROXY_SSL_HEADER = None
    out = tmp_path / "nginx.conf"
    call_command("session_proxy_config", "--var-dir", str(tmp_path / "var"), "--output", str(out))
    assert _proto_headers(out) == {"$scheme"}


def test_behind_a_tls_terminator_nginx_passes_on_its_scheme(tmp_path, settings):
    """CARDPOOL_BEHIND_TLS_PROXY: nginx itself speaks plain HTTP to the terminator; were it to
    say `http`, every request would be redirected to HTTPS again, for ever."""
    settings.SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    out = tmp_path / "nginx.conf"
    call_command("session_proxy_config", "--var-dir", str(tmp_path / "var"), "--output", str(out))
    assert _proto_headers(out) == {"$http_x_forwarded_proto"}
