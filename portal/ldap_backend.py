"""The LDAP sign-in backend (apart from portal/auth_ldap.py, which settings import before
the apps are ready)."""

from __future__ import annotations

import logging

from django.core.exceptions import ValidationError
from django_python3_ldap.auth import LDAPBackend as _LibraryBackend
from ldap3.core.exceptions import LDAPException

from portal.auth_ldap import local_name_taken

logger = logging.getLogger(__name__)


class LDAPBackend(_LibraryBackend):
    """django-python3-ldap's backend, refusing a directory name that a local account holds
    (the local account keeps its own password; the directory person must be renamed or the
    accounts joined by an operator), and answering "no" rather than failing when the
    directory cannot be reached or its certificate not verified."""

    def authenticate(self, request=None, *args, **kwargs):
        username = kwargs.get("username")
        if username and local_name_taken(username):
            logger.warning("LDAP sign-in as %r refused: a local account has that name", username)
            return None
        try:
            user = super().authenticate(*args, **kwargs)
        except LDAPException:
            # The library's clean-up after a failed StartTLS (unbind on a dead socket)
            # raises; the sign-in fails like any other directory that cannot be reached.
            logger.warning("LDAP sign-in as %r failed", username, exc_info=True)
            return None
        except ValidationError as exc:
            # A directory name the username rule refuses (portal/usernames.py): no account
            # is made; an operator renames the person in the directory.
            logger.warning("LDAP sign-in as %r refused: %s", username, "; ".join(exc.messages))
            return None
        if user is None and username:
            leaver_check(username)
        return user


def leaver_check(username: str) -> None:
    """A refused directory sign-in of someone the portal knows from the directory: when the
    directory no longer lists them, or lists them as disabled, they leave now rather than at
    the next sync. A wrong password of someone still there, or a directory that cannot be
    read, changes nothing."""
    from leasing.directory.services import account_leave
    from portal.directory import read_person
    from portal.models import DirectoryAccount

    account = (
        DirectoryAccount.objects.filter(
            user__username__iexact=username,
            source=DirectoryAccount.Source.LDAP,
            left_at__isnull=True,
        )
        .select_related("user")
        .first()
    )
    if account is None:
        return
    try:
        person = read_person(account.user.get_username())
    except ConnectionError:
        logger.warning("LDAP: could not check whether %r left", username, exc_info=True)
        return
    if person is None or person.disabled:
        account_leave(user=account.user, why="disabled" if person else "removed")
