"""What a webhook request looks like, per format, and how to read the reply.

Pure functions (no database, no clock, no network) build the URL, headers and body of
one attempt, so the shapes are tested against the vendors' documented robot APIs:

- ``generic``: our own JSON, signed ``X-Cardpool-Signature: sha256=<hex HMAC of the body>``;
- ``wecom``: WeCom (企业微信) group robot, ``{"msgtype": "markdown", "markdown": {"content"}}``;
- ``dingtalk``: DingTalk (钉钉) custom robot, ``{"msgtype": "markdown", "markdown":
  {"title", "text"}}``, signed with ``timestamp`` (ms) and ``sign`` query parameters;
- ``feishu``: Feishu (飞书) custom bot, ``{"msg_type": "interactive", "card": {...}}``,
  signed with ``timestamp`` (s) and ``sign`` in the body.

Robots answer HTTP 200 even when they refuse a message; :func:`judge` reads their
``errcode`` / ``code`` so such a reply counts as a failure. :func:`http_post` is the one
place that talks to the network (``urllib``, short timeout, no redirects).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import http.client
import ipaddress
import json
import socket
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from datetime import UTC, datetime
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from django.conf import settings

from portal.input import json_loads

GENERIC, WECOM, DINGTALK, FEISHU = "generic", "wecom", "dingtalk", "feishu"
ROBOTS = (WECOM, DINGTALK, FEISHU)

TIMEOUT_SECONDS = 5.0
MAX_RESPONSE_BYTES = 64 * 1024
USER_AGENT = "Cardpool-Webhook/1"
# Every robot message carries the word, so a robot guarded by a keyword (DingTalk's and
# Feishu's "custom keyword" security setting) can be set to "Cardpool".
BRAND = "Cardpool"

# WeCom: "markdown.content" is at most 4096 bytes (UTF-8).
WECOM_MAX_BYTES = 4096
# DingTalk and Feishu limit the whole request (Feishu: 20 KB); our messages stay well below.
BODY_MAX_CHARS = 3000

# Robot error codes that mean "too many messages, try later" rather than "never".
RATE_LIMIT_CODES = {
    WECOM: {45009},  # api freq out of limit (20 messages a minute per robot)
    DINGTALK: {130101},  # send too fast
    FEISHU: {11232},  # frequency limited
}


@dataclass(frozen=True)
class Message:
    """One notification, as every format sees it."""

    event: str
    title: str
    body: str = ""
    url: str = ""  # absolute
    lease: int | None = None
    id: int | None = None  # the notification's id: the same in every retry
    data: dict = field(default_factory=dict)
    open_label: str = "Open in Cardpool"
    severity: str = "info"  # info | success | warning | danger (colours of robot cards)


@dataclass(frozen=True)
class HttpRequest:
    url: str
    body: bytes
    headers: dict[str, str]


@dataclass(frozen=True)
class HttpResponse:
    """What came back: ``status`` is None when nothing did (timeout, refused, DNS)."""

    status: int | None
    body: str = ""
    error: str = ""
    retry_after: int | None = None
    blocked: bool = False  # the address is not allowed: trying again will not help


@dataclass(frozen=True)
class Verdict:
    ok: bool
    retry: bool = False
    error: str = ""


def _json(payload: dict) -> bytes:
    return json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def _headers(extra: dict[str, str] | None = None) -> dict[str, str]:
    return {"Content-Type": "application/json; charset=utf-8", "User-Agent": USER_AGENT} | (
        extra or {}
    )


def _clip(text: str, limit: int = BODY_MAX_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _clip_bytes(text: str, limit: int) -> str:
    raw = text.encode("utf-8")
    if len(raw) <= limit:
        return text
    return raw[: limit - len("…".encode())].decode("utf-8", "ignore") + "…"


def _with_query(url: str, **params: str) -> str:
    parts = urlsplit(url)
    query = parse_qsl(parts.query, keep_blank_values=True)
    query = [(k, v) for k, v in query if k not in params] + list(params.items())
    return urlunsplit(parts._replace(query=urlencode(query)))


def _robot_title(message: Message) -> str:
    return f"[{BRAND}] {message.title}"


# --- signatures --------------------------------------------------------------------------


def generic_signature(secret: str, body: bytes) -> str:
    """``sha256=`` + hex HMAC-SHA256 of the raw body, keyed with the hook's secret."""
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def dingtalk_sign(secret: str, timestamp_ms: int) -> str:
    """Base64 HMAC-SHA256 of ``"{timestamp}\\n{secret}"`` keyed with the secret (not URL-encoded)."""
    to_sign = f"{timestamp_ms}\n{secret}".encode()
    return base64.b64encode(hmac.new(secret.encode(), to_sign, hashlib.sha256).digest()).decode()


def feishu_sign(secret: str, timestamp_s: int) -> str:
    """Base64 HMAC-SHA256 keyed with ``"{timestamp}\\n{secret}"`` over an empty message."""
    key = f"{timestamp_s}\n{secret}".encode()
    return base64.b64encode(hmac.new(key, b"", hashlib.sha256).digest()).decode()


# --- formats -----------------------------------------------------------------------------


def generic(*, url: str, secret: str, message: Message, now: datetime) -> HttpRequest:
    payload = {
        "id": message.id,
        "event": message.event,
        "title": message.title,
        "body": message.body,
        "url": message.url,
        "lease": message.lease,
        "data": message.data,
        "sent_at": now.astimezone(UTC).isoformat().replace("+00:00", "Z"),
    }
    body = _json(payload)
    extra = {"X-Cardpool-Event": message.event}
    if secret:
        extra["X-Cardpool-Signature"] = generic_signature(secret, body)
    return HttpRequest(url=url, body=body, headers=_headers(extra))


def wecom_markdown(message: Message) -> str:
    colour = {"danger": "warning", "warning": "warning", "success": "info"}.get(
        message.severity, "comment"
    )
    lines = [f'**<font color="{colour}">{_robot_title(message)}</font>**']
    if message.body:
        lines.append(_clip(message.body))
    if message.url:
        lines.append(f"[{message.open_label}]({message.url})")
    return _clip_bytes("\n".join(lines), WECOM_MAX_BYTES)


def wecom(*, url: str, secret: str, message: Message, now: datetime) -> HttpRequest:
    """The robot's URL carries its key; WeCom group robots have no signing secret."""
    payload = {"msgtype": "markdown", "markdown": {"content": wecom_markdown(message)}}
    return HttpRequest(url=url, body=_json(payload), headers=_headers())


def dingtalk_markdown(message: Message) -> str:
    # DingTalk's markdown needs a blank line to break a line.
    parts = [f"#### {_robot_title(message)}"]
    if message.body:
        parts.append(_clip(message.body).replace("\n", "\n\n"))
    if message.url:
        parts.append(f"[{message.open_label}]({message.url})")
    return "\n\n".join(parts)


def dingtalk(*, url: str, secret: str, message: Message, now: datetime) -> HttpRequest:
    payload = {
        "msgtype": "markdown",
        "markdown": {"title": _robot_title(message), "text": dingtalk_markdown(message)},
    }
    if secret:
        timestamp = int(now.timestamp() * 1000)
        # urlencode() does the URL-encoding of the base64 signature (+ / =).
        url = _with_query(url, timestamp=str(timestamp), sign=dingtalk_sign(secret, timestamp))
    return HttpRequest(url=url, body=_json(payload), headers=_headers())


FEISHU_TEMPLATES = {"danger": "red", "warning": "orange", "success": "green", "info": "blue"}


def feishu_card(message: Message) -> dict:
    elements: list[dict] = []
    if message.body:
        elements.append({"tag": "div", "text": {"tag": "lark_md", "content": _clip(message.body)}})
    if message.url:
        elements.append(
            {
                "tag": "action",
                "actions": [
                    {
                        "tag": "button",
                        "text": {"tag": "plain_text", "content": message.open_label},
                        "type": "primary",
                        "url": message.url,
                    }
                ],
            }
        )
    return {
        "config": {"wide_screen_mode": True},
        "header": {
            "title": {"tag": "plain_text", "content": _robot_title(message)},
            "template": FEISHU_TEMPLATES.get(message.severity, "blue"),
        },
        "elements": elements,
    }


def feishu(*, url: str, secret: str, message: Message, now: datetime) -> HttpRequest:
    payload: dict = {"msg_type": "interactive", "card": feishu_card(message)}
    if secret:
        timestamp = int(now.timestamp())
        payload = {"timestamp": str(timestamp), "sign": feishu_sign(secret, timestamp), **payload}
    return HttpRequest(url=url, body=_json(payload), headers=_headers())


BUILDERS = {GENERIC: generic, WECOM: wecom, DINGTALK: dingtalk, FEISHU: feishu}


def build(fmt: str, *, url: str, secret: str, message: Message, now: datetime) -> HttpRequest:
    """The request for one attempt (signatures carry *now*, so build it per attempt)."""
    try:
        builder = BUILDERS[fmt]
    except KeyError:
        raise ValueError(f"unknown webhook format {fmt!r}") from None
    return builder(url=url, secret=secret, message=message, now=now)


# --- replies -----------------------------------------------------------------------------


def judge(fmt: str, response: HttpResponse) -> Verdict:
    """Sent, failed for good, or worth another try (network errors, 5xx, 429, rate limits)."""
    status = response.status
    if response.blocked:
        return Verdict(ok=False, error=response.error)
    if status is None:
        return Verdict(ok=False, retry=True, error=response.error or "no response")
    if status == 429 or status == 408 or status >= 500:
        return Verdict(ok=False, retry=True, error=f"HTTP {status}")
    if not 200 <= status < 300:
        return Verdict(ok=False, error=f"HTTP {status}")
    if fmt not in ROBOTS:
        return Verdict(ok=True)
    try:
        reply = json_loads(response.body or "")
    except ValueError:
        return Verdict(ok=False, error="the robot's reply is not JSON")
    if not isinstance(reply, dict):
        return Verdict(ok=False, error="the robot's reply is not a JSON object")
    if fmt == FEISHU:
        # "code" is the current field; older replies carry only "StatusCode".
        code, text = reply.get("code", reply.get("StatusCode")), reply.get("msg", "")
    else:
        code, text = reply.get("errcode"), reply.get("errmsg", "")
    if code is None:
        return Verdict(ok=False, error="the robot's reply has no error code")
    if code == 0:
        return Verdict(ok=True)
    retry = code in RATE_LIMIT_CODES.get(fmt, ())
    return Verdict(ok=False, retry=retry, error=f"robot error {code}: {text}".strip())


# --- the network -------------------------------------------------------------------------


class BlockedDestination(OSError):
    """The webhook's host is (or resolves to) an address inside the network."""


# IANA's special-purpose address registries (iana-ipv4-special-registry, iana-ipv6-special-
# registry), every block, "globally reachable" or not: none is where a chat robot lives.
# Python's is_global misses some (192.0.0.8/32 and others in 192.0.0.0/24 are global to it).
SPECIAL_PURPOSE = tuple(
    ipaddress.ip_network(block)
    for block in (
        "0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16",
        "172.16.0.0/12", "192.0.0.0/24", "192.0.2.0/24", "192.31.196.0/24", "192.52.193.0/24",
        "192.88.99.0/24", "192.168.0.0/16", "192.175.48.0/24", "198.18.0.0/15",
        "198.51.100.0/24", "203.0.113.0/24", "240.0.0.0/4", "255.255.255.255/32",
        "224.0.0.0/4",  # multicast (its own registry)
        "::/128", "::1/128", "::ffff:0:0/96", "64:ff9b:1::/48", "100::/64",
        "100:0:0:1::/64", "2001::/23", "2001:db8::/32", "2002::/16", "2620:4f:8000::/48",
        "3fff::/20", "5f00::/16", "fc00::/7", "fe80::/10",
        "ff00::/8",  # multicast
        "::/96",  # IPv4-compatible (deprecated, RFC 4291)
    )
)  # fmt: skip
# NAT64's well-known prefix (RFC 6052) is how IPv6-only networks reach public IPv4 hosts:
# an address in it is judged by the IPv4 address it carries, not refused outright.
_NAT64 = ipaddress.ip_network("64:ff9b::/96")


def _embedded_ipv4(address: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address a mapped or NAT64 IPv6 address stands for."""
    if address.ipv4_mapped:
        return address.ipv4_mapped
    if address in _NAT64:
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return None


def is_private_address(ip: str) -> bool:
    """In any IANA special-purpose block (loopback, private, link-local, shared, benchmarking,
    documentation, reserved, 6to4, Teredo, ORCHID…), multicast, or not global to Python —
    also when written as an IPv6 address that carries such an IPv4 address."""
    address = ipaddress.ip_address(ip.split("%", 1)[0])  # drop an IPv6 zone (fe80::1%eth0)
    if isinstance(address, ipaddress.IPv6Address):
        embedded = _embedded_ipv4(address)
        if embedded is not None:
            address = embedded
    if any(address in block for block in SPECIAL_PURPOSE if block.version == address.version):
        return True
    return not address.is_global or address.is_multicast


def public_addresses(host: str, port: int | None) -> list:
    """``getaddrinfo`` for *host*; BlockedDestination if any address is not public.

    Every address is checked, not just the first, so a name that resolves to a public and a
    private address cannot slip through. CARDPOOL_WEBHOOK_ALLOW_PRIVATE=true lifts the rule
    (self-hosted receivers inside the network).
    """
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    if not settings.CARDPOOL_WEBHOOK_ALLOW_PRIVATE:
        private = sorted({info[4][0] for info in infos if is_private_address(info[4][0])})
        if private:
            raise BlockedDestination(
                f"{host} is a private, loopback or link-local address ({', '.join(private)}); "
                "an operator may allow these with CARDPOOL_WEBHOOK_ALLOW_PRIVATE=true"
            )
    return infos


def check_destination(url: str) -> None:
    """BlockedDestination if *url*'s host is inside the network now (checked again at send)."""
    parts = urlsplit(url.strip())
    try:
        public_addresses(parts.hostname or "", parts.port)
    except BlockedDestination:
        raise
    except (OSError, ValueError):
        pass  # does not resolve (yet): each send resolves and checks again


def _connect_public(address, timeout=socket._GLOBAL_DEFAULT_TIMEOUT, source_address=None):
    """socket.create_connection to an address that was checked, so a name that resolves to a
    public address at the check and a private one at the connect (DNS rebinding) cannot."""
    host, port = address
    error: OSError = OSError(f"cannot resolve {host}")
    for family, kind, proto, _name, sockaddr in public_addresses(host, port):
        sock = socket.socket(family, kind, proto)
        try:
            if timeout is not socket._GLOBAL_DEFAULT_TIMEOUT:
                sock.settimeout(timeout)
            if source_address:
                sock.bind(source_address)
            sock.connect(sockaddr)
            return sock
        except OSError as exc:
            error = exc
            sock.close()
    raise error


class _PublicHTTPConnection(http.client.HTTPConnection):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._create_connection = _connect_public


class _PublicHTTPSConnection(http.client.HTTPSConnection):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._create_connection = _connect_public


def _through_proxy(req: urllib.request.Request) -> bool:
    """An operator's egress proxy connects for us: check the destination's name, not the proxy."""
    if not (req.has_proxy() or getattr(req, "_tunnel_host", None)):
        return False
    target = urlsplit(req.full_url)
    public_addresses(target.hostname or "", target.port)
    return True


class _PublicHTTPHandler(urllib.request.HTTPHandler):
    def http_open(self, req):
        proxied = _through_proxy(req)
        return self.do_open(http.client.HTTPConnection if proxied else _PublicHTTPConnection, req)


class _PublicHTTPSHandler(urllib.request.HTTPSHandler):
    def https_open(self, req):
        proxied = _through_proxy(req)
        conn = http.client.HTTPSConnection if proxied else _PublicHTTPSConnection
        return self.do_open(conn, req, context=self._context)


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """A hook that redirects is reported as it is; a POST is never replayed elsewhere."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        return None


OPENER = urllib.request.build_opener(_NoRedirect, _PublicHTTPHandler, _PublicHTTPSHandler)


def _retry_after(headers) -> int | None:
    value = str(headers.get("Retry-After", "")).strip() if headers is not None else ""
    # ASCII digits only: "²".isdigit() is true and int() refuses it; a huge value is capped
    # by the sender (RETRY_CAP_SECONDS), so only its length is bounded here.
    return int(value) if value.isascii() and value.isdigit() and len(value) < 10 else None


def http_post(request: HttpRequest, *, timeout: float = TIMEOUT_SECONDS) -> HttpResponse:
    """POST once; every outcome comes back as an :class:`HttpResponse`, never an exception."""
    req = urllib.request.Request(
        request.url, data=request.body, headers=request.headers, method="POST"
    )
    try:
        with OPENER.open(req, timeout=timeout) as resp:
            body = resp.read(MAX_RESPONSE_BYTES).decode("utf-8", "replace")
            return HttpResponse(status=resp.status, body=body)
    except urllib.error.HTTPError as exc:
        try:
            body = exc.read(MAX_RESPONSE_BYTES).decode("utf-8", "replace")
        except Exception:  # noqa: BLE001 - a broken error body must not hide the status
            body = ""
        return HttpResponse(
            status=exc.code,
            body=body,
            error=f"HTTP {exc.code} {exc.reason}",
            retry_after=_retry_after(exc.headers),
        )
    except BlockedDestination as exc:  # from a proxied request's check
        return HttpResponse(status=None, error=str(exc), blocked=True)
    except urllib.error.URLError as exc:
        if isinstance(exc.reason, BlockedDestination):
            return HttpResponse(status=None, error=str(exc.reason), blocked=True)
        return HttpResponse(status=None, error=f"cannot connect: {exc.reason}")
    except TimeoutError:
        return HttpResponse(status=None, error=f"no answer within {timeout:g} s")
    except (OSError, ValueError) as exc:
        return HttpResponse(status=None, error=f"{type(exc).__name__}: {exc}")
