"""Making room for a higher class or a team's guaranteed share: which leases end, and when
(after a grace period, at least their declared checkpoint time).

Runs inside the queue pass (``run.schedule_card_model``) with the card model locked; the
leases it marks are ended by the sweep at ``preempt_at`` (``lifecycle.endings``).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import Q

from inventory.models import Card
from leasing import statements
from leasing.choices import (
    PRIORITY_RANK,
    RUNNING_STATES,
    Kind,
    LeaseStatus,
    PreemptWhy,
    Priority,
    WarningKind,
)
from leasing.enqueue import enqueue_after_commit
from leasing.models import Allocation, FairShare, FairSharePolicy, Lease
from leasing.notify.messages import notice_send
from leasing.notify.services import warning_with_notice
from leasing.scheduler import fairshare, planner, shares
from leasing.scheduler.queueplan import service_key
from leasing.scheduler.snapshot import lease_card_slots, timeline_for
from leasing.transitions import event_record

PREEMPTIBLE_RANK = PRIORITY_RANK[Priority.PREEMPTIBLE]


def preemption_plan(
    card_model_id: int, *, now: datetime, covering: list[shares.Share] | None = None
) -> int:
    """Make room for waiting work that is owed it. First a team's guaranteed share: the first
    waiting lease within its team's share (``shares.reclaim_for``) takes back borrowed work
    first (other teams' leases on loan from a share or borrowed past their quota), then
    preemptible work, with a grace no longer than the share's stated time. Else the first
    waiting lease that outranks preemptible ones takes back preemptible leases.

    Then fair share's reclaim (``fair_share_reclaim``): a team below its share takes cards
    back from teams above theirs. Either way only the cards it needs, from the fewest leases
    (then the fewest cards; ties: fewest cards held, least elapsed work). A victim whose
    cards are all needed ends; one that keeps some gives back only those. Each victim gets
    its grace (at least its declared checkpoint time, within a share's stated time) and a
    warning; one that declared a checkpoint signal or command gets it through its backend
    after commit. A non-preemptible lease that is not on loan is never touched. A share's
    reclaim may also take a victim already marked for later (for a higher class, with the
    site's longer grace) and cut its grace to the share's time: else the team would wait for
    that longer grace.

    Runs inside the queue pass (the model is locked); *covering* is the model's guaranteed
    shares when the pass has read them. Returns the number of leases marked.
    """
    reclaim = shares.reclaim_for(card_model_id, now=now, covering=covering)
    if reclaim is not None:
        waiting, share = reclaim
        mine = ~Q(team_id=share.team_id)
        for victims in (
            shares.borrowed_work_q(share),
            shares.borrowed_work_q(share) | (Q(priority=Priority.PREEMPTIBLE) & mine),
        ):
            marked = _make_room(
                card_model_id, waiting, victims, now=now, within=share.within_minutes
            )
            if marked:
                return marked
    marked = fair_share_reclaim(card_model_id, now=now, covering=covering)
    if marked:
        return marked
    if not statements.rows("preemption.any", _any_preemptible, model=card_model_id):
        return 0  # nobody to take cards from (the common case: one statement)
    waiting = (
        Lease.objects.filter(
            card_model_id=card_model_id,
            status=LeaseStatus.QUEUED,
            priority_rank__gt=PREEMPTIBLE_RANK,
        )
        .order_by("-priority_rank", "submitted_at", "pk")
        .first()
    )
    if waiting is None or waiting.start_at > now:
        return 0
    return _make_room(card_model_id, waiting, Q(priority=Priority.PREEMPTIBLE), now=now)


def fair_share_reclaim(
    card_model_id: int, *, now: datetime, covering: list[shares.Share] | None = None
) -> int:
    """Fair share's reclaim (``fairshare.reclaim``, the rule the replay bench runs too): for
    each team below its share of the model's cards whose first waiting lease (service
    order) is planned to start more than ``RECLAIM_AFTER`` from now, running leases of teams
    above their share give cards back after their grace. Only leases that agreed to be
    requeued when preempted (their work resumes in a new lease) and of no higher class than
    the waiting one; a team never falls below its fair share nor its guaranteed share
    (*covering*). Off when the site's policy says so (``FairSharePolicy.reclaim``).

    One statement in the common case (no lease may give cards back). Returns the number of
    leases marked."""
    if not statements.rows(
        "preemption.reclaimable",
        _reclaimable,
        model=card_model_id,
        ran_since=now - fairshare.RECLAIM_MIN_RUN,
        left_until=now + fairshare.RECLAIM_MIN_LEFT,
    ):
        return 0
    if FairSharePolicy.objects.filter(pk=1, reclaim=False).exists():
        return 0  # the operators turned it off
    running = list(
        Lease.objects.filter(card_model_id=card_model_id, status__in=RUNNING_STATES).values_list(
            "pk", "team_id", "count", "activated_at", "end_at", "requeue", "priority_rank",
            "preempt_at",
        )
    )  # fmt: skip
    busy = sum(row[2] for row in running)
    held: dict[int, int] = defaultdict(int)
    for _pk, team, count, *_rest, marked_at in running:
        if marked_at is None:
            held[team] += count
    queued = Lease.objects.filter(card_model_id=card_model_id, status=LeaseStatus.QUEUED)
    waiting_teams = set(queued.order_by().values_list("team_id", flat=True).distinct())
    active = {t for t, n in held.items() if n} | waiting_teams
    weights = dict(FairShare.objects.filter(team_id__in=active).values_list("team_id", "weight"))
    pool = Card.objects.in_service().filter(card_model_id=card_model_id).count()
    share = fairshare.shares_of(pool, weights, active)
    below = [t for t in waiting_teams if held.get(t, 0) < share[t]]
    if not below:
        return 0  # every team with work waiting has its share
    first = _first_waiting_by_team(queued.filter(team_id__in=below))
    if covering is None:
        covering = shares.shares_covering(card_model_id)
    marked = 0
    for team in sorted(first, key=lambda t: (held.get(t, 0) / share[t], t)):
        waiting = first[team]
        if not _waits_long(waiting, now=now):
            continue
        victims = fairshare.reclaim(
            team=team,
            need=waiting.count - (pool - busy),
            pool=pool,
            held=held,
            weights=weights,
            waiting=waiting_teams,
            holdings=[
                fairshare.Holding(pk, v_team, count, started, end)
                for pk, v_team, count, started, end, requeue, rank, marked_at in running
                if requeue and marked_at is None and rank <= waiting.priority_rank and started
            ],
            now=now,
            floor={s.team_id: s.cards for s in covering},
        )
        ids = [v.lease_id for v in victims]
        if not ids or not _make_room(
            card_model_id, waiting, Q(pk__in=ids), now=now, why=PreemptWhy.FAIR_SHARE
        ):
            continue
        given = dict(
            Lease.objects.filter(pk__in=ids, preempt_at__isnull=False).values_list(
                "pk", "preempt_cards"
            )
        )
        marked += len(given)
        for v in victims:
            if v.lease_id in given:
                held[v.team] -= given[v.lease_id] or v.count
        running = [r for r in running if r[0] not in given]
    return marked


def _first_waiting_by_team(queued) -> dict[int, Lease]:
    """Each team's first lease of *queued* (waiting leases of one model) in service order
    (inside a team the fair-share factor is the same: class, then virtual submit time)."""
    first: dict[int, tuple] = {}
    fields = ("pk", "team_id", "priority_rank", "submitted_at", "duration", "count")
    for row in queued.values_list(*fields):
        pk, team, rank, submitted, duration, count = row
        key = service_key(rank=rank, submitted_at=submitted, duration=duration, count=count,
                          lease_id=pk, fair=fairshare.NO_USE)  # fmt: skip
        if team not in first or key < first[team][0]:
            first[team] = (key, pk)
    leases = Lease.objects.in_bulk([pk for _key, pk in first.values()])
    return {team: leases[pk] for team, (_key, pk) in first.items()}


def _waits_long(lease: Lease, *, now: datetime) -> bool:
    """Whether *lease* is planned to start more than ``RECLAIM_AFTER`` from now; one that
    joins in this pass has no plan yet: the earliest it could start counts (its plan is
    never sooner)."""
    start = lease.estimated_start
    if start is None:
        start = _earliest_alone(lease, now=now)
    return start is not None and start > now + fairshare.RECLAIM_AFTER


def _earliest_alone(lease: Lease, *, now: datetime) -> datetime | None:
    """The earliest *lease* could start around the cards held now, ahead of every other
    waiting lease: its planned start is never sooner (a lease that joins in this pass has
    none yet)."""
    cards = lease_card_slots(lease.card_model_id, now=now, requirements=lease.requirements)
    request = planner.Request(
        lease.pk, lease.count, lease.duration, max(lease.start_at, now), lease.same_node
    )
    return planner.earliest(cards, timeline_for(lease.card_model_id, now=now), request).start


def _reclaimable(model: int, ran_since: datetime, left_until: datetime):
    """A running lease of *model* that fair share's reclaim could take cards back from."""
    return Lease.objects.filter(
        card_model_id=model,
        status__in=RUNNING_STATES,
        requeue=True,
        preempt_at__isnull=True,
        activated_at__lte=ran_since,
        end_at__gte=left_until,
    ).values_list("pk")[:1]


def grace_for(lease: Lease, *, now: datetime, within: int | None = None) -> datetime:
    """When a preempted lease's grace ends: the site's grace, or the lease's declared
    checkpoint time if longer; never past a guaranteed share's stated time (*within*)."""
    grace = timedelta(minutes=settings.CARDPOOL["PREEMPT_GRACE_MINUTES"])
    if lease.checkpoint_seconds:
        grace = max(grace, timedelta(seconds=lease.checkpoint_seconds))
    if within is not None:
        grace = min(grace, timedelta(minutes=within))
    return now + grace


def _running(card_model_id: int, victims_q: Q, *, sooner_than: datetime | None = None):
    """The model's running leases matching *victims_q* not already being preempted, or (with
    *sooner_than*) being preempted only after it: a share's reclaim may take those back
    sooner."""
    marked = Q(preempt_at__isnull=True)
    if sooner_than is not None:
        marked |= Q(preempt_at__gt=sooner_than)
    return Lease.objects.filter(
        victims_q, marked, card_model_id=card_model_id, status__in=RUNNING_STATES
    )


def _any_preemptible(model: int):
    return _running(model, Q(priority=Priority.PREEMPTIBLE)).values_list("pk")[:1]


def _make_room(
    card_model_id: int,
    waiting: Lease,
    victims_q: Q,
    *,
    now: datetime,
    within: int | None = None,
    why: str = "",
) -> int:
    """Mark the fewest leases matching *victims_q* so *waiting* fits (see preemption_plan);
    *why*: the reason the holders are told (default: a share's when *within* is given, else
    a higher class's)."""
    why = why or (PreemptWhy.SHARE if within is not None else PreemptWhy.PRIORITY)
    # A lease another waiting lease already takes back after the share's stated time is a
    # victim too: its cards may be needed sooner (the grace it was given is cut short).
    sooner_than = None if within is None else now + timedelta(minutes=within)
    victims = list(
        _running(card_model_id, victims_q, sooner_than=sooner_than)
        .select_related("user__profile")
        .order_by("count", "-activated_at", "pk")
    )
    if not victims:
        return 0  # nobody to take cards from
    if Lease.objects.filter(
        preempted_for=waiting, status__in=RUNNING_STATES, preempt_at__isnull=False
    ).exists():
        return 0  # already being made room for
    cards = lease_card_slots(card_model_id, now=now, requirements=waiting.requirements)
    if planner.place(
        cards,
        timeline_for(card_model_id, now=now),
        waiting.count,
        now,
        now + waiting.duration,
        same_node=waiting.same_node,
    ):
        return 0  # it fits without ending anyone
    preempt_at = {v.pk: grace_for(v, now=now, within=within) for v in victims}
    held: dict[int, list[int]] = defaultdict(list)
    for lease_id, card_id in Allocation.objects.filter(
        lease__in=victims, start_at__lte=now, end_at__gt=now
    ).values_list("lease_id", "card_id"):
        held[lease_id].append(card_id)
    taken = take_back(
        cards,
        timeline_for(card_model_id, now=now),
        timeline_for(card_model_id, now=now, ending_now=frozenset(held)),
        {v.pk: sorted(held[v.pk]) for v in victims},
        count=waiting.count,
        same_node=waiting.same_node,
        start=now,
        end=max(preempt_at.values()) + waiting.duration,
    )
    if taken is None:
        return 0
    by_pk = {v.pk: v for v in victims}
    for lease_id, card_ids in taken.items():
        _mark(
            by_pk[lease_id], card_ids, held[lease_id], at=preempt_at[lease_id], waiting=waiting,
            now=now, why=why,
        )  # fmt: skip
    return len(taken)


def _mark(
    victim: Lease,
    card_ids: list[int],
    held: list[int],
    *,
    at: datetime,
    waiting: Lease,
    now: datetime,
    why: str,
) -> None:
    """Mark *victim* to give back *card_ids* (of the cards it *held*) at *at* for *waiting*,
    warn its holder, and have its checkpoint signal sent. A victim already marked for later
    (a share's reclaim cuts that short) keeps what it was giving back: all its cards, or
    those and *card_ids*, now at *at*."""
    before = victim.preempt_at
    if before is not None:
        if victim.preempt_cards is None:
            card_ids = held  # it was ending: it still does, sooner
        else:
            given = Allocation.objects.filter(lease_id=victim.pk, end_at=before)
            card_ids = sorted({*card_ids, *given.values_list("card_id", flat=True)})
    whole = len(card_ids) >= len(held)
    if not whole:
        # The cards taken back are free from *at*: their periods end then, so the planner,
        # the fast path and billing all see it; the lease keeps the rest.
        Allocation.objects.filter(lease_id=victim.pk, card_id__in=card_ids, end_at__gt=at).update(
            end_at=at
        )
    Lease.objects.filter(pk=victim.pk, preempt_at=before).update(
        preempt_at=at,
        preempt_cards=None if whole else len(card_ids),
        preempted_for=waiting,
        preempt_why=why,
    )
    event_record(
        victim.pk,
        kind="preemption_scheduled",
        at=now,
        data={
            "at": at.isoformat(),
            "for": waiting.pk,
            "cards": len(card_ids),
            "whole": whole,
            "reclaim": why == PreemptWhy.SHARE,  # a guaranteed share's
            "why": why,
        },
    )
    victim.refresh_from_db()
    preemption_warn(victim, now=now)
    if victim.checkpoint_signal or victim.checkpoint_command:
        # The job saves its state during the grace: the backend delivers the signal
        # (Slurm: scancel --signal; local: the node's agent) after commit.
        enqueue_after_commit("leasing.tasks.checkpoint_lease", victim.pk)


def take_back(
    cards: Sequence[planner.CardSlot],
    timeline: planner.Timeline,
    without_victims: planner.Timeline,
    held: dict[int, list[int]],
    *,
    count: int,
    same_node: bool,
    start: datetime,
    end: datetime,
) -> dict[int, list[int]] | None:
    """Pure: which cards to take back from which victims so *count* cards fit over
    [start, end): the fewest leases first, then the fewest cards; never a card more than the
    placement needs. *held* is each victim's cards, in the order victims are preferred;
    *timeline* has every booking, *without_victims* has the victims' taken out.

    Per place the request may use (each node when it must be on one node, else the pool):
    *need* = count − free cards there; the fewest leases that cover it are the ones with the
    most cards there (a prefix, largest first), so no subset search is needed.
    """
    usable = {c.card_id: c for c in cards if c.usable_until is None or c.usable_until >= end}
    free = [c for c in usable.values() if timeline.is_free(c.card_id, start, end)]
    takeable = {
        v: [c for c in ids if c in usable and without_victims.is_free(c, start, end)]
        for v, ids in held.items()
    }
    rank = {v: i for i, v in enumerate(held)}
    places: list[int | None] = sorted({c.node_id for c in usable.values()}) if same_node else [None]
    options = []
    for place in places:
        option = _take_back_at(place, free, takeable, usable, rank, count)
        if option is not None:
            options.append(option)
    for _key, plan, there in sorted(options, key=lambda o: o[0]):
        taken = [usable[c] for ids in plan.values() for c in ids]
        if planner.place([*there, *taken], without_victims, count, start, end, same_node=same_node):
            return plan
    return None


def _take_back_at(
    place: int | None,
    free: list[planner.CardSlot],
    takeable: dict[int, list[int]],
    usable: dict[int, planner.CardSlot],
    rank: dict[int, int],
    count: int,
) -> tuple[tuple, dict[int, list[int]], list[planner.CardSlot]] | None:
    """``take_back``'s option at one *place* (a node, or None: the pool): its sort key, the
    cards to take from each victim, and the free cards there; None when it cannot cover."""
    there = [c for c in free if place is None or c.node_id == place]
    need = count - len(there)
    pool = {
        v: [c for c in ids if place is None or usable[c].node_id == place]
        for v, ids in takeable.items()
    }
    ranked = sorted((v for v in pool if pool[v]), key=lambda v: (-len(pool[v]), rank[v]))
    chosen: list[int] = []
    covered = 0
    for v in ranked:
        if covered >= need:
            break
        chosen.append(v)
        covered += len(pool[v])
    if need <= 0 or covered < need:
        return None
    plan = _share(tuple(chosen), pool, need)
    if plan is None:
        return None
    return (len(plan), need, place or 0), plan, there


def _share(
    subset: tuple[int, ...], pool: dict[int, list[int]], need: int
) -> dict[int, list[int]] | None:
    """*need* cards from *pool*, at least one from every lease of *subset* (else a smaller
    subset would do), the first leases giving the most."""
    if need < len(subset) or any(not pool[v] for v in subset):
        return None
    if sum(len(pool[v]) for v in subset) < need:
        return None
    plan = {v: pool[v][:1] for v in subset}
    left = need - len(subset)
    for v in subset:
        extra = pool[v][1 : 1 + left]
        plan[v] += extra
        left -= len(extra)
    return plan


def preemption_warn(lease: Lease, *, now: datetime) -> bool:
    """Tell the holder, once per preemption, when and how many of their cards are taken back
    (the warning row and the notice are written together, or neither)."""
    if lease.preempt_at is None:
        return False
    nth = lease.events.filter(kind="preemption_scheduled").count()
    if lease.preempt_cards:
        taken = (
            Allocation.objects.filter(lease=lease, end_at=lease.preempt_at)
            .select_related("card__node")
            .order_by("card__node__hostname", "card__index")
        )
        message = "preemption_partial"
        params = {
            "why": lease.preempt_why or PreemptWhy.PRIORITY,
            "id": lease.pk,
            "n": lease.preempt_cards,
            "count": lease.count,
            "at": lease.preempt_at,
            "cards": [f"{a.card.node.hostname}:{a.card.index}" for a in taken],
        }
    else:
        message = "preemption"
        params = {
            "why": lease.preempt_why or PreemptWhy.PRIORITY,
            "id": lease.pk,
            "at": lease.preempt_at,
        }
    return warning_with_notice(
        lease,
        WarningKind.PREEMPTION,
        nth,
        now,
        lambda: notice_send(
            lease,
            kind=Kind.PREEMPTION_WARNING,
            message=message,
            params=params,
            key=f"lease:{lease.pk}:preemption:{nth}",
        ),
    )
