"""Writes to a user's own account settings (the profile page)."""

from __future__ import annotations

import zoneinfo

from django.contrib.auth.models import AbstractBaseUser
from django.core.exceptions import ValidationError
from django.utils.translation import gettext as _

from portal.models import Profile


def profile_update(*, user: AbstractBaseUser, timezone: str) -> Profile:
    """Save the user's preferred time zone ("" means the site's), used by UserTimezoneMiddleware."""
    if timezone and timezone not in zoneinfo.available_timezones():
        raise ValidationError({"timezone": _("Unknown time zone.")})
    profile, _created = Profile.objects.update_or_create(user=user, defaults={"timezone": timezone})
    return profile
