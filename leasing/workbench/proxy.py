"""The session proxy's configuration: nginx in front of the portal.

Every request under ``/sessions/<id>/`` — page, API call or websocket upgrade — is first
asked of the portal (``auth_request`` → ``/sessions/auth/``, with the browser's cookies):
only the holder of a running session gets through, to the node and port the portal names,
with Jupyter's token added by the proxy. Anything else goes to the portal, which answers
404, "starting" or "ended". Everything outside ``/sessions/`` is passed to the portal.
"""

from __future__ import annotations

from pathlib import Path

from leasing.workbench.views import proxy_secret

TEMPLATE = """\
# Written by `manage.py session_proxy_config`; see docs/operations.md, "Sessions".
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

  server {{
    listen {listen};

    location / {{
      proxy_pass http://cardpool_portal;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_set_header Host $http_host;
      proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
      proxy_set_header X-Forwarded-Proto {proto};
    }}

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
      proxy_set_header Authorization "token $session_token";
      proxy_read_timeout 1d;
      proxy_send_timeout 1d;
      proxy_buffering off;
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
    }}

    location @cardpool_portal {{
      proxy_pass http://cardpool_portal;
      proxy_set_header Host $http_host;
      proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
      proxy_set_header X-Forwarded-Proto {proto};
    }}
  }}
}}
"""


def nginx_config(
    *,
    listen: str,
    portal: str,
    var_dir: str,
    foreground: bool = True,
    behind_tls_proxy: bool = False,
) -> str:
    """A complete nginx.conf: *listen* (``8080`` or ``0.0.0.0:443 ssl``…) in front of the
    portal at *portal* (``127.0.0.1:8000``); nginx's own files under *var_dir*.

    The portal learns the browser's scheme from ``X-Forwarded-Proto``: nginx's own (``http``
    unless TLS lines are added to it), or, *behind_tls_proxy*, the one the TLS terminator in
    front of nginx sent (else every request would look like plain HTTP and be redirected)."""
    var = str(Path(var_dir).resolve())
    return TEMPLATE.format(
        proto="$http_x_forwarded_proto" if behind_tls_proxy else "$scheme",
        daemon="daemon off;\n" if foreground else "",
        var=var,
        portal=portal,
        listen=listen,
        secret=proxy_secret(),
    )
