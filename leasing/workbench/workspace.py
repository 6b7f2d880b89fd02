"""Workspaces: a directory per user (``users/<username>``) and per team (``teams/<slug>``)
under the shared ``CARDPOOL_WORKSPACE_ROOT``, kept across leases, measured against a soft
limit. The root is a shared filesystem mounted at the same path on the nodes and on the
host that runs the worker (which measures it)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from leasing.choices import Kind
from leasing.models import WorkspaceUsage
from leasing.notify.messages import user_notice_send

GIB = 1024**3


def workspace_root() -> str:
    return settings.CARDPOOL_SESSIONS["WORKSPACE_ROOT"] or ""


def workspace_paths(*, user, team=None) -> dict[str, str]:
    """{"user": path, "team": path} of *user* (and *team*), or {} without a root."""
    root = workspace_root()
    if not root:
        return {}
    paths = {"user": str(Path(root) / "users" / user.get_username())}
    if team is not None:
        paths["team"] = str(Path(root) / "teams" / team.slug)
    return paths


def soft_limit_bytes() -> int:
    return settings.CARDPOOL_SESSIONS["WORKSPACE_SOFT_LIMIT_GB"] * GIB


def measure(path: str, *, max_entries: int = 2_000_000) -> tuple[int, int]:
    """(bytes on disk, files) under *path*, without following links; a missing path is
    empty. Stops counting after *max_entries* (a huge tree must not stall the worker)."""
    total = files = seen = 0
    stack = [path]
    while stack and seen < max_entries:
        try:
            entries = os.scandir(stack.pop())
        except OSError:
            continue
        with entries:
            for entry in entries:
                seen += 1
                try:
                    st = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                if entry.is_dir(follow_symlinks=False):
                    stack.append(entry.path)
                else:
                    files += 1
                    total += getattr(st, "st_blocks", 0) * 512 or st.st_size
    return total, files


def _warn(row: WorkspaceUsage, owner, kind: str) -> None:
    """Tell the owner (a team's leads) once per crossing, with the row's mark."""
    from portal.permissions import leads_of

    if kind == "users":
        people = [owner]
    else:
        people = leads_of(owner)
    limit = soft_limit_bytes()
    params = {
        "path": row.path,
        "pct": round(100 * row.bytes_used / limit) if limit else 0,
        "used": round(row.bytes_used / GIB, 2),
        "limit": round(limit / GIB, 2),
    }
    for person in people:
        user_notice_send(
            person,
            kind=Kind.WORKSPACE_NEAR_LIMIT,
            message="workspace",
            params=params,
            key=f"workspace:{row.pk}:{row.warned_at.isoformat()}:{person.pk}",
        )


@dataclass(frozen=True)
class Usage:
    """A workspace as the lease page shows it."""

    kind: str  # "user" or "team"
    path: str
    bytes_used: int | None
    limit: int
    measured_at: datetime | None

    @property
    def percent(self) -> int | None:
        if self.bytes_used is None or not self.limit:
            return None
        return round(100 * self.bytes_used / self.limit)

    @property
    def near_limit(self) -> bool:
        pct = self.percent
        return pct is not None and pct >= settings.CARDPOOL_SESSIONS["WORKSPACE_WARN_PERCENT"]

    @property
    def gib_used(self) -> float:
        return round((self.bytes_used or 0) / GIB, 2)

    @property
    def gib_limit(self) -> float:
        return round(self.limit / GIB, 2)


def workspace_usage(*, user, team=None) -> list[Usage]:
    """The user's (and team's) workspaces with their last measured size."""
    paths = workspace_paths(user=user, team=team)
    rows = {w.path: w for w in WorkspaceUsage.objects.filter(path__in=list(paths.values()))}
    return [
        Usage(
            kind=kind,
            path=path,
            bytes_used=rows[path].bytes_used if path in rows else None,
            limit=soft_limit_bytes(),
            measured_at=rows[path].measured_at if path in rows else None,
        )
        for kind, path in paths.items()
    ]


def workspaces_measure(*, now: datetime | None = None) -> dict:
    """Measure every workspace directory under the root; record sizes; return the ones that
    crossed the warning share since they were last under it (the caller tells the owners)."""
    from django.contrib.auth import get_user_model

    from portal.models import Team

    now = now or timezone.now()
    root = workspace_root()
    if not root:
        return {"measured": 0, "warn": []}
    users = {u.get_username(): u for u in get_user_model().objects.filter(is_active=True)}
    teams = {t.slug: t for t in Team.objects.all()}
    warn_at = soft_limit_bytes() * settings.CARDPOOL_SESSIONS["WORKSPACE_WARN_PERCENT"] // 100
    measured, warn = 0, []
    for kind, owners in (("users", users), ("teams", teams)):
        base = Path(root) / kind
        if not base.is_dir():
            continue
        for entry in sorted(base.iterdir()):
            owner = owners.get(entry.name)
            if owner is None or not entry.is_dir():
                continue
            size, files = measure(str(entry))
            with transaction.atomic():
                row, _created = WorkspaceUsage.objects.select_for_update().get_or_create(
                    path=str(entry),
                    defaults={
                        "user": owner if kind == "users" else None,
                        "team": owner if kind == "teams" else None,
                        "measured_at": now,
                    },
                )
                crossed = bool(warn_at) and size >= warn_at and row.warned_at is None
                row.bytes_used, row.files, row.measured_at = size, files, now
                if crossed:
                    row.warned_at = now
                    warn.append(row.pk)
                    _warn(row, owner, kind)
                elif size < warn_at:
                    row.warned_at = None  # back under: warn again next time it crosses
                row.save()
            measured += 1
    return {"measured": measured, "warn": warn}
