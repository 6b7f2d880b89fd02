"""Writes to a user's own account settings (the profile page)."""

from __future__ import annotations

import zoneinfo

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.core.exceptions import ValidationError
from django.utils.translation import gettext as _

from portal.models import Profile


def profile_update(
    *, user: AbstractBaseUser, timezone: str, language: str | None = None
) -> Profile:
    """Save the user's preferred time zone ("" means the site's), used by UserTimezoneMiddleware,
    and language (notices sent while they are away are worded in it)."""
    if timezone and timezone not in zoneinfo.available_timezones():
        raise ValidationError({"timezone": _("Unknown time zone.")})
    defaults = {"timezone": timezone}
    if language is not None:
        if language and language not in dict(settings.LANGUAGES):
            raise ValidationError({"language": _("Unknown language.")})
        defaults["language"] = language
    profile, _created = Profile.objects.update_or_create(user=user, defaults=defaults)
    return profile
