"""Settings for teams from directory groups, parsed where portal/settings.py reads them
(a leaf: only Django). The rules that apply them are in leasing/directory/."""

from __future__ import annotations

from django.core.exceptions import ImproperlyConfigured

ROLES = ("member", "lead")
LEAVER_RULES = ("end", "lead")


def parse_team_map(raw: str) -> dict[str, list[tuple[str, str]]]:
    """ "group=team[:role],…" → {group: [(team slug, role), …]}; fail loudly on bad items.

    A group may feed several teams; a person in a team's member and lead groups is its lead.
    """
    mapping: dict[str, list[tuple[str, str]]] = {}
    for item in raw.split(","):
        item = item.strip()
        if not item:
            continue
        group, sep, target = (part.strip() for part in item.rpartition("="))
        team, _colon, role = (part.strip() for part in target.partition(":"))
        role = role or "member"
        if not sep or not group or not team or role not in ROLES:
            raise ImproperlyConfigured(
                f"CARDPOOL_DIRECTORY_TEAMS: {item!r} is not <group>=<team slug>[:member|:lead]"
            )
        mapping.setdefault(group, []).append((team, role))
    return mapping


def leaver_rule(raw: str) -> str:
    if raw not in LEAVER_RULES:
        raise ImproperlyConfigured(f"CARDPOOL_LEAVER_LEASES={raw!r}: use end or lead")
    return raw
