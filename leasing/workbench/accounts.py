"""Which Unix account a portal user's sessions, SSH keys and checkpoints run as on a node the
agent manages (the local backend). One setting, ``CARDPOOL_SESSIONS["ACCOUNTS"]``:

* ``same``: the account named like the portal user (sites whose nodes read LDAP/SSSD);
* ``profile``: the profile's "Slurm user" (its Unix account) where set, else the same name;
* ``managed``: ``cardpool-<username>`` (``cardpool-<id>`` when the username is no valid Unix
  name or too long), which the agent creates on first use — no password, its home under
  ``<WORKSPACE_ROOT>/homes/`` — and locks when the person leaves (deactivated or deleted in the
  portal; ``POST /api/v1/agent/accounts/``).

docs/operations.md, "Session accounts", says which to choose.
"""

from __future__ import annotations

import re
from pathlib import Path

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.exceptions import ImproperlyConfigured

from leasing.workbench import workspace

MODES = ("same", "profile", "managed")
PREFIX = "cardpool-"
_UNIX_NAME = re.compile(r"^[a-z][a-z0-9_-]*$")
_MAX = 32  # useradd's limit for a name


def mode() -> str:
    value = str(settings.CARDPOOL_SESSIONS["ACCOUNTS"])
    if value not in MODES:
        raise ImproperlyConfigured(
            f"CARDPOOL_SESSION_ACCOUNTS must be one of {', '.join(MODES)}, not {value!r}"
        )
    return value


def managed_name(user) -> str:
    """``cardpool-<username>``, or ``cardpool-<id>`` for a username Unix would refuse (the id
    starts with a digit, so the two forms never meet)."""
    username = user.get_username()
    if _UNIX_NAME.match(username) and len(PREFIX) + len(username) <= _MAX:
        return PREFIX + username
    return f"{PREFIX}{user.pk}"


def account_name(user) -> str:
    """The Unix account *user*'s sessions and keys run as, under the site's mode."""
    chosen = mode()
    if chosen == "managed":
        return managed_name(user)
    if chosen == "profile":
        profile = getattr(user, "profile", None)
        named = (getattr(profile, "slurm_user", "") or "").strip()
        if named:
            return named
    return user.get_username().strip()


def managed_home(name: str) -> str:
    root = workspace.workspace_root()
    return str(Path(root) / "homes" / name) if root else f"/home/{name}"


def account_item(user) -> dict:
    """What the agent needs to run as *user*: the account, and whether (and where) it may
    create it."""
    name = account_name(user)
    if mode() != "managed":
        return {"user": name}
    return {"user": name, "create": True, "home": managed_home(name)}


def leavers(names: list[str]) -> list[str]:
    """Of the managed account names a node's agent created, those whose person has left the
    portal (deactivated or deleted): the agent locks them."""
    wanted = {n for n in names if n.startswith(PREFIX)}
    tails = {n[len(PREFIX) :] for n in wanted}
    users = get_user_model().objects.filter(username__in=tails) | get_user_model().objects.filter(
        pk__in=[int(t) for t in tails if t.isdigit()]
    )
    staying = {managed_name(u) for u in users if u.is_active}
    return sorted(wanted - staying)
