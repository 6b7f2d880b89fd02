"""One username rule for every path that creates or renames a user.

Stored in Unicode NFKC form, unique whatever their case, made of letters, digits and
``. @ + - _`` only (the admin's own rule: no spaces, no invisible, control or format
characters such as a zero-width space, no markup characters), and not a look-alike of
another account's name: a name that mixes scripts with confusable letters (Cyrillic ``а``
among Latin letters) is refused, and so is one whose skeleton — each letter replaced by the
Latin letter it looks like (Unicode's confusables data, via ``confusable_homoglyphs``) —
matches an existing name's. ``张伟``, ``李娜``, ``o.brien`` and ``anna-maria`` pass.

Every path goes through here: the sign-up form (portal.auth_account), invitations
(portal.services_account), the admin's forms (portal.admin), and, for everything else
(management commands, LDAP and SSO sign-ins, scripts), a pre_save guard on the user model
(portal.apps). Names stored before the rule are kept (the guard checks a name only when it
is new or changed); ``manage.py usernames_check`` lists those that break it.
"""

from __future__ import annotations

import re
import unicodedata
from functools import lru_cache

from confusable_homoglyphs import confusables
from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.utils.translation import gettext as _

# Django's UnicodeUsernameValidator, which the admin's forms apply: word characters and . @ + -
ALLOWED = re.compile(r"^[\w.@+-]+\Z")
MAX_LENGTH = 150


def username_normalise(username: str) -> str:
    """The NFKC form (fullwidth and other compatibility letters become plain ones)."""
    return unicodedata.normalize("NFKC", username or "")


def _describe(char: str) -> str:
    name = unicodedata.name(char, "")
    return f"U+{ord(char):04X} {name}".strip()


# ASCII letters and digits easily taken for each other count as one (as in Unicode's TR39
# skeletons, where l, I, 1 and the Cyrillic palochka are all "l").
_ASCII_FOLD = str.maketrans({"i": "l", "1": "l", "|": "l", "0": "o"})


@lru_cache(maxsize=4096)
def _latin_like(char: str) -> str:
    """The ASCII letter or digit *char* looks like (itself when ASCII or like none),
    case folded, with look-alike ASCII folded together."""
    if char.isascii():
        return char.casefold().translate(_ASCII_FOLD)
    found = confusables.is_confusable(char, greedy=True, preferred_aliases=[]) or []
    for entry in found:
        for glyph in entry.get("homoglyphs", []):
            c = glyph.get("c", "")
            if len(c) == 1 and c.isascii() and c.isalnum():
                return c.casefold().translate(_ASCII_FOLD)
    return char.casefold()


def username_skeleton(username: str) -> str:
    """The name as it looks: NFKC, each letter as the Latin one it resembles, case folded."""
    return "".join(_latin_like(c) for c in username_normalise(username))


def username_problems(name: str) -> list[str]:
    """What is wrong with (NFKC) *name* by itself, as messages; [] when nothing is."""
    problems = []
    if not name:
        return [_("Give a username.")]
    if len(name) > MAX_LENGTH:
        problems.append(_("A username has at most %(n)s characters.") % {"n": MAX_LENGTH})
    if not ALLOWED.match(name):
        bad = []
        for char in name:
            if not ALLOWED.match(char) and _describe(char) not in bad:
                bad.append(_describe(char))
        problems.append(
            _(
                "A username may hold letters, digits and . @ + - _ only (no spaces, invisible "
                "or markup characters); it has %(chars)s."
            )
            % {"chars": ", ".join(bad[:5])}
        )
    elif confusables.is_dangerous(name):
        problems.append(
            _(
                "This username mixes scripts with letters that look alike (for example a "
                "Cyrillic “а” among Latin letters); write it in one script."
            )
        )
    return problems


def _look_alike_of(
    name: str, *, exclude_pk: int | None, before_pk: int | None = None
) -> str | None:
    """An existing username that *name* looks like (the same skeleton), if any (*before_pk*:
    among the accounts made before that one only)."""
    skeleton = username_skeleton(name)
    users = get_user_model()._default_manager.all()
    if exclude_pk is not None:
        users = users.exclude(pk=exclude_pk)
    if before_pk is not None:
        users = users.filter(pk__lt=before_pk)
    for other in users.values_list("username", flat=True).iterator():
        if other.casefold() != name.casefold() and username_skeleton(other) == skeleton:
            return other
    return None


def username_check(username: str, *, exclude_pk: int | None = None) -> str:
    """The NFKC form of ``username``; ValidationError when it breaks the rule or another
    account has it in any case or has a name that looks the same."""
    name = username_normalise(username)
    problems = username_problems(name)
    if problems:
        raise ValidationError(problems, code="username_invalid")
    clash = get_user_model()._default_manager.filter(username__iexact=name)
    if exclude_pk is not None:
        clash = clash.exclude(pk=exclude_pk)
    if clash.exists() or _look_alike_of(name, exclude_pk=exclude_pk) is not None:
        raise ValidationError(
            _(
                "This username is taken: names that look alike (full-width letters, letters "
                "of another script that look the same) or differ only in case count as the same."
            ),
            code="username_taken",
        )
    return name


def guard_username(sender, instance, raw=False, update_fields=None, **kwargs) -> None:
    """pre_save: a new or changed name must pass ``username_check`` (stored in NFKC form);
    an unchanged one is left as it is, even if it predates the rule."""
    if raw or (update_fields is not None and "username" not in update_fields):
        return
    if instance.pk is not None:
        stored = (
            sender._default_manager.filter(pk=instance.pk)
            .values_list("username", flat=True)
            .first()
        )
        if stored is not None and stored == instance.username:
            return
    instance.username = username_check(instance.username, exclude_pk=instance.pk)


def usernames_breaking_the_rule() -> list[tuple[int, str, list[str]]]:
    """(id, username, what is wrong) of every stored name that the rule would refuse now:
    kept as they are, listed for operators (``manage.py usernames_check``)."""
    found = []
    users = get_user_model()._default_manager.order_by("pk").values_list("pk", "username")
    for pk, name in users.iterator():
        problems = username_problems(name)
        if name != username_normalise(name):
            problems.append(_("not in NFKC form"))
        other = _look_alike_of(name, exclude_pk=pk, before_pk=pk)  # the earlier one is kept
        if other is not None:
            problems.append(_("looks like “%(other)s”") % {"other": other})
        if problems:
            found.append((pk, name, problems))
    return found
