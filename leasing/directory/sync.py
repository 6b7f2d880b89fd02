"""The periodic directory sync (every CARDPOOL_DIRECTORY_SYNC_SECONDS, 5 minutes by default;
also ``manage.py ldap_sync_users``): everyone the LDAP directory returns, matched to the
portal's accounts, so that group changes become team changes and leavers lose access
within one interval even if they never sign in again."""

from __future__ import annotations

import logging
from datetime import datetime

from django.contrib.auth import get_user_model
from django.db import transaction
from django.utils import timezone

from leasing.directory.services import (
    account_leave,
    account_let_back,
    directory_account_record,
    lock_person,
    teams_apply,
    wanted_teams,
)
from portal.audit import audit
from portal.auth_ldap import local_name_taken
from portal.directory import Person, read_people
from portal.models import DirectoryAccount, Profile

logger = logging.getLogger(__name__)


def _update_fields(user, person: Person) -> None:
    changed = {k: v for k, v in person.fields.items() if getattr(user, k, None) != v}
    if changed:
        get_user_model().objects.filter(pk=user.pk).update(**changed)


def _account_for(person: Person):
    """The portal account *person* has, or may take up, or None (a local account holds the
    name, or the person is in no mapped group and has never signed in)."""
    user = get_user_model().objects.filter(username__iexact=person.username).first()
    if user is not None:
        return None if local_name_taken(person.username) else user
    if person.disabled or not wanted_teams(person.groups or []):
        return None
    user = get_user_model()(username=person.username, **person.fields)
    user.set_unusable_password()
    user.save()
    Profile.objects.get_or_create(user=user)
    audit(actor=None, action="directory_account_create", target=person.username)
    return user


def directory_sync(*, people: list[Person], now: datetime | None = None) -> dict[str, int]:
    """Apply one reading of the directory: accounts it no longer lists, or lists as disabled,
    leave (``account_leave``); the others get their fields, Unix account and teams from it.
    Safe to run twice or concurrently (each person in its own transaction, row-locked)."""
    now = now or timezone.now()
    counts = {"seen": 0, "left": 0, "returned": 0, "added": 0, "changed": 0, "removed": 0}
    by_name = {person.username.casefold(): person for person in people}
    linked = DirectoryAccount.objects.filter(source=DirectoryAccount.Source.LDAP)
    known: set[str] = set()
    for account in linked.select_related("user").order_by("pk"):
        user = account.user
        known.add(user.username.casefold())
        person = by_name.get(user.username.casefold())
        if person is None or person.disabled:
            if account.left_at is None:
                account_leave(user=user, why="disabled" if person else "removed", now=now)
                counts["left"] += 1
            continue
        _apply(user, person, counts, now)
    for name, person in sorted(by_name.items()):
        if name in known:
            continue
        user = _account_for(person)
        if user is not None and not person.disabled:
            _apply(user, person, counts, now)
    return counts


def _apply(user, person: Person, counts: dict[str, int], now: datetime) -> None:
    with transaction.atomic():
        lock_person(user)
        account = directory_account_record(user, person, DirectoryAccount.Source.LDAP, now)
        _update_fields(user, person)
        if account.left_at is not None:
            account_let_back(user, account, now)
            counts["returned"] += 1
        if person.groups is not None:
            for key, value in teams_apply(user=user, groups=person.groups, now=now).items():
                if key in counts:
                    counts[key] += value
    counts["seen"] += 1


def directory_sync_run(*, now: datetime | None = None) -> dict[str, int]:
    """Read the LDAP directory and apply it. A directory that cannot be read, or returns
    nobody, changes nothing (it is logged): never "everyone left"."""
    people = read_people()
    if not people:
        raise ConnectionError("the LDAP directory returned nobody; nothing was changed")
    counts = directory_sync(people=people, now=now)
    logger.info("directory sync: %s", counts)
    return counts
