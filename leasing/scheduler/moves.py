"""Moves are told: when a waiting lease's estimated start moves by more than
``CARDPOOL["ESTIMATE_MOVE_MINUTES"]`` (default 15) between two passes, its timeline gets an
``estimate_moved`` event (old → new, and why), and its holder a notice in their language —
at most one per lease per ``NOTICE_EVERY`` (an hour); moves inside that hour are told once
it is over, with the latest estimate (``estimate_notices_due``, on the tick).

Why a plan moved is known to the change that asked for the pass, not to the pass: the
services say it around their ``replan`` (``because``), and a request that joins the queue is
named by the pass itself (``request_ahead``). Anything else is ``replanned``.
"""

from __future__ import annotations

import contextlib
import logging
from contextvars import ContextVar
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.utils.dateparse import parse_datetime

from leasing.choices import Kind, LeaseStatus
from leasing.models import Lease, LeaseEvent, Notification
from leasing.notify.messages import notice_send
from leasing.scheduler.eta import told_again

logger = logging.getLogger(__name__)

NOTICE_EVERY = timedelta(hours=1)
# Notices written in the pass itself (under the model's lock); a pass that moves more (a long
# queue shifting at once) leaves the rest to the tick's ``estimate_notices_due``.
INLINE_NOTICES = 50
TICK_NOTICES = 200
MESSAGE = "estimate_moved"
EVENT = "estimate_moved"
# why an estimate moved: the kinds the services name (worded in notify.messages)
WHY = (
    "request_ahead",
    "higher_priority",
    "released",
    "drain",
    "card_failed",
    "fair_share",
    "team_passed",
    "replanned",
)

_cause: ContextVar[tuple[str, dict] | None] = ContextVar("estimate_move_cause", default=None)
_passer: ContextVar[int | None] = ContextVar("estimate_move_passer", default=None)


@contextlib.contextmanager
def passed_by(lease_id: int | None):
    """In this block a lease of the team started around the head (``headfirst``): estimates
    that move later moved for it (``team_passed``); others keep the cause said around it."""
    token = _passer.set(lease_id)
    try:
        yield
    finally:
        _passer.reset(token)


@contextlib.contextmanager
def because(why: str, **params):
    """Estimates that move inside this block moved for *why* (see ``WHY``)."""
    token = _cause.set((why, params))
    try:
        yield
    finally:
        _cause.reset(token)


def threshold() -> timedelta:
    return timedelta(minutes=settings.CARDPOOL["ESTIMATE_MOVE_MINUTES"])


def estimates_moved(
    moved: list[tuple[int, datetime | None, datetime | None, dict | None]], *, now: datetime
) -> list[int]:
    """Record (and tell) the moves of *moved* ``(lease, old estimate, new estimate, basis)``
    larger than the threshold; the leases told now. Called by the pass that wrote the
    estimates; *basis*: what the new estimate is made of (``eta.told_basis``), kept with it.

    A move is measured from the estimate last recorded on the lease's timeline (the one it
    was given when it queued, or the last move's), so many small steps add up to a move; that
    estimate as it reads now (``eta.told_again``): the room a start told leaves for passing
    work shrinks as time goes on, which is no move."""
    limit = threshold()
    changed = [m for m in moved if m[2] is not None]
    if not changed:
        return []
    base = baselines([pk for pk, _o, _n, _b in changed])
    big = []
    for pk, old, new, basis in changed:
        was = old
        if pk in base:
            recorded, recorded_basis = base[pk]
            was = told_again(recorded_basis, now=now) if recorded_basis else recorded
        if was is not None and abs(new - was) > limit:
            big.append((pk, was, new, basis))
    if not big:
        return []
    why, params = _cause.get() or ("replanned", {})
    ranks = {}
    if why == "request_ahead":
        ids = [pk for pk, *_m in big] + [params.get("lease")]
        ranks = dict(Lease.objects.filter(pk__in=ids).values_list("pk", "priority_rank"))
    events = []
    passer = _passer.get()
    for pk, old, new, basis in big:
        reason, said = why, params
        if why == "request_ahead" and ranks.get(params.get("lease"), 0) > ranks.get(pk, 0):
            reason = "higher_priority"
        if passer is not None and new > old:
            reason, said = "team_passed", {"lease": passer}
        events.append(
            LeaseEvent(
                lease_id=pk,
                kind=EVENT,
                at=now,
                data={
                    "from": old.isoformat(),
                    "to": new.isoformat(),
                    "why": reason,
                    **said,
                    **({"basis": basis} if basis else {}),
                },
            )
        )
    LeaseEvent.objects.bulk_create(events)
    told_lately = set(
        Notification.objects.filter(
            lease_id__in=[pk for pk, _o, _n, _b in big],
            data__message=MESSAGE,
            created_at__gt=now - NOTICE_EVERY,
        ).values_list("lease_id", flat=True)
    )
    due = [(pk, e) for (pk, *_m), e in zip(big, events, strict=True) if pk not in told_lately]
    return _tell(dict(due[:INLINE_NOTICES]), now=now)


def baselines(lease_ids: list[int]) -> dict[int, tuple[datetime, dict | None]]:
    """Per lease, the estimate its timeline last recorded, at queueing (``queued``) or the
    last ``estimate_moved``, with what it was made of (``eta.told_basis``; None on events
    recorded without it). One query."""
    out: dict[int, tuple[datetime, dict | None]] = {}
    rows = (
        LeaseEvent.objects.filter(lease_id__in=lease_ids, kind__in=("queued", EVENT))
        .order_by("lease_id", "at", "pk")
        .values_list("lease_id", "kind", "data")
    )
    for lease_id, kind, data in rows:
        value = (data or {}).get("to" if kind == EVENT else "estimated_start")
        moment = parse_datetime(str(value)) if value else None
        if moment is not None:
            out[lease_id] = (moment, (data or {}).get("basis"))
    return out


def _tell(events: dict[int, LeaseEvent], *, now: datetime) -> list[int]:
    """One notice per lease: the move in *events* (its latest), worded for the holder."""
    told = []
    for lease in Lease.objects.filter(pk__in=list(events)).select_related(
        "user__profile", "card_model"
    ):
        e = events[lease.pk]
        try:
            with transaction.atomic():
                notice_send(
                    lease,
                    kind=Kind.LEASE_QUEUED,
                    message=MESSAGE,
                    params={
                        "id": lease.pk,
                        "n": lease.count,
                        "model": lease.card_model.name,
                        "from": e.data["from"],
                        "to": e.data["to"],
                        "why": e.data["why"],
                        **{k: e.data[k] for k in ("node", "card") if k in e.data},
                    },
                    key=f"lease:{lease.pk}:estimate:{e.data['to']}:{now.isoformat()}",
                )
            told.append(lease.pk)
        except Exception:
            logger.exception("lease %s: estimate notice not written; the tick retries", lease.pk)
    return told


def estimate_notices_due(*, now: datetime) -> int:
    """Tell the moves left untold by the hourly limit, once the hour is over: per waiting
    lease, one notice from the estimate last told to the latest one (if they differ by
    more than the threshold). Run by the tick; a bounded batch."""
    since = now - timedelta(days=1)
    moved = (
        LeaseEvent.objects.filter(kind=EVENT, at__gt=since, lease__status=LeaseStatus.QUEUED)
        .order_by("lease_id", "at", "pk")
        .values_list("lease_id", "at", "data")
    )
    latest: dict[int, tuple[datetime, dict]] = {}
    first: dict[int, tuple[datetime, dict]] = {}
    for lease_id, at, data in moved[:5000]:
        latest[lease_id] = (at, data)
        first.setdefault(lease_id, (at, data))
    if not latest:
        return 0
    last_told: dict[int, tuple[datetime, dict]] = {}
    for lease_id, created, data in (
        Notification.objects.filter(lease_id__in=list(latest), data__message=MESSAGE)
        .order_by("lease_id", "created_at", "pk")
        .values_list("lease_id", "created_at", "data")
    ):
        last_told[lease_id] = (created, data.get("params") or {})
    due: dict[int, LeaseEvent] = {}
    for lease_id, (at, data) in latest.items():
        told = last_told.get(lease_id)
        if told is None:  # never told (a pass that moved more than INLINE_NOTICES)
            told = (first[lease_id][0] - NOTICE_EVERY, {"to": first[lease_id][1].get("from")})
        if told[0] >= at or told[0] > now - NOTICE_EVERY:
            continue  # told after its last move, or told within the hour
        was = parse_datetime(str(told[1].get("to", "")))
        new = parse_datetime(str(data.get("to", "")))
        if was is None or new is None or abs(new - was) <= threshold():
            continue  # back near what the holder was told: nothing to tell
        event = LeaseEvent(lease_id=lease_id, kind=EVENT, at=at,
                           data={**data, "from": told[1]["to"]})  # fmt: skip
        due[lease_id] = event
        if len(due) >= TICK_NOTICES:
            break
    return len(_tell(due, now=now))
