"""Which card models suit a task, ranked, each with a sentence saying why. Advice only:
asking for a lease by task is ``leasing.lifecycle.requests.lease_request_by_profile``.

For a task profile and a duration, every card model in the pool is checked against the
estimate (``leasing.advisor.estimator``):

1. memory — the fewest cards (1, 2, 4 or 8, on one node) whose memory holds the replica
   with at least ``MIN_HEADROOM`` to spare;
2. precision — the spec sheet must list a figure for the precision the task computes in
   (null means unsupported: the catalogue's rule);
3. links — training on more than one card needs a card-to-card link (NVLink, HCCS, xGMI,
   MLU-Link, vendor links); inference across cards is fine over PCIe;
4. when — ``scheduler.preview.lease_preview`` says when the cards would be free (the queue counted);
5. cost — price per card-hour × cards × hours.

Options free now come first, cheapest first; then the rest, soonest first. Queries are
bounded: one for the catalogue with its counts, then at most ``MAX_PREVIEWS`` previews.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal

from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import ngettext

from inventory.models import CardModel, InterconnectKind
from leasing.advisor.estimator import GB, Estimate, Task, TaskProfile, estimate
from leasing.billing import prices
from leasing.choices import Priority, Purpose
from leasing.scheduler.availability import card_models_with_counts
from leasing.scheduler.offpeak import offpeak_start_for
from leasing.scheduler.preview import lease_preview
from portal.models import Membership

MIN_HEADROOM = 0.05  # of each card's memory left free: the estimate is an estimate
CARD_COUNTS = (1, 2, 4, 8)  # tensor-parallel sizes divide the head count; one node holds 8
MAX_PREVIEWS = 10
FAST_LINKS = frozenset(
    {
        InterconnectKind.NVLINK,
        InterconnectKind.HCCS,
        InterconnectKind.XGMI,
        InterconnectKind.MLULINK,
        InterconnectKind.XLINK,
    }
)
# lease_preview answers "now" for free cards; allow for the time the queries take.
NOW_SLACK = timedelta(seconds=5)
PRICE_HORIZON = timedelta(days=400)  # price changes announced up to this far ahead are quoted

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
    """*count* cards of *card_model* for the task: how well they fit, when, at what cost."""

    card_model: CardModel
    count: int
    per_card_gb: float
    start: datetime
    starts_now: bool  # free at the wanted start: now, or start_at for a reservation
    cost: Decimal
    explanation: str
    off_peak: bool = False  # starts in an off-peak window (its tariff applies)

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


@dataclass(frozen=True)
class LeftOut:
    """A card model in the pool that was not offered, and why."""

    card_model: CardModel
    reason: str


@dataclass
class Recommendation:
    """The estimate, the ranked options, and a plain message when none is good now."""

    estimate: Estimate
    duration: timedelta
    purpose: str
    options: list[Option] = field(default_factory=list)
    left_out: list[LeftOut] = field(default_factory=list)
    message: str = ""

    def request_params(self, option: Option) -> dict[str, str | int]:
        """The query string that pre-fills the request form with *option*."""
        minutes = int(self.duration.total_seconds() // 60)
        hours, rest = divmod(minutes, 60)
        return {
            "card_model": option.card_model.slug,
            "count": option.count,
            "duration": hours if not rest else minutes,
            "unit": "hours" if not rest else "minutes",
            "purpose": self.purpose,
        }


def cards_needed(est: Estimate, card_model: CardModel) -> int | None:
    """The fewest cards of *card_model* that hold one replica with headroom, or None."""
    usable = float(card_model.memory_gb) * GB * (1 - MIN_HEADROOM)
    for count in CARD_COUNTS if est.splits else (1,):
        if est.per_card_bytes(count) <= usable:
            return count
    return None


def recommend(
    *,
    profile: TaskProfile,
    duration: timedelta,
    start_at: datetime | None = None,
    priority: str = Priority.NORMAL,
    now: datetime | None = None,
    limit: int = 5,
    team_id: int | None = None,
    start_policy: str = "",
) -> Recommendation:
    """Card models for *profile* over *duration*, best first; reads only, writes nothing.

    With an off-peak *start_policy* each option starts where the policy allows (the queue
    pass's rule) and is priced at the tariff in force then (the one price book)."""

    if duration <= timedelta(0):
        raise ValueError("duration must be positive")
    now = now or timezone.now()
    est = estimate(profile)
    rec = Recommendation(
        estimate=est, duration=duration, purpose=PURPOSE_FOR_TASK[Task(est.profile.task)]
    )
    shapes: list[tuple[int, CardModel]] = []  # what would do, pool or not: for the message
    candidates: list[tuple[CardModel, int]] = []
    for model in card_models_with_counts(now).order_by("pk"):
        count, reason = _check_model(est, model)
        if count is not None:
            shapes.append((count, model))
        if model.total == 0:
            continue  # in the catalogue only: not worth a line
        if count is not None and model.total < count:
            reason = _("needs %(n)s cards; the pool has %(total)s") % {
                "n": count,
                "total": model.total,
            }
        if reason:
            rec.left_out.append(LeftOut(model, reason))
        else:
            candidates.append((model, count or 1))

    wanted = start_at if start_at and start_at > now else now
    if start_policy:
        wanted = offpeak_start_for(start_policy, start=wanted, duration=duration)
    books = prices.PriceBooks(team_id=team_id or 0, until=wanted + duration + PRICE_HORIZON)
    books.preload(m for m, _count in candidates)
    candidates.sort(
        key=lambda mc: (_cost(books, mc[0], mc[1], wanted, duration, priority), mc[0].pk)
    )
    for model, count in candidates[:MAX_PREVIEWS]:
        start = lease_preview(
            card_model=model,
            count=count,
            duration=duration,
            start_at=start_at,
            same_node=True,
            priority=priority,
            start_policy=start_policy,
            now=now,
        )
        if start is None:
            rec.left_out.append(
                LeftOut(
                    model,
                    _("%(n)s cards cannot be placed on one node now (cards down or draining)")
                    % {"n": count},
                )
            )
            continue
        rec.options.append(
            _option(
                est,
                model,
                count,
                start,
                start <= wanted + NOW_SLACK,
                duration,
                now,
                start_at,
                cost=_cost(books, model, count, start, duration, priority),
                off_peak=books.for_model(model.pk).tariff_at(start) is not None,
            )
        )
    rec.options.sort(key=_rank)
    rec.message = _message(est, rec.options, shapes, now)
    rec.options = rec.options[:limit]
    return rec


def _check_model(est: Estimate, model: CardModel) -> tuple[int | None, str]:
    """(cards needed, "") when *model* can do the task, else (count or None, why not)."""
    count = cards_needed(est, model)
    if count is None:
        if not est.splits:
            return None, _("too small: the task needs %(gb)s GB on one card") % {
                "gb": _fmt_gb(est.total_gb)
            }
        most = CARD_COUNTS[-1]
        return None, _("too small: even %(n)s cards would need %(gb)s GB each") % {
            "n": most,
            "gb": _fmt_gb(est.per_card_bytes(most) / GB),
        }
    if not model.supports(est.required_precision):
        return None, _("no %(precision)s figure on the spec sheet (read as unsupported)") % {
            "precision": est.required_precision.upper()
        }
    if count > 1 and est.needs_fast_link and model.interconnect_kind not in FAST_LINKS:
        return None, _(
            "needs %(n)s cards, and training across cards needs NVLink-class links; this card "
            "has only %(link)s"
        ) % {"n": count, "link": InterconnectKind(model.interconnect_kind).label}
    return count, ""


def _cost(
    books: prices.PriceBooks,
    model: CardModel,
    count: int,
    start: datetime,
    duration: timedelta,
    priority: str,
) -> Decimal:
    """What the lease would be billed: the one price rule (the price book, team prices too)."""
    return books.estimate(
        card_model=model, count=count, start=start, end=start + duration, priority=priority
    )


def _rank(option: Option) -> tuple:
    if option.starts_now:
        return (0, option.cost, -option.headroom, option.card_model.pk)
    return (1, option.start, option.cost, -option.headroom, option.card_model.pk)


def _option(
    est: Estimate,
    model: CardModel,
    count: int,
    start: datetime,
    starts_now: bool,
    duration: timedelta,
    now: datetime,
    start_at: datetime | None,
    *,
    cost: Decimal,
    off_peak: bool = False,
) -> Option:
    per_card = est.per_card_bytes(count) / GB
    headroom = 1 - per_card / float(model.memory_gb)
    details = [
        _("fits with %(pct)s%% headroom (%(need)s of %(mem)s GB per card)")
        % {"pct": round(100 * headroom), "need": _fmt_gb(per_card), "mem": _fmt_gb(model.memory_gb)}
    ]
    if count > 1:
        link = InterconnectKind(model.interconnect_kind)
        if link in FAST_LINKS:
            details.append(_("%(link)s between the cards") % {"link": link.label})
        else:
            details.append(
                _("%(link)s between the cards (enough for inference)") % {"link": link.label}
            )
    if starts_now and start_at is None:
        details.append(_("free now"))
    else:
        details.append(_("free from %(time)s") % {"time": _when(start, now)})
    if off_peak:
        details.append(_("starts off-peak (off-peak price)"))
    details.append(_("¥%(cost)s for %(hours)s h") % {"cost": cost, "hours": _hours(duration)})
    explanation = _("%(count)s × %(model)s: %(details)s") % {
        "count": count,
        "model": model.name,
        "details": _("; ").join(details),
    }
    return Option(model, count, per_card, start, starts_now, cost, explanation, off_peak)


def _shape(count: int, memory_gb, fast: bool) -> str:
    text = ngettext("one %(mem)s GB card", "%(n)s × %(mem)s GB cards", count) % {
        "n": count,
        "mem": _fmt_gb(memory_gb),
    }
    if count > 1 and fast:
        text = _("%(cards)s with fast links") % {"cards": text}
    return text


def _message(
    est: Estimate, options: list[Option], shapes: list[tuple[int, CardModel]], now: datetime
) -> str:
    """Empty when the best option is free at the wanted time; else what is wrong, plainly."""
    if options and options[0].starts_now:
        return ""
    if options:
        soonest = options[0]
        return _("Needs %(shape)s; none free before %(time)s.") % {
            "shape": _shape(soonest.count, soonest.memory_gb, est.needs_fast_link),
            "time": _when(soonest.start, now),
        }
    if not shapes:
        return _(
            "Needs about %(gb)s GB per replica: more than %(n)s cards of any model in the "
            "catalogue hold with %(precision)s. Lower the precision, use LoRA or QLoRA, or "
            "shorten the sequence or the batch."
        ) % {
            "gb": _fmt_gb(est.total_gb),
            "n": CARD_COUNTS[-1] if est.splits else 1,
            "precision": est.required_precision.upper(),
        }
    count, model = min(shapes, key=lambda s: (s[0], s[1].memory_gb, s[1].price_per_hour))
    return _(
        "Needs %(shape)s (for example %(model)s); no such cards in the pool can take it now."
    ) % {
        "shape": _shape(count, model.memory_gb, est.needs_fast_link),
        "model": model.name,
    }


def _when(start: datetime, now: datetime) -> str:
    local = timezone.localtime(start)
    if local.date() == timezone.localtime(now).date():
        return local.strftime("%H:%M")
    return local.strftime("%Y-%m-%d %H:%M")


def _hours(duration: timedelta) -> str:
    return f"{duration.total_seconds() / 3600:g}"


def _fmt_gb(value) -> str:
    value = float(value)
    return f"{value:.0f}" if value >= 100 or value == int(value) else f"{value:.1f}"


# --- asking by task ---------------------------------------------------------------------


def priced_team_id(user) -> int | None:
    """The team whose prices an estimate for *user* quotes: their only team (with several or
    none, the list price book)."""
    ids = list(Membership.objects.filter(user=user).values_list("team_id", flat=True)[:2])
    return ids[0] if len(ids) == 1 else None
