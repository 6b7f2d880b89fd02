"""Every write to API tokens: make one (the key is returned once), revoke, note use."""

from __future__ import annotations

import hashlib
import secrets
from datetime import datetime, timedelta

from django.contrib.auth.models import AbstractBaseUser
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from portal.tokens.models import ApiToken

KEY_PREFIX = "cp_"
# How many characters of the key are kept in clear, to tell tokens apart ("cp_" + 8).
SHOWN_CHARS = len(KEY_PREFIX) + 8
# Writing last_used_at on every request would turn each API read into a write.
TOUCH_EVERY = timedelta(minutes=1)


def token_digest(key: str) -> str:
    """SHA-256 of the key. Keys carry 256 random bits, so a slow password hash adds nothing."""
    return hashlib.sha256(key.encode()).hexdigest()


@transaction.atomic
def token_create(
    *, user: AbstractBaseUser, name: str, expires_at: datetime | None = None
) -> tuple[ApiToken, str]:
    """Make a token for `user`; return it with its key, which is never available again.

    The user's expired tokens are removed on the way, so tokens that scripts obtain again
    and again do not pile up.
    """
    name = name.strip()
    if not name:
        raise ValidationError({"name": _("Give the token a name.")})
    now = timezone.now()
    if expires_at is not None and expires_at <= now:
        raise ValidationError({"expires_at": _("The expiry must be in the future.")})
    ApiToken.objects.filter(user=user, expires_at__lte=now).delete()
    key = KEY_PREFIX + secrets.token_urlsafe(32)
    token = ApiToken.objects.create(
        user=user,
        name=name[:100],
        prefix=key[:SHOWN_CHARS],
        digest=token_digest(key),
        created_at=now,
        expires_at=expires_at,
    )
    return token, key


def token_revoke(*, user: AbstractBaseUser, token_id: int) -> bool:
    """Delete one of the user's own tokens; False when there is no such token of theirs."""
    deleted, _rows = ApiToken.objects.filter(user=user, pk=token_id).delete()
    return deleted > 0


def token_touch(*, token: ApiToken) -> None:
    """Record that the token was just used (at most once a minute per token)."""
    now = timezone.now()
    if token.last_used_at is None or now - token.last_used_at >= TOUCH_EVERY:
        ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
        token.last_used_at = now


def token_revoke_all(*, user: AbstractBaseUser) -> int:
    """Delete every token of the user (their password changed); how many there were."""
    deleted, _rows = ApiToken.objects.filter(user=user).delete()
    return deleted
