"""Fair share between teams, in the database: recomputing the factors at fixed times, and the
operators' settings (a team's weight, the half-life, how often). The formula is
``scheduler.fairshare``'s; the queue reads the stored factors (``snapshot.waiting_of``).

A recomputation that changes a factor moves the plan's version of every card model with a
queue (``PlanVersion``: no kept picture or shared step is used with the old keys), in one
transaction. A queue whose order the new factors change (one team passed another) is planned
again from the start (``run.replan``, bounded by the join budget; the rest is marked stale for
the refresh): no stored plan keeps the old order. A queue whose order they keep keeps every
stored plan (each depends only on the order and the timeline); the one stored key, the
stale mark's (``QueueMark``: it carries a factor), is rewritten with the new factor, so a
request joining later is compared with keys of one recomputation only (``order_kept``).
"""

from __future__ import annotations

import math
from datetime import datetime, timedelta

from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.db.models import Count, F
from django.utils import timezone
from django.utils.translation import gettext as _

from inventory.models import Card, CardModel
from leasing.billing.prices import PriceBook
from leasing.choices import LeaseStatus
from leasing.locking import lock_card_models
from leasing.models import Allocation, FairShare, FairSharePolicy, Lease, PlanVersion, QueueMark
from leasing.scheduler import fairshare, moves
from leasing.scheduler.eta import told_basis, told_start, virtual_submit
from leasing.scheduler.queueplan import service_key
from leasing.scheduler.run import replan
from portal.audit import audit
from portal.models import Team
from portal.permissions import is_operator

# Use older than this many half-lives counts less than a thousandth: not read.
HORIZON_HALF_LIVES = 10
WEIGHT_MAX = 1_000_000.0
HALF_LIFE_MAX_HOURS = 24 * 365
EVERY_MAX_MINUTES = 24 * 60


def half_life(policy: FairSharePolicy) -> timedelta:
    return timedelta(hours=policy.half_life_hours)


def card_prices(now: datetime) -> dict[int, float]:
    """Each card model's list price per card-hour in force at *now* (``PriceBook``: no team's
    own price, no off-peak tariff): what one hour of that card weighs in a team's use. A
    model priced at nothing weighs 1."""
    out = {}
    for model in CardModel.objects.all():
        price = float(PriceBook.load(card_model=model, team_id=None, until=now).list_price_at(now))
        out[model.pk] = price if price > 0 else 1.0
    return out


def use_by_team(*, now: datetime, half: timedelta, prices=None) -> dict[int, float]:
    """Each team's decayed, price-weighted card-hours up to *now* (``fairshare.decayed``),
    from the allocations (cut where a lease ended early: what it held); *prices*: the
    models' (``card_prices``), read when not given."""
    since = now - half * HORIZON_HALF_LIVES
    prices = card_prices(now) if prices is None else prices
    rows = (
        Allocation.objects.filter(start_at__lt=now, end_at__gt=since)
        .values_list("lease__team_id", "card__card_model_id", "start_at", "end_at")
        .annotate(n=Count("pk"))
        .order_by()
    )
    use: dict[int, float] = {}
    for team_id, model_id, start, end, n in rows:
        weight = n * prices.get(model_id, 1.0)
        use[team_id] = use.get(team_id, 0.0) + weight * fairshare.decayed(start, end, now, half)
    return use


def demand_by_team(*, now: datetime, prices: dict[int, float]) -> dict[int, float]:
    """Each team's recent demand (``fairshare.ahead``): the card-hours its leases asked for,
    price-weighted and decayed with ``ARRIVALS_HALF_LIFE`` from when each was submitted, per
    hour, over the pool (every card in service, price-weighted). Two queries."""
    pool = sum(
        n * prices.get(model_id, 1.0)
        for model_id, n in Card.objects.in_service()
        .values_list("card_model_id")
        .annotate(n=Count("pk"))
        .order_by()
    )
    if not pool:
        return {}
    half = fairshare.ARRIVALS_HALF_LIFE
    rows = Lease.objects.filter(
        submitted_at__gt=now - half * HORIZON_HALF_LIVES, submitted_at__lte=now
    ).values_list("team_id", "card_model_id", "count", "duration", "submitted_at")
    asked: dict[int, float] = {}
    for team_id, model_id, count, duration, submitted in rows:
        card_hours = count * duration / timedelta(hours=1) * prices.get(model_id, 1.0)
        asked[team_id] = asked.get(team_id, 0.0) + fairshare.decay(
            card_hours, now - submitted, half
        )
    per_hour = math.log(2) / (half / timedelta(hours=1))
    return {team: v * per_hour / pool for team, v in asked.items()}


def order_kept(card_model_id: int, before: dict, after: dict) -> bool:
    """Whether the model's queue keeps its order when the teams' factors go from *before* to
    *after* (team id -> factor; a team missing has ``NO_USE``), the stale mark's lease
    counted among the waiting. If so the mark is rewritten with its team's new factor (the
    caller holds the model's lock) and True: no stored plan changes. False: someone passes
    someone (the queue must be planned again)."""
    rows = Lease.objects.filter(card_model_id=card_model_id, status=LeaseStatus.QUEUED)
    items = []
    for pk, team, rank, submitted, duration, count in rows.values_list(
        "pk", "team_id", "priority_rank", "submitted_at", "duration", "count"
    ):
        old, new = (
            service_key(
                rank=rank,
                submitted_at=submitted,
                duration=duration,
                count=count,
                lease_id=pk,
                fair=factors.get(team, fairshare.NO_USE),
            )  # fmt: skip
            for factors in (before, after)
        )
        items.append((old, new))
    mark = QueueMark.objects.filter(card_model_id=card_model_id).first()
    if mark is not None:
        found = Lease.objects.filter(pk=mark.lease_id_after).values_list("team_id", flat=True)
        if not found:
            return False  # its team is unknown: no new key for it
        fair = after.get(found[0], fairshare.NO_USE)
        items.append((mark.key, (mark.key[0], -fair, *mark.key[2:])))
    items.sort(key=lambda kk: kk[0])
    # (the mark is a lease's key: it may equal a waiting lease's, before and after)
    if not all(a[1] <= b[1] for a, b in zip(items, items[1:], strict=False)):
        return False
    if mark is not None and mark.key[1] != -fair:
        QueueMark.objects.filter(card_model_id=card_model_id).update(fair=fair)
    return True


def recompute(*, now: datetime | None = None) -> bool:
    """Recompute every team's use and factor; when a factor changed, move the plan's version
    of every model with a queue and plan again those whose order changed (see the module).
    True when a factor changed."""
    now = now or timezone.now()
    policy = FairSharePolicy.current()
    prices = card_prices(now)
    use = use_by_team(now=now, half=half_life(policy), prices=prices)
    demand = demand_by_team(now=now, prices=prices)
    rows = {r.team_id: r for r in FairShare.objects.all()}
    weights = {
        t: rows[t].weight if t in rows else 1.0 for t in Team.objects.values_list("pk", flat=True)
    }
    found = fairshare.factors(use, weights)
    ahead = fairshare.ahead(demand, weights)
    before = {t: rows[t].factor for t in rows}
    ahead_before = {t: rows[t].ahead for t in rows}
    changed = any(before.get(t, fairshare.NO_USE) != factor for t, factor in found.items())
    ahead_moved = [t for t, a in ahead.items() if a != ahead_before.get(t, 0.0)]
    with transaction.atomic():
        queued = Lease.objects.filter(status=LeaseStatus.QUEUED).values_list(
            "card_model_id", flat=True
        )
        models = lock_card_models(queued.distinct()) if changed or ahead_moved else []
        fresh, kept = [], []
        for team_id, factor in found.items():
            row = rows.get(team_id) or FairShare(team_id=team_id)
            row.use, row.factor, row.computed_at = round(use.get(team_id, 0.0), 6), factor, now
            row.ahead = ahead[team_id]
            (kept if team_id in rows else fresh).append(row)
        FairShare.objects.bulk_update(
            kept, ["use", "factor", "ahead", "computed_at"], batch_size=500
        )
        FairShare.objects.bulk_create(fresh, batch_size=500)
        FairSharePolicy.objects.filter(pk=policy.pk).update(computed_at=now)
        with moves.because("fair_share"):
            if changed:
                # the keys changed: no kept picture or shared step of the old order is used
                PlanVersion.objects.filter(card_model_id__in=models).update(
                    version=F("version") + 1
                )
                for model_id in models:
                    if not order_kept(model_id, before, found):
                        replan(model_id, now=now)
            _told_moves(ahead_moved, ahead_before, ahead, now=now)
    return changed


def _told_moves(teams: list[int], before: dict, after: dict, *, now: datetime) -> None:
    """The starts told to the queued leases of *teams*, whose work ahead went from *before*
    to *after*, moved with it (``eta.told_start``): told like any move (``moves``)."""
    if not teams:
        return
    rows = Lease.objects.filter(
        status=LeaseStatus.QUEUED, team_id__in=teams, estimated_start__isnull=False
    ).values_list("pk", "team_id", "submitted_at", "duration", "count", "estimated_start")
    moved = []
    for pk, team_id, submitted, duration, count, planned in rows:
        virtual = virtual_submit(submitted, duration, count)
        old, new = (
            told_start(planned, virtual_at=virtual, now=now, ahead=a.get(team_id, 0.0))
            for a in (before, after)
        )
        basis = told_basis(planned, virtual_at=virtual, ahead=after.get(team_id, 0.0))
        moved.append((pk, old, new, basis))
    moves.estimates_moved(moved, now=now)


def recompute_if_due(*, now: datetime | None = None) -> bool:
    """Recompute at the policy's fixed times (``fairshare.due``); False when not due."""
    now = now or timezone.now()
    policy = FairSharePolicy.current()
    if not fairshare.due(policy.computed_at, now, timedelta(minutes=policy.every_minutes)):
        return False
    recompute(now=now)
    return True


# --- what a team page shows --------------------------------------------------------------


def team_standing(team: Team) -> dict:
    """The team's share (its weight, and its fraction of every team's), its recent use (its
    fraction of every team's decayed use), its factor and the work ahead of it, as last
    recomputed. Two queries."""
    rows = Team.objects.values_list(
        "pk",
        "fair_share__weight",
        "fair_share__use",
        "fair_share__factor",
        "fair_share__ahead",
        "fair_share__computed_at",
    )
    total_weight = total_use = 0.0
    weight, use, factor, ahead, computed_at = 1.0, 0.0, fairshare.NO_USE, 0.0, None
    for pk, w, u, f, a, at in rows:
        w = 1.0 if w is None else w
        total_weight += w
        total_use += u or 0.0
        if pk == team.pk:
            weight, use, ahead, computed_at = w, u or 0.0, a or 0.0, at
            factor = fairshare.NO_USE if f is None else f
    half = FairSharePolicy.objects.filter(pk=1).values_list("half_life_hours", flat=True).first()
    return {
        "weight": weight,
        "share": weight / total_weight if total_weight else 0.0,
        "use": use,
        "use_fraction": use / total_use if total_use else 0.0,
        "factor": factor,
        "ahead": ahead,
        "computed_at": computed_at,
        "half_life_hours": half if half is not None else fairshare.HALF_LIFE / timedelta(hours=1),
    }


# --- operators' settings -----------------------------------------------------------------


def _operators_only(user) -> None:
    if not is_operator(user):
        raise PermissionDenied(_("Only operators set fair shares."))


def weight_set(*, user, team: Team, weight) -> FairShare:
    """Set *team*'s share weight (> 0); operators only. Takes effect at the next
    recomputation (the factors, and so the queue's order, change only then)."""
    _operators_only(user)
    try:
        weight = float(weight)
    except (TypeError, ValueError):
        raise ValidationError({"weight": [_("Give the weight as a number.")]}) from None
    if not (math.isfinite(weight) and 0 < weight <= WEIGHT_MAX):
        raise ValidationError(
            {
                "weight": [
                    _("The weight must be above 0 and at most %(max)s.") % {"max": int(WEIGHT_MAX)}
                ]
            }
        )
    with transaction.atomic():
        row, _created = FairShare.objects.update_or_create(team=team, defaults={"weight": weight})
        audit(actor=user, action="fair_share_set", target=str(team), weight=weight)
    return row


def policy_set(*, user, half_life_hours=None, every_minutes=None, reclaim=None) -> FairSharePolicy:
    """Change the half-life of use (hours, > 0), the time between recomputations (minutes,
    1…1440) or whether a team below its share takes cards back (``reclaim``, a boolean);
    operators only. The next recomputation (the next queue pass, for ``reclaim``) uses them."""
    _operators_only(user)
    errors = {}
    changes = {}
    if half_life_hours is not None:
        try:
            value = float(half_life_hours)
        except (TypeError, ValueError):
            value = float("nan")
        if not (math.isfinite(value) and 0 < value <= HALF_LIFE_MAX_HOURS):
            errors["half_life_hours"] = [
                _("The half-life must be above 0 and at most %(max)s hours.")
                % {"max": HALF_LIFE_MAX_HOURS}
            ]
        changes["half_life_hours"] = value
    if every_minutes is not None:
        if (
            isinstance(every_minutes, bool)
            or not isinstance(every_minutes, int)
            or not (1 <= every_minutes <= EVERY_MAX_MINUTES)
        ):
            errors["every_minutes"] = [
                _("Recompute every 1 to %(max)s minutes (a whole number).")
                % {"max": EVERY_MAX_MINUTES}
            ]
        changes["every_minutes"] = every_minutes
    if reclaim is not None:
        if not isinstance(reclaim, bool):
            errors["reclaim"] = [_("Say true or false.")]
        changes["reclaim"] = reclaim
    if errors:
        raise ValidationError(errors)
    with transaction.atomic():
        policy = FairSharePolicy.current()
        for name, value in changes.items():
            setattr(policy, name, value)
        policy.save()
        audit(actor=user, action="fair_share_policy_set", target="fair share", **changes)
    return policy
