"""The session proxy's configuration: nginx in front of the portal.

Two server blocks on one listen. The portal's host gets everything, ``/sessions/`` included
(the portal there opens a session on its own origin). Each session has its own origin,
``s<id>.<session domain>`` (portal/session_hosts.py), so its pages never share an origin
with the portal and never receive the portal's cookies. There, every request under
``/sessions/<id>/`` — page, API call or websocket upgrade — is first asked of the portal
(``auth_request`` → ``/sessions/auth/``, with the origin's pass cookie): only the holder of
a running session gets through, to the node and port the portal names. Before the node the
proxy drops every cookie and the browser's Authorization and sends Jupyter's token itself;
the token is cut out of anything the node answers, so the browser never sees it. Anything
else on a session origin goes to the portal, which answers only the session's own paths.
"""

from __future__ import annotations

import re
from pathlib import Path

from leasing.workbench.views import proxy_secret

TEMPLATE = """\
# Written by `manage.py session_proxy_config`; see docs/operations.md, "Sessions".
# It holds the secret the proxy proves itself to the portal with: keep it mode 0600.
{daemon}worker_processes 1;
pid {var}/nginx.pid;
error_log stderr warn;
events {{ worker_connections 1024; }}
http {{
  access_log off;
  client_body_temp_path {var}/body;
  proxy_temp_path {var}/proxy;
  fastcgi_temp_path {var}/fastcgi;
  uwsgi_temp_path {var}/uwsgi;
  scgi_temp_path {var}/scgi;
  client_max_body_size 512m;
  map $http_upgrade $connection_upgrade {{ default upgrade; '' close; }}
  upstream cardpool_portal {{ server {portal}; keepalive 16; }}

  # The portal (any host that is not a session's).
  server {{
    listen {listen} default_server;
    server_name _;

    location / {{
      proxy_pass http://cardpool_portal;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_set_header Host $http_host;
      proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
      proxy_set_header X-Forwarded-Proto {proto};
    }}
  }}

  # Session <id> on its own origin: s<id>.{domain_text}.
  server {{
    listen {listen};
    server_name {server_name};

    location /sessions/ {{
      auth_request /_cardpool_session_auth;
      auth_request_set $session_upstream $upstream_http_x_session_upstream;
      auth_request_set $session_token $upstream_http_x_session_token;
      error_page 401 403 = @cardpool_portal;
      proxy_pass http://$session_upstream;
      proxy_http_version 1.1;
      proxy_set_header Upgrade $http_upgrade;
      proxy_set_header Connection $connection_upgrade;
      proxy_set_header Host $http_host;
      proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
      proxy_set_header X-Forwarded-Proto {proto};
      # Nothing of the visitor's login goes to the node: no cookie (the pass, or any other
      # the browser holds for this origin), no Authorization of theirs; Jupyter's token is
      # the proxy's to send.
      proxy_set_header Cookie "";
      proxy_set_header Authorization "token $session_token";
      proxy_set_header X-CSRFToken "";
      proxy_set_header X-Cardpool-Proxy "";
      # ...and the token is cut out of what the node answers (JupyterLab's page config
      # carries it), so the browser never holds it. Answers come uncompressed to be read.
      proxy_set_header Accept-Encoding "";
      sub_filter $session_token "";
      sub_filter_once off;
      sub_filter_types text/plain text/javascript application/javascript application/json;
      proxy_read_timeout 1d;
      proxy_send_timeout 1d;
      proxy_buffering off;
    }}

    location / {{
      # The session's login step and the portal's answers for this origin; the portal
      # refuses everything else on a session's host.
      proxy_pass http://cardpool_portal;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_set_header Host $http_host;
      proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
      proxy_set_header X-Forwarded-Proto {proto};
      proxy_set_header Authorization "";
    }}

    location = /_cardpool_session_auth {{
      internal;
      proxy_pass http://cardpool_portal/sessions/auth/;
      proxy_pass_request_body off;
      proxy_set_header Content-Length "";
      proxy_set_header Host $http_host;
      proxy_set_header X-Original-URI $request_uri;
      proxy_set_header X-Cardpool-Proxy "{secret}";
      proxy_set_header X-Forwarded-Proto {proto};
      proxy_set_header Authorization "";
    }}

    location @cardpool_portal {{
      proxy_pass http://cardpool_portal;
      proxy_set_header Host $http_host;
      proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
      proxy_set_header X-Forwarded-Proto {proto};
      proxy_set_header Authorization "";
    }}
  }}
}}
"""


def _server_name(domain: str) -> str:
    """nginx's server_name regex for the session hosts under *domain* ("" = any domain)."""
    tail = re.escape(domain) if domain else ".+"
    return f"~^s[0-9]+\\.{tail}$"


def nginx_config(
    *,
    listen: str,
    portal: str,
    var_dir: str,
    foreground: bool = True,
    domain: str | None = None,
    behind_tls_proxy: bool = False,
) -> str:
    """A complete nginx.conf: *listen* (``8080`` or ``0.0.0.0:443 ssl``…) in front of the
    portal at *portal* (``127.0.0.1:8000``); nginx's own files under *var_dir*; sessions
    at ``s<id>.<domain>`` (default CARDPOOL_SESSION_DOMAIN; "" = under any host name).

    The portal learns the browser's scheme from ``X-Forwarded-Proto``: nginx's own (``http``
    unless TLS lines are added to it), or, *behind_tls_proxy*, the one the TLS terminator in
    front of nginx sent (else every request would look like plain HTTP and be redirected)."""
    from django.conf import settings

    if domain is None:
        domain = settings.CARDPOOL_SESSIONS["DOMAIN"]
    var = str(Path(var_dir).resolve())
    return TEMPLATE.format(
        proto="$http_x_forwarded_proto" if behind_tls_proxy else "$scheme",
        daemon="daemon off;\n" if foreground else "",
        var=var,
        portal=portal,
        listen=listen,
        secret=proxy_secret(),
        server_name=_server_name(domain.lower()),
        domain_text=domain or "<the portal's host>",
    )
