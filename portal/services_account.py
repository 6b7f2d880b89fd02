"""Writes to accounts: a user's own settings (the profile page) and invitations by leads."""

from __future__ import annotations

import zoneinfo

from allauth.account.forms import ResetPasswordForm
from allauth.account.models import EmailAddress
from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.utils.translation import gettext as _

from inventory.models import StackFamily
from portal.models import Membership, Profile, Team
from portal.permissions import is_operator, leads_team
from portal.usernames import username_check


def profile_update(
    *,
    user: AbstractBaseUser,
    timezone: str,
    language: str | None = None,
    stack: str | None = None,
) -> Profile:
    """Save the user's preferred time zone ("" means the site's), used by UserTimezoneMiddleware,
    and language (notices sent while they are away are worded in it), and the software stack
    requests assume until told otherwise."""
    if timezone and timezone not in zoneinfo.available_timezones():
        raise ValidationError({"timezone": _("Unknown time zone.")})
    defaults = {"timezone": timezone}
    if language is not None:
        if language and language not in dict(settings.LANGUAGES):
            raise ValidationError({"language": _("Unknown language.")})
        defaults["language"] = language
    if stack is not None:
        if stack and stack not in StackFamily.values:
            raise ValidationError({"stack": _("Unknown software stack.")})
        defaults["stack"] = stack
    profile, _created = Profile.objects.update_or_create(user=user, defaults=defaults)
    return profile


@transaction.atomic
def account_invite(*, by: AbstractBaseUser, team: Team, username: str, email: str):
    """A lead of ``team`` (or an operator) makes an account for a new member of that team.

    The account has no password until its owner sets one through the link that
    ``invitation_send`` mails; with sign-up closed (the default) this is how people without
    SSO or LDAP get in. The address counts as verified once the link is followed.
    """
    if not (is_operator(by) or leads_team(by, team.pk)):
        raise PermissionDenied(_("Only a lead of this team or an operator may invite people."))
    errors = {}
    try:
        username = username_check(username)
    except ValidationError as exc:
        errors["username"] = exc.messages
    email = email.strip()
    if EmailAddress.objects.filter(email__iexact=email).exists() or (
        get_user_model().objects.filter(email__iexact=email).exists()
    ):
        errors["email"] = [_("An account with this address exists; add it to the team instead.")]
    if errors:
        raise ValidationError(errors)
    user = get_user_model()(username=username, email=email)
    user.set_unusable_password()
    user.save()
    EmailAddress.objects.create(user=user, email=email, primary=True, verified=False)
    Membership.objects.create(user=user, team=team, role=Membership.Role.MEMBER)
    return user


def invitation_send(*, request, user) -> None:
    """Mail the invited person allauth's set-password link (the password-reset one)."""
    form = ResetPasswordForm(data={"email": user.email})
    if form.is_valid():
        form.save(request)


def address_verify_on_reset(sender, request, user, **kwargs) -> None:
    """allauth's password_reset signal: the link went to the account's only address, so
    following it proves that address (how an invited person's address gets verified)."""
    addresses = EmailAddress.objects.filter(user=user)
    if addresses.count() == 1:
        addresses.update(verified=True)


def session_language_keep(sender, request, user, **kwargs) -> None:
    """At each sign-in, keep the language the person reads the portal in
    (``Profile.session_language``): notices to someone who chose no language are worded in it
    (``leasing.notify.messages.person_language``). Written only when it changed."""
    # Set by LocaleMiddleware on a real sign-in (the page's language); absent otherwise.
    language = getattr(request, "LANGUAGE_CODE", "")
    profile = Profile.objects.filter(user=user).only("pk", "session_language").first()
    if profile is not None and language and profile.session_language != language:
        Profile.objects.filter(pk=profile.pk).update(session_language=language)
