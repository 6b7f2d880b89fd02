"""DRF authentication by personal API token: `Authorization: Token <key>`."""

from __future__ import annotations

from django.utils.translation import gettext_lazy as _
from rest_framework import exceptions
from rest_framework.authentication import TokenAuthentication

from portal.tokens.selectors import token_for_key
from portal.tokens.services import token_touch


class ApiTokenAuthentication(TokenAuthentication):
    """DRF's header format and parsing, with keys looked up by their digest."""

    keyword = "Token"

    def authenticate_credentials(self, key):
        token = token_for_key(key)
        if token is None:
            raise exceptions.AuthenticationFailed(_("Invalid or revoked token."))
        if token.is_expired():
            raise exceptions.AuthenticationFailed(_("This token has expired."))
        if not token.user.is_active:
            raise exceptions.AuthenticationFailed(_("User inactive or deleted."))
        token_touch(token=token)
        return token.user, token
