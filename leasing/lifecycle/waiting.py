"""Why a waiting lease waits (``waiting_because``): a list of ``{kind, params}``, worded for
its reader on the lease page, the lease list and in the API (``because_text``).

Kinds, in the order they are listed:

* ``approval`` — it waits for a lead's decision (``approvers``: the team's leads);
* ``requirements`` — it can never start as asked (``reason``: the queue pass's
  ``Lease.stall_reason``, told once by ``run.stalled_tell``);
* ``ahead_in_queue`` — leases the queue serves first (``count``, their ``card_hours``);
* ``fair_share`` — ``count`` of those were asked for later and are served first only
  because their teams are further below their fair share (``factor``: the lease's team's
  fair-share factor, ``scheduler.fairshare``);
* ``taken_back`` — ``count`` cards are being taken back for it from running leases (a
  preemption: ``why`` a higher class, its team's guaranteed share or fair share), free
  ``at`` the end of their grace;
* ``cards_in_use`` — from the start it asked for, ``count`` cards are held, reserved or
  planned for a lease ahead ``until`` its estimated start; ``leases``: those the reader may
  see, ``others``: how many other leases (other teams') are in the way;
* ``off_peak`` — it starts only in an off-peak window (``from``: its estimated start);
* ``unhealthy_cards`` — ``count`` cards of the model are kept out by their readings;
* ``drain`` — ``count`` cards are drained, in maintenance or faulty.

All read from the model's one picture of the future (``scheduler.picture``) and its queue
(``scheduler.snapshot.waiting_for``), the plan the scheduler carries out.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import ngettext

from leasing.choices import RUNNING_STATES, LeaseStatus, PreemptWhy
from leasing.lifecycle.selectors import leases_visible_to
from leasing.models import Lease
from leasing.notify.messages import stall_text
from leasing.scheduler.picture import MAINTENANCE, PLANNED, UNHEALTHY, model_picture
from leasing.scheduler.snapshot import waiting_for
from portal.models import Membership

KINDS = (
    "approval",
    "requirements",
    "ahead_in_queue",
    "fair_share",
    "taken_back",
    "cards_in_use",
    "off_peak",
    "unhealthy_cards",
    "drain",
)
# How far the picture looks when a waiting lease has no estimate (it never fits, or waits
# for its lead): far enough to say what holds the cards it asked for.
HORIZON = timedelta(days=7)


@dataclass(frozen=True)
class Because:
    kind: str
    params: dict = field(default_factory=dict)

    @property
    def text(self) -> str:
        return because_text(self)


def waiting_because(lease: Lease, *, user, now: datetime | None = None) -> list[Because]:
    """Why *lease* waits, for the reader *user* (see the module); [] when it does not wait."""
    return waiting_because_many([lease], user=user, now=now).get(lease.pk, [])


def waiting_because_many(leases, *, user, now: datetime | None = None) -> dict[int, list[Because]]:
    """``waiting_because`` for many leases: a few queries per card model among them."""
    now = now or timezone.now()
    waiting = [lease for lease in leases if lease.status in (LeaseStatus.QUEUED,
                                                             LeaseStatus.PENDING_APPROVAL)]  # fmt: skip
    if not waiting:
        return {}
    leads: dict[int, list[str]] = defaultdict(list)
    if any(lease.status == LeaseStatus.PENDING_APPROVAL for lease in waiting):
        for team_id, username in (
            Membership.objects.filter(
                team_id__in={lease.team_id for lease in waiting}, role=Membership.Role.LEAD
            )
            .order_by("user__username")
            .values_list("team_id", "user__username")
        ):
            leads[team_id].append(username)
    by_model: dict[int, list[Lease]] = defaultdict(list)
    for lease in waiting:
        by_model[lease.card_model_id].append(lease)
    found: dict[int, list[Because]] = {}
    in_the_way: dict[int, set[int]] = {}
    taken = _taken_back_for([lease.pk for lease in waiting if lease.status == LeaseStatus.QUEUED])
    for model_id, model_leases in by_model.items():
        queue = waiting_for(model_id, now=now)
        end = now + HORIZON
        for lease in model_leases:
            wanted = max(now, lease.start_at)
            eta = lease.estimated_start or wanted
            end = max(end, eta + lease.duration, wanted + lease.duration)
        picture = model_picture(model_id, start=now, end=end, now=now)
        down = {MAINTENANCE: 0, UNHEALTHY: 0}
        for bookings in picture.bookings.values():
            for kind in down:
                if any(b.kind == kind and b.start <= now for b in bookings):
                    down[kind] += 1
        keys = {w.request.lease_id: w.key for w in queue}
        for lease in model_leases:
            out: list[Because] = []
            if lease.status == LeaseStatus.PENDING_APPROVAL:
                out.append(Because("approval", {"approvers": leads.get(lease.team_id, [])}))
            elif lease.stall_reason:
                out.append(
                    Because(
                        "requirements",
                        {"reason": lease.stall_reason, "same_node": lease.same_node},
                    )
                )
            else:
                mine = keys.get(lease.pk)
                ahead = [w for w in queue if mine is not None and w.key < mine]
                if ahead:
                    hours = sum(
                        w.request.count * w.request.duration / timedelta(hours=1) for w in ahead
                    )
                    out.append(
                        Because(
                            "ahead_in_queue", {"count": len(ahead), "card_hours": round(hours, 1)}
                        )
                    )
                    fair = fair_share_ahead(mine, ahead)
                    if fair:
                        out.append(Because("fair_share", {"count": fair, "factor": -mine[1]}))
                if lease.pk in taken:
                    out.append(Because("taken_back", taken[lease.pk]))
                wanted = max(now, lease.start_at)
                eta = lease.estimated_start
                if eta is None or eta > wanted:
                    window = (wanted, wanted + lease.duration)
                    ids: set[int] = set()
                    busy = 0
                    for card in picture.cards:
                        hits = [
                            b
                            for b in picture.busy(card.card_id, *window)
                            if b.kind not in (MAINTENANCE, UNHEALTHY) and b.lease_id != lease.pk
                            and (b.kind != PLANNED or b.lease_id not in keys
                                 or mine is None or keys[b.lease_id] < mine)
                        ]  # fmt: skip
                        if hits:
                            busy += 1
                            ids |= {b.lease_id for b in hits if b.lease_id}
                    if busy:
                        in_the_way[lease.pk] = ids
                        out.append(
                            Because("cards_in_use", {"count": busy, "until": eta, "leases": []})
                        )
                if lease.start_policy:
                    out.append(Because("off_peak", {"from": eta, "policy": lease.start_policy}))
            late = lease.estimated_start is None or lease.estimated_start > max(now, lease.start_at)
            if lease.status == LeaseStatus.QUEUED and (lease.stall_reason or late):
                if down[UNHEALTHY]:
                    out.append(Because("unhealthy_cards", {"count": down[UNHEALTHY]}))
                if down[MAINTENANCE]:
                    out.append(Because("drain", {"count": down[MAINTENANCE]}))
            found[lease.pk] = out
    # the leases in the way, by id, only where the reader may see them
    every = set().union(*in_the_way.values()) if in_the_way else set()
    seen = set(leases_visible_to(user).filter(pk__in=every).values_list("pk", flat=True))
    for lease_id, ids in in_the_way.items():
        for b in found[lease_id]:
            if b.kind == "cards_in_use":
                b.params["leases"] = sorted(ids & seen)
                b.params["others"] = len(ids - seen)
    return found


def _taken_back_for(lease_ids: list[int]) -> dict[int, dict]:
    """For each of *lease_ids* that running leases are being preempted for: how many cards,
    when the last is free, and why (``PreemptWhy``). One query."""
    if not lease_ids:
        return {}
    out: dict[int, dict] = {}
    rows = Lease.objects.filter(
        preempted_for_id__in=lease_ids, status__in=RUNNING_STATES, preempt_at__isnull=False
    ).values_list("preempted_for_id", "count", "preempt_cards", "preempt_at", "preempt_why")
    for waiting_id, count, cards, at, why in rows:
        seen = out.setdefault(waiting_id, {"count": 0, "at": at, "why": why or PreemptWhy.PRIORITY})
        seen["count"] += cards or count
        seen["at"] = max(seen["at"], at)
    return out


def fair_share_ahead(mine, ahead) -> int:
    """How many of the leases *ahead* (their service keys smaller than *mine*) are there only
    because of fair share: same class, a higher factor, a later virtual submit time."""
    return sum(
        1 for w in ahead if w.key[0] == mine[0] and w.key[1] < mine[1] and w.key[2] > mine[2]
    )


def _at(value) -> str:
    if value is None:
        return _("unknown")
    return timezone.localtime(value).strftime("%m-%d %H:%M")


def because_text(b: Because) -> str:
    """One reason, worded for its reader (the active language and time zone)."""
    p = b.params
    if b.kind == "approval":
        names = ", ".join(p.get("approvers") or []) or _("your team's lead")
        return _("waits for approval by %(who)s") % {"who": names}
    if b.kind == "requirements":
        why, todo = stall_text(p["reason"], same_node=bool(p.get("same_node", True)))
        return _("cannot start as asked: %(why)s. %(todo)s") % {"why": why, "todo": todo}
    if b.kind == "ahead_in_queue":
        return ngettext(
            "%(n)s lease ahead in the queue (%(hours)s card-hours)",
            "%(n)s leases ahead in the queue (%(hours)s card-hours)",
            p["count"],
        ) % {"n": p["count"], "hours": p["card_hours"]}
    if b.kind == "fair_share":
        return ngettext(
            "%(n)s lease asked for later is served first: its team is further below its fair "
            "share (your team's fair-share factor: %(factor)s)",
            "%(n)s leases asked for later are served first: their teams are further below their "
            "fair share (your team's fair-share factor: %(factor)s)",
            p["count"],
        ) % {"n": p["count"], "factor": f"{p['factor']:.2f}"}
    if b.kind == "taken_back":
        values = {"n": p["count"], "at": _at(p.get("at"))}
        if p.get("why") == PreemptWhy.FAIR_SHARE:
            return (
                ngettext(
                    "%(n)s card is being taken back for it from a team above its fair share: free at %(at)s",
                    "%(n)s cards are being taken back for it from teams above their fair share: free at %(at)s",
                    p["count"],
                )
                % values
            )
        if p.get("why") == PreemptWhy.SHARE:
            return (
                ngettext(
                    "%(n)s card is being taken back for its team's guaranteed share: free at %(at)s",
                    "%(n)s cards are being taken back for its team's guaranteed share: free at %(at)s",
                    p["count"],
                )
                % values
            )
        return (
            ngettext(
                "%(n)s card is being taken back for it from lower-priority work: free at %(at)s",
                "%(n)s cards are being taken back for it from lower-priority work: free at %(at)s",
                p["count"],
            )
            % values
        )
    if b.kind == "cards_in_use":
        whose = [_("lease %(id)s") % {"id": i} for i in p.get("leases", [])]
        if p.get("others"):
            whose.append(
                ngettext("%(n)s other team's lease", "%(n)s other teams' leases", p["others"])
                % {"n": p["others"]}
            )
        return ngettext(
            "%(n)s card in use or planned until %(until)s (%(whose)s)",
            "%(n)s cards in use or planned until %(until)s (%(whose)s)",
            p["count"],
        ) % {"n": p["count"], "until": _at(p.get("until")), "whose": ", ".join(whose)}
    if b.kind == "off_peak":
        return _("waits for the off-peak window from %(at)s") % {"at": _at(p.get("from"))}
    if b.kind == "unhealthy_cards":
        return ngettext(
            "%(n)s card is kept out by its readings (hot or its node silent)",
            "%(n)s cards are kept out by their readings (hot or their node silent)",
            p["count"],
        ) % {"n": p["count"]}
    if b.kind == "drain":
        return ngettext(
            "%(n)s card is drained or in maintenance",
            "%(n)s cards are drained or in maintenance",
            p["count"],
        ) % {"n": p["count"]}
    return b.kind
