"""Password sign-in shared by the login page and the token endpoint (allauth's account adapter).

One lockout for both doors: failed attempts are counted by allauth's ``login_failed`` rate
limit in the shared cache (settings.CACHES), under one key per *account* — whether the
person typed the username or an email address — so that switching between them, or between
the web page and ``POST /api/v1/auth/token/``, buys no extra guesses.
"""

from __future__ import annotations

import unicodedata

from allauth.account.adapter import DefaultAccountAdapter
from allauth.account.models import EmailAddress
from django.contrib.auth import get_user_model
from django.contrib.sites.shortcuts import get_current_site
from django.db.models import Q
from django.http import HttpRequest

from portal.usernames import username_check, username_normalise


def login_credentials(login: str, password: str) -> dict:
    """Credentials as allauth's login form builds them (an address is also tried as a username)."""
    credentials = {"username": login, "password": password}
    if "@" in login:
        credentials["email"] = login
    return credentials


def _account_id(login: str) -> int | None:
    """The account a username or email address names, if any."""
    if not login:
        return None
    user_model = get_user_model()
    by_email = EmailAddress.objects.filter(email__iexact=login).values("user_id")
    return (
        user_model.objects.filter(
            Q(username__iexact=login) | Q(email__iexact=login) | Q(pk__in=by_email)
        )
        .order_by("pk")
        .values_list("pk", flat=True)
        .first()
    )


class AccountAdapter(DefaultAccountAdapter):
    def clean_username(self, username: str, shallow: bool = False) -> str:
        """The one username rule (portal/usernames.py), then allauth's checks."""
        name = username_normalise(username) if shallow else username_check(username)
        return super().clean_username(name, shallow=shallow)

    def _get_login_attempts_cache_key(self, request: HttpRequest, **credentials) -> str:
        """One counter per account (username or address alike); per typed name otherwise."""
        site = get_current_site(request)
        login = unicodedata.normalize(
            "NFKC", credentials.get("email", credentials.get("username", "")) or ""
        )
        account = _account_id(login)
        if account is not None:
            return f"{site.domain}:account:{account}"
        return f"{site.domain}:{login.casefold()}"
