"""Usernames are stored in Unicode NFKC form and are unique whatever their case.

Without this, the fullwidth ``ａｌｉｃｅ`` or ``Alice`` could sign up next to ``alice`` and pose
as her in approval lists and reports. Every path that names a user goes through here: the
sign-up form (portal.auth_account), the admin's forms (portal.admin), and, for everything
else (management commands, LDAP and SSO sign-ins, scripts), a pre_save guard on the user
model (portal.apps).
"""

from __future__ import annotations

import unicodedata

from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.utils.translation import gettext as _


def username_normalise(username: str) -> str:
    """The NFKC form (fullwidth and other compatibility letters become plain ones)."""
    return unicodedata.normalize("NFKC", username or "")


def username_check(username: str, *, exclude_pk: int | None = None) -> str:
    """The NFKC form of ``username``; ValidationError when another account has it in any case."""
    name = username_normalise(username)
    clash = get_user_model()._default_manager.filter(username__iexact=name)
    if exclude_pk is not None:
        clash = clash.exclude(pk=exclude_pk)
    if clash.exists():
        raise ValidationError(
            _(
                "This username is taken: names that look alike (full-width letters) or "
                "differ only in case count as the same."
            ),
            code="username_taken",
        )
    return name


def guard_username(sender, instance, raw=False, update_fields=None, **kwargs) -> None:
    """pre_save: store the NFKC form and refuse a look-alike of another account's name."""
    if raw or (update_fields is not None and "username" not in update_fields):
        return
    instance.username = username_check(instance.username, exclude_pk=instance.pk)
