"""Reads of API tokens."""

from __future__ import annotations

from django.contrib.auth.models import AbstractBaseUser
from django.db.models import QuerySet

from portal.tokens.models import ApiToken
from portal.tokens.services import token_digest


def token_for_key(key: str) -> ApiToken | None:
    """The token whose key this is (with its user and profile, read by every permission
    check), or None."""
    return ApiToken.objects.select_related("user__profile").filter(digest=token_digest(key)).first()


def tokens_of(user: AbstractBaseUser) -> QuerySet[ApiToken]:
    """The user's own tokens, newest first."""
    return ApiToken.objects.filter(user=user)
