"""Which card models suit a task, ranked by what the task needs, each with a sentence saying
why it is where it is. Advice only: asking for a lease by task is
``leasing.lifecycle.requests.lease_request_by_profile``.

For a task profile, a duration and optional requirements (stack, region, vendor…; the one
declaration ``inventory.requirements``), every card model in the pool is checked against
the estimate (``leasing.advisor.estimator``):

1. requirements — the model ones (stack, vendor, memory, precision, interconnect) choose the
   models; the node ones (region, network, stack version) the cards;
2. graphics — rendering needs a graphics-capable card (the catalogue's ``graphics``);
3. precision — the spec sheet must list a figure for the precision the task computes in;
4. memory — the fewest cards (1, 2, 4 or 8, on one node) whose memory holds the replica with
   at least ``MIN_HEADROOM`` to spare; when no node is enough, a **plan across nodes**:
   the cards of ``NODE_COUNTS`` whole nodes of one network;
5. when — the planner says when the cards would be free (the queue counted; one batch of
   three queries for every model, ``scheduler.preview.lease_previews``);
6. cost — the one price rule (``billing.prices``), and the region's energy where known.

Then ``leasing.advisor.ranking`` scores each option by the task's figures, its cost and
when it starts (the formula is in docs/estimator.md). Every option that fits is returned;
the models left out come with the reason. When none fits, the answer says plainly what the
closest models of the pool would need (``Shortfall``: "needs 3 nodes of 8; the pool has 2")
and which smaller method fits instead (``Alternative``: LoRA or QLoRA for a full fine-tune,
QLoRA for LoRA, 8- or 4-bit weights for inference), each with its own best option.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from decimal import Decimal

from django.utils import timezone
from django.utils.translation import gettext as _

from inventory.models import Card, CardModel, Node, StackFamily
from inventory.requirements import model_q, nodes_meeting, stored
from inventory.selectors import count_per_row
from leasing.advisor import ranking, wording
from leasing.advisor.estimator import (
    GB,
    WEIGHT_BYTES,
    Estimate,
    EstimateError,
    Task,
    TaskProfile,
    estimate,
)
from leasing.advisor.ranking import CARD_COUNTS, FAST_LINKS, NODE_COUNTS
from leasing.billing import prices
from leasing.choices import Priority, Purpose
from leasing.models import Lease
from leasing.scheduler.offpeak import offpeak_start_for
from leasing.scheduler.preview import Ask, lease_previews
from leasing.scheduler.snapshot import card_slots_of
from portal.models import Membership

MIN_HEADROOM = 0.05  # of each card's memory left free: the estimate is an estimate
SHOWN_FIRST = 3  # the page shows this many options, the rest folded below
# lease_preview answers "now" for free cards; allow for the time the queries take.
NOW_SLACK = timedelta(seconds=5)
PRICE_HORIZON = timedelta(days=400)  # price changes announced up to this far ahead are quoted
# When nothing fits: the smaller methods of a task tried in its place, in this order.
SMALLER_METHODS = {
    Task.FULL_FINETUNE: (Task.LORA, Task.QLORA),
    Task.LORA: (Task.QLORA,),
}
SMALLER_WEIGHTS = ("int8", "int4")  # inference: the weights quantized

PURPOSE_FOR_TASK = {
    Task.PRETRAINING: Purpose.TRAINING,
    Task.FULL_FINETUNE: Purpose.FINE_TUNING,
    Task.LORA: Purpose.FINE_TUNING,
    Task.QLORA: Purpose.FINE_TUNING,
    Task.INFERENCE: Purpose.INFERENCE,
    Task.RENDERING: Purpose.RENDERING,
}


@dataclass(frozen=True)
class Option:
    """*count* cards of *card_model* (on *nodes* nodes) for the task: fit, when, cost."""

    card_model: CardModel
    count: int
    per_card_gb: float
    start: datetime
    starts_now: bool  # free at the wanted start: now, or start_at for a reservation
    cost: Decimal
    explanation: str
    nodes: int = 1
    network: str = ""  # the nodes' network, for a plan across nodes
    efficiency: float | None = None  # training on several cards: share of time computing
    energy_cost: Decimal | None = None
    fit: float = 0.0  # 0–1, over the best option's figure
    score: float = 0.0  # ranking.score: fit, cost and start weighed for the task
    cost_share: float = 1.0  # the cheapest option's cost (with energy) over this one's
    basis: str = ""  # the spec-sheet figures the fit rests on
    missing: str = ""  # figures the spec sheet does not publish
    off_peak: bool = False  # starts in an off-peak window (its tariff applies)
    price_per_hour: Decimal | None = None  # the price in force at its start (billing.prices)

    @property
    def memory_gb(self) -> float:
        return float(self.card_model.memory_gb)

    @property
    def headroom(self) -> float:
        """Share of each card's memory left free."""
        return 1 - self.per_card_gb / self.memory_gb

    @property
    def fast_link(self) -> bool:
        return self.card_model.interconnect_kind in FAST_LINKS

    @property
    def across_nodes(self) -> bool:
        return self.nodes > 1


@dataclass(frozen=True)
class LeftOut:
    """A card model in the pool that was not offered, and why."""

    card_model: CardModel
    reason: str


@dataclass(frozen=True)
class Shortfall:
    """A card model of the pool that would hold the task with more cards or nodes than the
    pool has: *cards* in all, on *nodes* nodes of *per_node* (one node: *per_node* = *cards*);
    *have*: the nodes (a plan across nodes) or the cards (one node) the pool has for it."""

    card_model: CardModel
    cards: int
    nodes: int
    per_node: int
    have: int

    @property
    def missing(self) -> int:
        """How far the pool is from it: nodes (across nodes) or cards (one node) short."""
        return self.nodes - self.have if self.nodes > 1 else self.cards - self.have


@dataclass(frozen=True)
class Alternative:
    """A smaller method of the task (*profile*) that fits the pool: its best *option*, and
    its recommendation (*rec*, for the request link)."""

    profile: TaskProfile
    method: str  # worded: "QLoRA fine-tuning", "Serving with INT8 weights"
    option: Option
    rec: Recommendation
    sentence: str = ""  # "QLoRA fine-tuning fits 1 × NVIDIA A100 80GB SXM now"


@dataclass
class Recommendation:
    """The estimate, every option that fits (best first), the models left out, and a plain
    message when none is good now; when none fits, the pool's shortfalls (closest first) and
    the smaller methods that fit."""

    estimate: Estimate
    duration: timedelta
    purpose: str
    requirements: dict = field(default_factory=dict)
    options: list[Option] = field(default_factory=list)
    left_out: list[LeftOut] = field(default_factory=list)
    message: str = ""
    shortfalls: list[Shortfall] = field(default_factory=list)
    alternatives: list[Alternative] = field(default_factory=list)

    @property
    def shown_first(self) -> list[Option]:
        return self.options[:SHOWN_FIRST]

    @property
    def folded(self) -> list[Option]:
        return self.options[SHOWN_FIRST:]

    def lease_requirements(self, option: Option) -> dict:
        """What a lease from *option* requires: the request's, and a plan's network."""
        out = dict(self.requirements)
        if option.across_nodes and option.network:
            out["network"] = option.network
        return out

    def request_params(self, option: Option) -> dict[str, str | int]:
        """The query string that pre-fills the request form with *option*."""
        minutes = int(self.duration.total_seconds() // 60)
        hours, rest = divmod(minutes, 60)
        params: dict[str, str | int] = {
            "card_model": option.card_model.slug,
            "count": option.count,
            "duration": hours if not rest else minutes,
            "unit": "hours" if not rest else "minutes",
            "purpose": self.purpose,
        }
        if option.across_nodes:
            params["same_node"] = "0"
        params["stack"] = ""  # the form's default stack is not the ranking's unless asked
        params.update({k: str(v) for k, v in self.lease_requirements(option).items()})
        return params


def cards_needed(est: Estimate, card_model: CardModel, counts=CARD_COUNTS) -> int | None:
    """The fewest of *counts* cards of *card_model* that hold one replica with headroom."""
    usable = float(card_model.memory_gb) * GB * (1 - MIN_HEADROOM)
    for count in counts if est.splits else (1,):
        if est.per_card_bytes(count) <= usable:
            return count
    return None


@dataclass
class _Pool:
    """What the pool offers the request: usable cards per model and node, and the nodes."""

    per_node: dict[int, Counter]  # model → node → usable cards (on allowed nodes)
    nodes: dict[int, tuple[str, int | None, Decimal | None]]  # node → network, Gbps, price/kWh
    slots: dict[int, list]  # model → its usable cards (``snapshot.card_slots_of``)
    allowed: frozenset[int] | None  # the nodes the requirements allow (None: any)


def recommend(
    *,
    profile: TaskProfile,
    duration: timedelta,
    start_at: datetime | None = None,
    priority: str = Priority.NORMAL,
    now: datetime | None = None,
    limit: int | None = None,
    team_id: int | None = None,
    requirements: dict | None = None,
    start_policy: str = "",
    smaller: bool = True,
) -> Recommendation:
    """Card models for *profile* over *duration*, best first; reads only, writes nothing.

    With an off-peak *start_policy* each option starts where the policy allows (the queue
    pass's rule) and is priced at the tariff in force then (the one price book). When no
    option fits and *smaller*, the smaller methods of the task are asked the same way
    (``smaller_profiles``) and those that fit are named."""

    if duration <= timedelta(0):
        raise ValueError("duration must be positive")
    now = now or timezone.now()
    est = estimate(profile)
    wanted_reqs = stored(requirements or {})
    rec = Recommendation(
        estimate=est,
        duration=duration,
        purpose=PURPOSE_FOR_TASK[Task(est.profile.task)],
        requirements=wanted_reqs,
    )
    # ``total``: cards in service (the free ones are the planner's to find, below)
    in_service = count_per_row(Card.objects.in_service(), "card_model")
    models = list(CardModel.objects.annotate(total=in_service).order_by("pk"))
    meeting = _models_meeting(wanted_reqs)
    allowed = nodes_meeting(wanted_reqs)
    shapes: list[tuple[int, CardModel]] = []  # what would do, pool or not: for the message
    checked: list[tuple[CardModel, int]] = []
    for model in models:
        count, reason = _check_model(est, model, meeting)
        if count is not None:
            shapes.append((count, model))
        if model.total == 0:
            continue  # in the catalogue only: not worth a line
        if reason:
            rec.left_out.append(LeftOut(model, reason))
        else:
            checked.append((model, count or 0))
    pool = _pool([m.pk for m, _c in checked], allowed, now)
    asks = _asks(rec, est, checked, pool)
    _rank(
        rec,
        est,
        [m for m, _c in checked if m.pk in asks],
        asks,
        pool,
        start_at,
        priority,
        now,
        team_id,
        start_policy,
    )
    if smaller and not rec.options:
        rec.alternatives = _smaller_that_fit(
            profile,
            duration=duration,
            start_at=start_at,
            priority=priority,
            now=now,
            team_id=team_id,
            requirements=requirements,
            start_policy=start_policy,
        )
    rec.message = wording.message(est, rec, shapes, now)
    if limit is not None:
        rec.options = rec.options[:limit]
    return rec


def _asks(
    rec: Recommendation, est: Estimate, checked: list[tuple[CardModel, int]], pool: _Pool
) -> dict[int, tuple[Ask, ranking.Shape, str]]:
    """What to ask the planner for each model the pool can hold (the others left out on
    *rec*, a shortfall also kept apart, closest first)."""
    asks: dict[int, tuple[Ask, ranking.Shape, str]] = {}
    for model, count in checked:
        planned = _shape_in_pool(est, model, count, pool)
        if isinstance(planned, Shortfall):
            rec.shortfalls.append(planned)
            rec.left_out.append(LeftOut(model, wording.shortfall_reason(planned)))
            continue
        if isinstance(planned, str):
            rec.left_out.append(LeftOut(model, planned))
            continue
        shape, network, nodes = planned
        asks[model.pk] = (Ask(model.pk, shape.count, shape.nodes == 1, nodes), shape, network)
    rec.shortfalls.sort(key=lambda s: (s.missing, s.cards, s.card_model.pk))
    return asks


def smaller_profiles(profile: TaskProfile) -> list[TaskProfile]:
    """The smaller methods to try when *profile* fits nowhere, in order: LoRA then QLoRA for
    a full fine-tune, QLoRA for LoRA, 8- then 4-bit weights for inference; the rest of the
    profile kept (a precision the method does not take falls back to its default)."""
    out = []
    for task in SMALLER_METHODS.get(profile.task, ()):
        for precision in (profile.precision, None):
            try:
                out.append(replace(profile, task=task, precision=precision))
                break
            except EstimateError:
                continue
    if profile.task == Task.INFERENCE:
        weights = WEIGHT_BYTES[profile.resolved().precision or "bf16"]
        out += [replace(profile, precision=p) for p in SMALLER_WEIGHTS if WEIGHT_BYTES[p] < weights]
    return out


def _smaller_that_fit(profile: TaskProfile, **asked) -> list[Alternative]:
    """The smaller methods of *profile* with an option in the pool, each with its best."""
    out = []
    for smaller in smaller_profiles(profile):
        rec = recommend(profile=smaller, smaller=False, **asked)
        if rec.options:
            alt = Alternative(smaller, wording.method(smaller, profile), rec.options[0], rec)
            out.append(replace(alt, sentence=wording.alternative_text(alt, asked["now"])))
    return out


def _models_meeting(requirements: dict) -> dict[str, tuple[object, set[int]]]:
    """Per model requirement in *requirements*: its value, and the ids of the models meeting it."""
    return {
        key: (value, set(CardModel.objects.filter(q).values_list("pk", flat=True)))
        for key, value in requirements.items()
        if (q := model_q({key: value}))
    }


def _check_model(
    est: Estimate, model: CardModel, meeting: dict[str, tuple[object, set[int]]]
) -> tuple[int | None, str]:
    """(cards needed on one node or 0 for "more than a node", "") when *model* can do the
    task, else (count or None, why not)."""
    unmet = [f"{key}={value}" for key, (value, ids) in meeting.items() if model.pk not in ids]
    if unmet:
        # not even an example in the message: the user ruled it out
        return None, _("does not meet the requirement %(what)s") % {"what": ", ".join(unmet)}
    count = cards_needed(est, model)
    if est.profile.task == Task.RENDERING and not model.graphics:
        return None, _("no graphics pipeline: rendering needs a graphics-capable card")
    if not model.supports(est.required_precision):
        return None, _("no %(precision)s figure on the spec sheet (read as unsupported)") % {
            "precision": est.required_precision.upper()
        }
    if count is None:
        if not est.splits:
            return None, _("too small: the task needs %(gb)s GB on one card") % {
                "gb": wording.fmt_gb(est.total_gb)
            }
        most = CARD_COUNTS[-1] * NODE_COUNTS[-1]
        if cards_needed(est, model, (most,)) is None:
            return None, _("too small: even %(n)s cards would need %(gb)s GB each") % {
                "n": most,
                "gb": wording.fmt_gb(est.per_card_bytes(most) / GB),
            }
        return 0, ""  # across nodes: the pool decides how
    return count, ""


def _pool(model_ids: list[int], allowed: frozenset[int] | None, now: datetime) -> _Pool:
    slots = card_slots_of(model_ids, now=now)
    per_node: dict[int, Counter] = defaultdict(Counter)
    for model_id, cards in slots.items():
        for card in cards:
            if allowed is None or card.node_id in allowed:
                per_node[model_id][card.node_id] += 1
    node_ids = {n for counts in per_node.values() for n in counts}
    nodes = {
        pk: (network, gbps, energy)
        for pk, network, gbps, energy in Node.objects.filter(pk__in=sorted(node_ids)).values_list(
            "pk", "network_kind", "network_gbps", "region__energy_price_kwh"
        )
    }
    return _Pool(per_node, nodes, slots, allowed)


def _shape_in_pool(
    est: Estimate, model: CardModel, count: int, pool: _Pool
) -> tuple[ranking.Shape, str, frozenset[int] | None] | Shortfall | str:
    """The shape to ask for (and its network and nodes), or what the pool lacks for it (a
    ``Shortfall``), or why it cannot hold it at all."""
    on_nodes = pool.per_node.get(model.pk, Counter())
    allowed = pool.allowed
    if count:
        if sum(on_nodes.values()) < count:
            return Shortfall(model, count, 1, count, sum(on_nodes.values()))
        return ranking.Shape(count), "", allowed
    # More than one node: whole nodes of one network, the most cards per node first.
    most = max(on_nodes.values(), default=0)
    per_node = max((c for c in CARD_COUNTS if c <= most), default=0)
    if not per_node:
        return _("needs more than one node of cards; the pool has none that can take it")
    need = cards_needed(est, model, [per_node * n for n in NODE_COUNTS])
    if need is None:
        return _("too small: even %(n)s nodes of %(per)s cards would not hold it") % {
            "n": NODE_COUNTS[-1],
            "per": per_node,
        }
    nodes_needed = need // per_node
    by_network: dict[str, list[int]] = defaultdict(list)
    for node, cards in on_nodes.items():
        if cards >= per_node:
            by_network[pool.nodes[node][0]].append(node)
    if not by_network or max(len(v) for v in by_network.values()) < nodes_needed:
        have = max((len(v) for v in by_network.values()), default=0)
        return Shortfall(model, need, nodes_needed, per_node, have)
    network, members = max(
        by_network.items(),
        key=lambda kv: (len(kv[1]) >= nodes_needed, min(pool.nodes[n][1] or 0 for n in kv[1])),
    )
    gbps = min((pool.nodes[n][1] or 10) for n in members)
    shape = ranking.Shape(need, nodes_needed, gbps)
    return shape, network, frozenset(node for node in on_nodes if pool.nodes[node][0] == network)


def _rank(
    rec: Recommendation,
    est: Estimate,
    models: list[CardModel],
    asks: dict[int, tuple[Ask, ranking.Shape, str]],
    pool: _Pool,
    start_at: datetime | None,
    priority: str,
    now: datetime,
    team_id: int | None,
    start_policy: str,
) -> None:
    """Preview, price, score and explain every option (in place on *rec*)."""
    duration = rec.duration
    wanted = start_at if start_at and start_at > now else now
    if start_policy:
        wanted = offpeak_start_for(start_policy, start=wanted, duration=duration)
    decisions = lease_previews(
        [a for a, _s, _n in asks.values()],
        duration=duration,
        start_at=start_at,
        priority=priority,
        purpose=PURPOSE_FOR_TASK[Task(est.profile.task)],
        start_policy=start_policy,
        now=now,
        cards=pool.slots,
        team_id=team_id,
    )
    books = prices.PriceBooks(team_id=team_id or 0, until=wanted + duration + PRICE_HORIZON)
    books.preload(models)
    hours = Decimal(duration.total_seconds()) / 3600
    rows = []
    for model in models:
        ask, shape, network = asks[model.pk]
        decision = decisions[model.pk]
        if decision.start is None:
            rec.left_out.append(
                LeftOut(
                    model,
                    _("%(n)s cards cannot be placed now (cards down or draining)")
                    % {"n": shape.count}
                    if shape.nodes > 1
                    else _("%(n)s cards cannot be placed on one node now (cards down or draining)")
                    % {"n": shape.count},
                )
            )
            continue
        cost = books.estimate(
            card_model=model,
            count=shape.count,
            start=decision.start,
            end=decision.start + duration,
            priority=priority,
        )
        energy = _energy(model, shape.count, hours, decision.card_ids, pool)
        fit = ranking.fit_of(est, model, shape)
        rows.append((model, shape, network, decision.start, cost, energy, fit))
    if not rows:
        return
    best_raw = max(r[6].raw for r in rows) or 1.0
    cheapest = min(r[4] + (r[5] or 0) for r in rows)
    options = []
    for model, shape, network, start, cost, energy, fit in rows:
        relative = fit.raw / best_raw
        starts_now = start <= wanted + NOW_SLACK
        start_f = ranking.start_factor(timedelta(0) if starts_now else start - wanted, duration)
        cost_f = ranking.cost_ratio(cheapest, cost + (energy or 0))
        options.append(
            Option(
                card_model=model,
                count=shape.count,
                per_card_gb=est.per_card_bytes(shape.count) / GB,
                start=start,
                starts_now=starts_now,
                cost=cost,
                explanation="",
                nodes=shape.nodes,
                network=network,
                efficiency=fit.efficiency,
                energy_cost=energy,
                fit=relative,
                score=ranking.score(est.profile.task, relative, cost_f, start_f),
                cost_share=cost_f,
                basis=fit.basis,
                missing=fit.missing,
                off_peak=books.for_model(model.pk).tariff_at(start) is not None,
                price_per_hour=books.for_model(model.pk).price_at(
                    start, prices.discount_for(priority)
                ),
            )
        )
    options.sort(key=lambda o: (-o.score, o.cost, o.card_model.pk))
    rec.options = [
        replace(o, explanation=wording.explain(est, o, position, duration, now, start_at))
        for position, o in enumerate(options, start=1)
    ]


def _energy(model: CardModel, count: int, hours: Decimal, card_ids, pool: _Pool) -> Decimal | None:
    """TDP × cards × hours at the energy price of the region the cards would be in."""
    if not model.tdp_w or not card_ids:
        return None
    where = {c.card_id: c.node_id for c in pool.slots.get(model.pk, [])}
    rates = [pool.nodes.get(where.get(c), ("", None, None))[2] for c in card_ids]
    if any(rate is None for rate in rates):
        return None
    price = max(rates)  # type: ignore[type-var]
    return (Decimal(model.tdp_w) / 1000 * count * hours * price).quantize(Decimal("0.01"))


# --- asking by task ---------------------------------------------------------------------


def priced_team_id(user) -> int | None:
    """The team whose prices an estimate for *user* quotes: their only team (with several or
    none, the list price book)."""
    ids = list(Membership.objects.filter(user=user).values_list("team_id", flat=True)[:2])
    return ids[0] if len(ids) == 1 else None


def default_stack(user) -> str:
    """The stack a request of *user* assumes until told otherwise: their profile's, else the
    stack of the card model of their last lease ("" when neither says)."""
    profile = getattr(user, "profile", None)
    if getattr(profile, "stack", ""):
        return profile.stack
    last = (
        Lease.objects.filter(user=user)
        .order_by("-submitted_at", "-pk")
        .values_list("card_model__stack_family", flat=True)
        .first()
    )
    return last if last and last != StackFamily.OTHER else ""
