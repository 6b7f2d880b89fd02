"""Where a node's agent says a session listens: checked before the proxy is told to go there.

The proxy passes the holder's requests to ``<address>:<port>`` as the portal names them, so
an address is taken from an agent only when it is ``host`` or ``host:port`` (the session's
own port), and the host is the node's hostname, an address that hostname resolves to, or
an address an operator recorded on the node (``Node.session_addresses``). Anything else —
another machine, a path, a fragment — is refused with the reason.
"""

from __future__ import annotations

import ipaddress
import re
import socket

from django.core.exceptions import ValidationError
from django.utils.translation import gettext as _

_HOST_PORT = re.compile(
    r"^(?:\[(?P<v6>[0-9A-Fa-f:.]+)\]|(?P<host>[A-Za-z0-9.-]+))(?::(?P<port>[0-9]{1,5}))?$"
)


def _resolved(hostname: str) -> set[str]:
    try:
        return {info[4][0] for info in socket.getaddrinfo(hostname, None)}
    except (OSError, UnicodeError):
        return set()


def session_address_check(*, node, address: str, port: int) -> str:
    """The host to reach a session on *node* at (IPv6 in brackets), from the agent's
    *address*; ValidationError saying why when it is not one of the node's."""
    text = (address or "").strip()
    bare_v6 = text.count(":") > 1 and not text.startswith("[")
    match = None if bare_v6 else _HOST_PORT.match(text)
    if bare_v6:
        v6, host, given_port = text, None, None
    elif match:
        v6, host, given_port = match.group("v6"), match.group("host"), match.group("port")
    else:
        raise ValidationError(_("“%(address)s” is not host or host:port.") % {"address": text[:64]})
    if given_port is not None and int(given_port) != port:
        raise ValidationError(
            _("The session listens on port %(port)s, not %(given)s.")
            % {"port": port, "given": given_port}
        )
    name = v6 or host or ""
    try:
        ip = ipaddress.ip_address(name)
    except ValueError:
        ip = None
    if v6 and (ip is None or ip.version != 6):
        ip = None
        name = ""
    if ip is None:
        if name and name.lower().rstrip(".") == node.hostname.lower():
            return node.hostname
    else:
        recorded = {str(ipaddress.ip_address(a)) for a in node.session_addresses or []}
        if str(ip) in recorded or str(ip) in _resolved(node.hostname):
            return f"[{ip}]" if ip.version == 6 else str(ip)
    raise ValidationError(
        _(
            "“%(address)s” is not node %(node)s: give its hostname, an address it resolves "
            "to, or record the address on the node (session addresses)."
        )
        % {"address": text[:64], "node": node.hostname}
    )
