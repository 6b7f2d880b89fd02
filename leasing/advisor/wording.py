"""The advisor's sentences: why each option is where it is, and what to do when nothing
fits. Wording only; the ranking is ``leasing.advisor.ranking``, the choice ``recommend``."""

from __future__ import annotations

from datetime import datetime, timedelta

from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy, ngettext

from inventory.models import CardModel, Node
from leasing.advisor import ranking
from leasing.advisor.estimator import GB, Estimate, Task
from leasing.advisor.ranking import CARD_COUNTS, FAST_LINKS, NODE_COUNTS
from leasing.billing.prices import money

MEASURE = {
    Task.PRETRAINING: gettext_lazy("training speed"),
    Task.FULL_FINETUNE: gettext_lazy("training speed"),
    Task.INFERENCE: gettext_lazy("memory bandwidth"),
    Task.LORA: gettext_lazy("memory fit"),
    Task.QLORA: gettext_lazy("memory fit"),
    Task.RENDERING: gettext_lazy("rendering speed"),
}


def explain(
    est: Estimate,
    o,  # a recommend.Option
    position: int,
    duration: timedelta,
    now: datetime,
    start_at: datetime | None,
) -> str:
    """One sentence: the figures behind the option, its fit, when, cost, and its place."""
    model, shape = o.card_model, ranking.Shape(o.count, o.nodes)
    network, start, starts_now, cost, energy = (
        o.network,
        o.start,
        o.starts_now,
        o.cost,
        o.energy_cost,
    )
    per_card = est.per_card_bytes(shape.count) / GB
    headroom = 1 - per_card / float(model.memory_gb)
    details = [o.basis] if o.basis else []
    details += [
        _("fits with %(pct)s%% headroom (%(need)s of %(mem)s GB per card)")
        % {
            "pct": round(100 * headroom),
            "need": fmt_gb(per_card),
            "mem": fmt_gb(model.memory_gb),
        },
    ]
    if shape.count > 1 and o.efficiency is not None:
        details.append(
            _("about %(pct)s%% of the time computing, the rest exchanging gradients")
            % {"pct": round(100 * o.efficiency)}
        )
    elif (
        shape.count > 1
        and est.profile.task == Task.INFERENCE
        and model.interconnect_kind not in FAST_LINKS
    ):
        details.append(_("PCIe between the cards (enough for inference)"))
    if starts_now and start_at is None:
        details.append(_("free now"))
    else:
        details.append(_("free from %(time)s") % {"time": when(start, now)})
    if getattr(o, "off_peak", False):
        details.append(_("starts off-peak (off-peak price)"))
    details.append(
        _("%(cost)s for %(hours)s h") % {"cost": money(cost), "hours": hours_text(duration)}
    )
    if energy is not None:
        details.append(_("energy about %(cost)s") % {"cost": money(energy)})
    if o.missing:
        details.append(o.missing)
    where = ""
    if shape.nodes > 1:
        where = _(" across %(nodes)s nodes (%(per)s each, %(network)s)") % {
            "nodes": shape.nodes,
            "per": shape.per_node,
            "network": Node.Network(network).label if network in Node.Network.values else network,
        }
    if position == 1:
        why = _("Ranked first: the best balance of %(measure)s, cost and start time.") % {
            "measure": MEASURE[Task(est.profile.task)]
        }
    else:
        more = round(100 * (1 / o.cost_share - 1)) if o.cost_share else 0
        why = _("Ranked %(n)s: %(fit)s%% of the best %(measure)s; %(cost)s; %(start)s.") % {
            "n": position,
            "fit": round(100 * o.fit),
            "measure": MEASURE[Task(est.profile.task)],
            "cost": _("costs %(pct)s%% more than the cheapest") % {"pct": more}
            if more
            else _("the cheapest"),
            "start": _("free at the wanted time") if starts_now else _("starts later"),
        }
    return _("%(count)s × %(model)s%(where)s: %(details)s. %(why)s") % {
        "count": shape.count,
        "model": model.name,
        "where": where,
        "details": _("; ").join(details),
        "why": why,
    }


def shape_text(count: int, memory_gb, fast: bool) -> str:
    text = ngettext("one %(mem)s GB card", "%(n)s × %(mem)s GB cards", count) % {
        "n": count,
        "mem": fmt_gb(memory_gb),
    }
    if count > 1 and fast:
        text = _("%(cards)s with fast links") % {"cards": text}
    return text


SHORTFALLS_SHOWN = 2  # the closest; the rest are in the models left out


def message(est: Estimate, rec, shapes: list[tuple[int, CardModel]], now: datetime) -> str:
    """Empty when the best option is free at the wanted time; else what is wrong, plainly:
    when nothing fits, the closest models of the pool and what they would need, then the
    smaller methods that fit (*rec*: a ``recommend.Recommendation``). Only models the pool
    has are named."""
    options = rec.options
    if options and options[0].starts_now:
        return ""
    if options:
        soonest = options[0]
        text = shape_text(soonest.count, soonest.memory_gb, est.needs_fast_link)
        if soonest.across_nodes:
            text = _("%(cards)s across %(nodes)s nodes") % {"cards": text, "nodes": soonest.nodes}
        return _("Needs %(shape)s; none free before %(time)s.") % {
            "shape": text,
            "time": when(soonest.start, now),
        }
    problem = _nothing_fits(est, rec.shortfalls, shapes)
    if not rec.alternatives:
        return problem
    # one template, so that each language joins the two sentences its own way
    return _("%(problem)s Instead: %(methods)s.") % {
        "problem": problem,
        "methods": _("; ").join(a.sentence for a in rec.alternatives),
    }


def _nothing_fits(est: Estimate, shortfalls: list, shapes: list[tuple[int, CardModel]]) -> str:
    if shortfalls:
        return _("Nothing in the pool holds it now: %(needs)s.") % {
            "needs": _("; ").join(shortfall_text(s) for s in shortfalls[:SHORTFALLS_SHOWN])
        }
    if not shapes:
        return _(
            "Needs about %(gb)s GB per replica: more than %(n)s cards of any model in the "
            "catalogue hold with %(precision)s. Lower the precision, use LoRA or QLoRA, or "
            "shorten the sequence or the batch."
        ) % {
            "gb": fmt_gb(est.total_gb),
            "n": CARD_COUNTS[-1] * NODE_COUNTS[-1] if est.splits else 1,
            "precision": est.required_precision.upper(),
        }
    # Examples only from the pool: a model the pool does not have helps nobody here.
    in_pool = [s for s in shapes if getattr(s[1], "total", 0)]
    singles = [s for s in in_pool or shapes if s[0]]
    if singles:
        count, model = min(singles, key=lambda s: (s[0], s[1].memory_gb, s[1].price_per_hour))
    else:
        count, model = max(in_pool or shapes, key=lambda s: (s[1].memory_gb, -s[1].price_per_hour))
    if not in_pool:
        if not count:
            return _(
                "Needs more cards than one node holds; the pool has no cards that can take it."
            )
        return _("Needs %(shape)s; the pool has no such cards.") % {
            "shape": shape_text(count, model.memory_gb, est.needs_fast_link)
        }
    if not count:
        return _(
            "Needs more cards than one node holds (for example %(model)s across nodes); no "
            "such cards in the pool can take it now."
        ) % {"model": model.name}
    return _(
        "Needs %(shape)s (for example %(model)s); no such cards in the pool can take it now."
    ) % {
        "shape": shape_text(count, model.memory_gb, est.needs_fast_link),
        "model": model.name,
    }


def shortfall_text(s) -> str:
    """What a ``recommend.Shortfall`` needs, for the message: "A100: needs 3 nodes of 8 (24
    cards); the pool has 2"."""
    if s.nodes > 1:
        return _(
            "%(model)s needs %(nodes)s nodes of %(per)s (%(n)s cards), the pool has %(have)s"
        ) % {
            "model": s.card_model.name,
            "nodes": s.nodes,
            "per": s.per_node,
            "n": s.cards,
            "have": s.have,
        }
    return _("%(model)s needs %(n)s cards, the pool has %(have)s") % {
        "model": s.card_model.name,
        "n": s.cards,
        "have": s.have,
    }


def shortfall_reason(s) -> str:
    """The same, as the reason a model is left out."""
    if s.nodes > 1:
        return ngettext(
            "needs %(n)s cards across %(nodes)s nodes of %(per)s on one network; the pool has "
            "%(have)s such node",
            "needs %(n)s cards across %(nodes)s nodes of %(per)s on one network; the pool has "
            "%(have)s such nodes",
            s.have,
        ) % {"n": s.cards, "nodes": s.nodes, "per": s.per_node, "have": s.have}
    return _("needs %(n)s cards; the pool has %(total)s that can take it") % {
        "n": s.cards,
        "total": s.have,
    }


def method(profile, asked) -> str:
    """A smaller method's name: the task's (LoRA fine-tuning) or, for the same task, its
    weights (serving with INT8 weights)."""
    if profile.task != asked.task:
        return str(Task(profile.task).label)
    return _("Serving with %(precision)s weights") % {
        "precision": (profile.precision or "").upper()
    }


def alternative_text(alt, now: datetime) -> str:
    """ "QLoRA fine-tuning fits 1 × NVIDIA A100 80GB SXM now" (or from when)."""
    o = alt.option
    cards = _("%(count)s × %(model)s") % {"count": o.count, "model": o.card_model.name}
    if o.across_nodes:
        cards = _("%(cards)s across %(nodes)s nodes") % {"cards": cards, "nodes": o.nodes}
    if o.starts_now:
        return _("%(method)s fits %(cards)s now") % {"method": alt.method, "cards": cards}
    return _("%(method)s fits %(cards)s from %(time)s") % {
        "method": alt.method,
        "cards": cards,
        "time": when(o.start, now),
    }


def when(start: datetime, now: datetime) -> str:
    local = timezone.localtime(start)
    if local.date() == timezone.localtime(now).date():
        return local.strftime("%H:%M")
    return local.strftime("%Y-%m-%d %H:%M")


def hours_text(duration: timedelta) -> str:
    return f"{duration.total_seconds() / 3600:g}"


def fmt_gb(value) -> str:
    value = float(value)
    return f"{value:.0f}" if value >= 100 or value == int(value) else f"{value:.1f}"
