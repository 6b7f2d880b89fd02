"""What the site's LDAP directory says about people, as plain data (``Person``): their portal
fields, Unix account (uid, uidNumber, gidNumber, home, shell), groups, and whether they are
disabled. Read at sign-in (portal/auth_ldap.py) and by the periodic sync
(leasing/directory/sync.py); leasing/directory/services.py applies it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from django.conf import settings

logger = logging.getLogger(__name__)


@dataclass
class Person:
    """One person as the directory (LDAP, or an OIDC provider's claims) describes them."""

    username: str
    dn: str = ""
    fields: dict = field(default_factory=dict)  # user model fields: email, first_name, …
    uid: str = ""
    uid_number: int | None = None
    gid_number: int | None = None
    home: str = ""
    shell: str = ""
    # None: not known (no group search configured, or it failed): teams are left as they are.
    groups: list[str] | None = None
    disabled: bool = False


LDAP_DEFAULTS = {
    "GROUP_SEARCH_BASE": "",
    "GROUP_FILTER": "(objectClass=groupOfNames)",
    "GROUP_MEMBER_ATTRIBUTE": "member",
    "GROUP_NAME_ATTRIBUTE": "cn",
    "DISABLED_FILTER": "",
}


def ldap_conf() -> dict:
    """settings.CARDPOOL_LDAP over its defaults (set when CARDPOOL_LDAP_URL is)."""
    return LDAP_DEFAULTS | getattr(settings, "CARDPOOL_LDAP", {})


def _values(attributes: dict, name: str) -> list:
    value = attributes.get(name)
    if value is None:
        return []
    return list(value) if isinstance(value, list | tuple) else [value]


def _first(attributes: dict, name: str) -> str:
    values = _values(attributes, name)
    if not values:
        return ""
    value = values[0]
    return value.decode() if isinstance(value, bytes) else str(value)


def _number(attributes: dict, name: str) -> int | None:
    text = _first(attributes, name)
    return int(text) if text.isdigit() else None


def dn_key(dn: str) -> str:
    """A DN compared the way directories do for these purposes: case and spaces ignored."""
    return ",".join(part.strip() for part in dn.split(",")).casefold()


def person_from_entry(dn: str, attributes: dict, *, groups=None, disabled=False) -> Person:
    from django_python3_ldap.conf import settings as ldap_settings  # with its defaults

    user_fields = {
        name: _first(attributes, attribute)
        for name, attribute in ldap_settings.LDAP_AUTH_USER_FIELDS.items()
        if _values(attributes, attribute)
    }
    username = user_fields.pop("username", "")
    return Person(
        username=username,
        dn=dn,
        fields=user_fields,
        uid=_first(attributes, "uid") or username,
        uid_number=_number(attributes, "uidNumber"),
        gid_number=_number(attributes, "gidNumber"),
        home=_first(attributes, "homeDirectory"),
        shell=_first(attributes, "loginShell"),
        groups=groups,
        disabled=disabled,
    )


def _escape(value: str) -> str:
    from ldap3.utils.conv import escape_filter_chars

    return escape_filter_chars(value)


def groups_of(connection, *, dn: str, uid: str) -> list[str] | None:
    """The names of the groups *dn* (or, for posixGroup, *uid*) belongs to; None when the
    site names no group base or the search failed (then teams stay as they are)."""
    from ldap3 import SUBTREE
    from ldap3.core.exceptions import LDAPException

    conf = ldap_conf()
    if not conf["GROUP_SEARCH_BASE"]:
        return None
    member_attribute = conf["GROUP_MEMBER_ATTRIBUTE"]
    value = uid if member_attribute.casefold() == "memberuid" else dn
    query = f"(&{conf['GROUP_FILTER']}({member_attribute}={_escape(value)}))"
    try:
        connection.search(
            search_base=conf["GROUP_SEARCH_BASE"],
            search_filter=query,
            search_scope=SUBTREE,
            attributes=[conf["GROUP_NAME_ATTRIBUTE"]],
        )
    except LDAPException:
        logger.warning("LDAP group search for %s failed", dn, exc_info=True)
        return None
    return sorted(
        {
            _first(entry.get("attributes") or {}, conf["GROUP_NAME_ATTRIBUTE"])
            for entry in connection.response
            if entry.get("type") == "searchResEntry"
        }
        - {""}
    )


def _paged(connection, base: str, query: str, attributes) -> list[dict]:
    from ldap3 import SUBTREE

    return [
        entry
        for entry in connection.extend.standard.paged_search(
            search_base=base,
            search_filter=query,
            search_scope=SUBTREE,
            attributes=attributes,
            paged_size=200,
            generator=True,
        )
        if entry.get("type") == "searchResEntry"
    ]


def read_person(username: str) -> Person | None:
    """One person by username (bound as the service account), with whether they are
    disabled; None when the directory does not list them. ``ConnectionError`` when it
    cannot be read."""
    from django_python3_ldap.conf import settings as ldap_settings
    from django_python3_ldap.ldap import connection as ldap_connection
    from django_python3_ldap.utils import format_search_filter
    from ldap3 import ALL_ATTRIBUTES, SUBTREE
    from ldap3.core.exceptions import LDAPException

    conf = ldap_conf()
    with ldap_connection() as conn:
        if conn is None:
            raise ConnectionError("cannot bind to the LDAP directory as the service account")
        raw = conn._connection
        query = format_search_filter({"username": username})
        try:
            raw.search(
                ldap_settings.LDAP_AUTH_SEARCH_BASE,
                query,
                SUBTREE,
                attributes=ALL_ATTRIBUTES,
                size_limit=1,
            )
            entries = [e for e in raw.response if e.get("type") == "searchResEntry"]
            if not entries:
                return None
            disabled = False
            if conf["DISABLED_FILTER"]:
                raw.search(
                    ldap_settings.LDAP_AUTH_SEARCH_BASE,
                    f"(&{query}{conf['DISABLED_FILTER']})",
                    SUBTREE,
                    attributes=["1.1"],
                    size_limit=1,
                )
                disabled = any(e.get("type") == "searchResEntry" for e in raw.response)
        except LDAPException as exc:
            raise ConnectionError(f"reading the LDAP directory failed: {exc}") from exc
    return person_from_entry(entries[0]["dn"], entries[0]["attributes"], disabled=disabled)


def read_people() -> list[Person]:
    """Everyone under the people base, with their groups and whether they are disabled: one
    search for people, one for the disabled, one for the groups (bound as the service account).

    Raises ``ConnectionError`` when the directory cannot be read, so a sync never takes a
    failed or empty read for "everyone left".
    """
    from django_python3_ldap.conf import settings as ldap_settings
    from django_python3_ldap.ldap import connection as ldap_connection
    from django_python3_ldap.utils import format_search_filter
    from ldap3 import ALL_ATTRIBUTES
    from ldap3.core.exceptions import LDAPException

    conf = ldap_conf()
    with ldap_connection() as conn:
        if conn is None:
            raise ConnectionError("cannot bind to the LDAP directory as the service account")
        raw = conn._connection
        everyone = format_search_filter({})
        try:
            entries = _paged(raw, ldap_settings.LDAP_AUTH_SEARCH_BASE, everyone, ALL_ATTRIBUTES)
            disabled: set[str] = set()
            if conf["DISABLED_FILTER"]:
                query = f"(&{everyone}{conf['DISABLED_FILTER']})"
                found = _paged(raw, ldap_settings.LDAP_AUTH_SEARCH_BASE, query, ["1.1"])
                disabled = {dn_key(entry["dn"]) for entry in found}
            groups: dict[str, set[str]] | None = None
            if conf["GROUP_SEARCH_BASE"]:
                groups = {}
                name_attribute = conf["GROUP_NAME_ATTRIBUTE"]
                member_attribute = conf["GROUP_MEMBER_ATTRIBUTE"]
                found = _paged(
                    raw,
                    conf["GROUP_SEARCH_BASE"],
                    conf["GROUP_FILTER"],
                    [name_attribute, member_attribute],
                )
                by_uid = member_attribute.casefold() == "memberuid"
                for entry in found:
                    name = _first(entry["attributes"], name_attribute)
                    for member in _values(entry["attributes"], member_attribute):
                        key = str(member).casefold() if by_uid else dn_key(str(member))
                        groups.setdefault(key, set()).add(name)
        except LDAPException as exc:
            raise ConnectionError(f"reading the LDAP directory failed: {exc}") from exc
    people = []
    for entry in entries:
        person = person_from_entry(
            entry["dn"], entry["attributes"], disabled=dn_key(entry["dn"]) in disabled
        )
        if not person.username:
            continue
        if groups is not None:
            key = person.uid.casefold() if by_uid else dn_key(person.dn)
            person.groups = sorted(groups.get(key, set()))
        people.append(person)
    return people


@dataclass(frozen=True)
class UnixAccount:
    """A person's Unix account as the LDAP directory gives it (posixAccount)."""

    name: str
    uid_number: int | None
    gid_number: int | None
    home: str
    shell: str


def unix_account(user) -> UnixAccount | None:
    """The Unix account sessions and SSH keys of *user* should run as, from the directory
    (recorded at sign-in and by the sync); None for local and OIDC-only accounts and for
    someone the directory has let go. For the session account mapping to read."""
    from portal.models import DirectoryAccount

    account = DirectoryAccount.objects.filter(
        user_id=getattr(user, "pk", None),
        source=DirectoryAccount.Source.LDAP,
        left_at__isnull=True,
    ).first()
    if account is None or not account.uid:
        return None
    return UnixAccount(
        name=account.uid,
        uid_number=account.uid_number,
        gid_number=account.gid_number,
        home=account.home,
        shell=account.shell,
    )
