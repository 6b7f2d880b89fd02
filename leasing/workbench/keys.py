"""SSH public keys: kept per user, allowed on the nodes of their active leases.

With the local backend the node's agent writes each key into the holder's
``~/.ssh/authorized_keys`` as a marked line (``cardpool-lease-<id>``, with OpenSSH's
``expiry-time`` at the lease's end as a backstop) and removes it when the lease is over
(``authorized_keys_for``). On Slurm, sites use ``pam_slurm_adopt``: ssh into a node is
allowed while the user has a job there, so the lease's own job lets the holder in.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import struct
from datetime import UTC, datetime

from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from leasing.models import SshKey
from portal.audit import audit

KEY_TYPES = {
    "ssh-ed25519",
    "ssh-rsa",
    "ecdsa-sha2-nistp256",
    "ecdsa-sha2-nistp384",
    "ecdsa-sha2-nistp521",
    "sk-ssh-ed25519@openssh.com",
    "sk-ecdsa-sha2-nistp256@openssh.com",
}
MAX_KEYS = 20
MARK = "cardpool-lease-"


def key_parse(text: str) -> tuple[str, str, str]:
    """(type, base64 blob, comment) of one OpenSSH public key line, checked: a known type, a
    blob that decodes and names the same type. Options before the type are refused (the
    portal writes its own)."""
    parts = (text or "").strip().split()
    if len(parts) < 2 or "\n" in (text or "").strip():
        raise ValidationError(_("Paste one public key line, e.g. ssh-ed25519 AAAA… you@host."))
    kind, blob, comment = parts[0], parts[1], " ".join(parts[2:])
    if kind not in KEY_TYPES:
        raise ValidationError(_("Unknown key type %(kind)s.") % {"kind": kind[:40]})
    try:
        raw = base64.b64decode(blob, validate=True)
        (length,) = struct.unpack(">I", raw[:4])
        inner = raw[4 : 4 + length].decode("ascii")
    except (binascii.Error, struct.error, UnicodeDecodeError, ValueError):
        raise ValidationError(_("The key's data is not valid base64 of an SSH key.")) from None
    if inner != kind:
        raise ValidationError(
            _("The key's data says %(inner)s, not %(kind)s.")
            % {
                "inner": inner[:40],
                "kind": kind,
            }
        )
    if kind == "ssh-rsa" and len(raw) < 200:  # under ~1024 bits
        raise ValidationError(_("RSA keys must be at least 2048 bits."))
    return kind, blob, comment[:100]


def fingerprint(blob: str) -> str:
    """OpenSSH's SHA256 fingerprint of a key blob."""
    digest = hashlib.sha256(base64.b64decode(blob)).digest()
    return "SHA256:" + base64.b64encode(digest).decode().rstrip("=")


def ssh_key_add(*, user, public_key: str, name: str = "", now: datetime | None = None) -> SshKey:
    """Keep a public key of *user* (refused with the reason when it is not one)."""
    kind, blob, comment = key_parse(public_key)
    if SshKey.objects.filter(user=user).count() >= MAX_KEYS:
        raise ValidationError(_("At most %(n)d keys per user.") % {"n": MAX_KEYS})
    try:
        with transaction.atomic():
            key = SshKey.objects.create(
                user=user,
                name=(name or comment or kind)[:80],
                public_key=f"{kind} {blob}",
                fingerprint=fingerprint(blob),
                created_at=now or timezone.now(),
            )
            audit(actor=user, action="ssh_key_added", target=user, fingerprint=key.fingerprint)
    except IntegrityError:
        raise ValidationError(_("You have added this key already.")) from None
    return key


def ssh_key_remove(*, user, key: SshKey) -> None:
    """Forget one of *user*'s keys; the agents take it off the nodes on their next round."""
    if key.user_id != user.pk:
        raise ValidationError(_("Not your key."))
    with transaction.atomic():
        audit(actor=user, action="ssh_key_removed", target=user, fingerprint=key.fingerprint)
        key.delete()


def authorized_line(key: str, *, lease_id: int, until: datetime) -> str:
    """One marked authorized_keys line, expiring at *until* even if no agent removes it."""
    stamp = until.astimezone(UTC).strftime("%Y%m%d%H%MZ")
    return f'expiry-time="{stamp}" {key} {MARK}{lease_id}'
