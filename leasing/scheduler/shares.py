"""Guaranteed shares: cards of a model (or a family) always available to a team within a
stated time, lent to others while the team does not use them.

Like Kueue's cohorts (a ClusterQueue's nominal quota, lent to the cohort while idle and taken
back with ``reclaimWithinCohort``) and Slurm's QOS ``GrpTRES`` with preemption: a lease
placed on cards that another team's unused share needs is marked ``lent``; when that team
asks, within its share, and no card is free, the queue pass takes back borrowed work first
(leases ``lent`` from a share, or ``borrowed`` past a team's quota), then preemptible work,
with a grace no longer than the share's stated time (``preemption.preemption_plan``).

Only the reads and decisions live here; the queue pass and the request path write.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime

from django.db.models import Q, Sum

from inventory.models import CardModel
from leasing import statements
from leasing.choices import RUNNING_STATES, LeaseStatus
from leasing.models import GuaranteedShare, Lease
from leasing.scheduler.availability import available_cards
from leasing.scheduler.planner import Request


@dataclass(frozen=True)
class Share:
    """A guaranteed share as the scheduler sees it: its team, how many cards, over which
    card models, and the time within which the team gets them."""

    team_id: int
    cards: int
    within_minutes: int
    model_ids: frozenset[int]


_COLUMNS = ("team_id", "cards", "within_minutes", "card_model_id", "family")


def _covering(model: int):
    family_of = CardModel.objects.filter(pk=model).exclude(family="")
    scope = Q(card_model_id=model) | Q(family__in=family_of.values("family"))
    return GuaranteedShare.objects.filter(scope).values_list(*_COLUMNS)


def shares_covering(card_model_id: int, *, family: str | None = None) -> list[Share]:
    """The shares that a lease of *card_model_id* counts against (the model's own, and its
    family's). Give the model's *family* when known: one simple query when no share exists
    (the request path asks this for every placement)."""
    if family is None:  # the model's family, in the same statement, built once
        rows = statements.rows("shares.covering", _covering, model=card_model_id)
    else:
        scope = Q(card_model_id=card_model_id)
        if family:
            scope |= Q(family=family)
        rows = list(GuaranteedShare.objects.filter(scope).values_list(*_COLUMNS))
    if not rows:
        return []
    family = next((f for *_rest, f in rows if f), "")
    family_models = (
        frozenset(CardModel.objects.filter(family=family).values_list("pk", flat=True))
        if family
        else frozenset()
    )
    return [
        Share(team, cards, within, frozenset([model]) if model else family_models)
        for team, cards, within, model, _family in rows
    ]


def held(team_id: int, model_ids: frozenset[int]) -> int:
    """The cards the team holds now on these models (its running leases), whoever's share."""
    total = Lease.objects.filter(
        team_id=team_id, card_model_id__in=model_ids, status__in=RUNNING_STATES
    ).aggregate(n=Sum("count"))["n"]
    return total or 0


def unused(share: Share) -> int:
    """How many of the share's cards its team does not use now (lent to others meanwhile)."""
    return max(share.cards - held(share.team_id, share.model_ids), 0)


def lent_after_placement(
    *,
    team_id: int,
    card_model_id: int,
    now: datetime,
    placing: int = 0,
    family: str | None = None,
) -> bool:
    """Whether a lease of *team_id* placed on *card_model_id* sits on cards that other teams'
    unused shares need: fewer cards are free now (less *placing*, cards chosen but not yet
    written) than those shares still guarantee. Such a lease is ``lent`` and is taken back
    first when a share's team asks."""
    by_scope: dict[frozenset[int], int] = defaultdict(int)
    for share in shares_covering(card_model_id, family=family):
        if share.team_id != team_id:
            by_scope[share.model_ids] += unused(share)
    for model_ids, owed in by_scope.items():
        free = available_cards(now).filter(card_model_id__in=model_ids).count() - placing
        if owed and free < owed:
            return True
    return False


def reclaim_for(
    card_model_id: int, *, now: datetime, covering: list[Share] | None = None
) -> tuple[Lease, Share] | None:
    """The first waiting lease of the model (service order) that is within its team's
    guaranteed share — the team's running leases plus this one fit the share — and may start
    now; with the share that entitles it. None when nobody waiting is owed cards.
    *covering*: the model's shares, when the caller has them."""
    if covering is None:
        covering = shares_covering(card_model_id)
    shares = {s.team_id: s for s in covering}
    if not shares:
        return None
    for lease in (
        Lease.objects.filter(
            card_model_id=card_model_id,
            status=LeaseStatus.QUEUED,
            team_id__in=list(shares),
            start_at__lte=now,
        )
        .order_by("-priority_rank", "submitted_at", "pk")
        .select_related(None)
    ):
        share = shares[lease.team_id]
        if held(lease.team_id, share.model_ids) + lease.count <= share.cards:
            return lease, share
    return None


def borrowed_work_q(share: Share) -> Q:
    """Leases a share's team may take back first: other teams' work on loan (``lent`` from a
    share, or ``borrowed`` past their own quota)."""
    return (Q(lent=True) | Q(borrowed=True)) & ~Q(team_id=share.team_id)


def entitled_first(
    card_model_id: int, queue: list[Request], *, covering: list[Share] | None = None
) -> list[Request]:
    """The queue with the waiting leases that are within their team's guaranteed share moved
    to the front (in their service order), so the cards a reclaim frees go to the team that
    is owed them, not to whoever waited longer; the rest keep their order. Unchanged when the
    model has no shares. *covering*: the model's shares, when the caller has them."""
    if covering is None:
        covering = shares_covering(card_model_id)
    shares = {s.team_id: s for s in covering}
    if not shares or not queue:
        return queue
    teams = dict(
        Lease.objects.filter(
            pk__in=[r.lease_id for r in queue], team_id__in=list(shares)
        ).values_list("pk", "team_id")
    )
    if not teams:
        return queue
    used = {team: held(team, shares[team].model_ids) for team in set(teams.values())}
    first, rest = [], []
    for request in queue:
        team = teams.get(request.lease_id)
        if team is not None and used[team] + request.count <= shares[team].cards:
            used[team] += request.count
            first.append(request)
        else:
            rest.append(request)
    return first + rest if first else queue
