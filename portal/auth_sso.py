"""Single sign-on through OpenID Connect (allauth's `openid_connect` provider).

portal/settings.py builds the provider from CARDPOOL_OIDC_* variables; this adapter lets a
site close password sign-up while people from its identity provider still get an account
on their first sign-in (CARDPOOL_OIDC_ALLOW_SIGNUP).
"""

from __future__ import annotations

from allauth.socialaccount.adapter import DefaultSocialAccountAdapter
from django.conf import settings


class SocialAccountAdapter(DefaultSocialAccountAdapter):
    def is_open_for_signup(self, request, sociallogin) -> bool:
        return settings.CARDPOOL_OIDC_ALLOW_SIGNUP
