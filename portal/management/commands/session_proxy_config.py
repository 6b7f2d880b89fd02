"""Write the session proxy's nginx.conf (docs/operations.md, "Sessions")."""

from __future__ import annotations

from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand

from leasing.workbench.proxy import nginx_config
from portal.secret_key import secret_file_write


class Command(BaseCommand):
    help = "Print (or write) an nginx.conf that puts the session proxy in front of the portal."

    def add_arguments(self, parser):
        parser.add_argument("--listen", default="8080", help="nginx's listen (default 8080)")
        parser.add_argument(
            "--portal", default="127.0.0.1:8000", help="where the portal (gunicorn) listens"
        )
        parser.add_argument("--var-dir", default="var/nginx", help="nginx's pid and temp files")
        parser.add_argument("--output", default="", help="write here instead of printing")
        parser.add_argument("--daemon", action="store_true", help="let nginx daemonize")
        parser.add_argument(
            "--session-domain",
            default=None,
            help="sessions at s<id>.DOMAIN (default CARDPOOL_SESSION_DOMAIN; empty: any host)",
        )

    def handle(self, *args, listen, portal, var_dir, output, daemon, session_domain, **options):
        for sub in ("body", "proxy", "fastcgi", "uwsgi", "scgi"):
            (Path(var_dir) / sub).mkdir(parents=True, exist_ok=True)
        text = nginx_config(
            listen=listen,
            portal=portal,
            var_dir=var_dir,
            foreground=not daemon,
            domain=session_domain,
            # CARDPOOL_BEHIND_TLS_PROXY: a TLS terminator in front of nginx says the scheme.
            behind_tls_proxy=settings.SECURE_PROXY_SSL_HEADER is not None,
        )
        if output:
            secret_file_write(output, text)  # it holds the proxy's secret: 0600
            self.stdout.write(f"wrote {output}; run: nginx -c {Path(output).resolve()}")
        else:
            self.stdout.write(text)
