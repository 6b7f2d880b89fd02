"""The one price rule: what a card-hour costs a team at a moment, and how a cost is rounded.

A team's override (``TeamPrice``) wins over the card model's list price (``Price``) in force
then; with neither, the card model's ``price_per_hour``. Inside an off-peak window
(``OffPeakWindow``, by weekday and hour in the site time zone) the price is multiplied by the
window's factor (the tariff). A preemptible lease pays the discounted price. Bills (``usage``), accrued usage (``accrued``), money budgets and the team
page's cost (``teams``), the request preview and the advisor's estimates all price through
``PriceBook`` (DESIGN invariant 10): nothing else reads ``CardModel.price_per_hour`` to put a
price on card-time.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation
from types import SimpleNamespace

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from inventory.models import CardModel
from leasing.choices import Priority
from leasing.models import OffPeakWindow, Price, TeamPrice
from leasing.periods import Span, floor_minute, offpeak_cuts, offpeak_factor
from portal.models import Membership


def currency() -> str:
    """The site's currency code (``CARDPOOL_CURRENCY``), named wherever money is shown."""
    return settings.CARDPOOL_CURRENCY


def money(amount, places: int = 2) -> str:
    """An amount as a person reads it, in the configured currency: ``CNY 1,344.00``. The one
    way money is written (the ``{% money %}`` tag, messages, charts); no symbol is assumed."""
    if amount is None or amount == "":
        return "—"
    value = Decimal(str(amount)).quantize(Decimal(1).scaleb(-places), rounding=ROUND_HALF_UP)
    return f"{currency()} {value:,}"


CENT = Decimal("0.01")
PRICE_PLACES = Decimal("0.0001")
HOUR_SECONDS = Decimal(3600)


def preemptible_discount() -> Decimal:
    """The factor a preemptible lease's price is multiplied by (setting, 0…1)."""
    raw = settings.CARDPOOL.get("PREEMPTIBLE_DISCOUNT", "0.5")
    try:
        value = Decimal(str(raw))
    except InvalidOperation as exc:
        raise ImproperlyConfigured(
            f"CARDPOOL_PREEMPTIBLE_DISCOUNT is not a number: {raw!r}"
        ) from exc
    if not Decimal(0) <= value <= Decimal(1):
        raise ImproperlyConfigured(f"CARDPOOL_PREEMPTIBLE_DISCOUNT must be 0…1, not {raw!r}")
    return value


def discount_for(priority: str) -> Decimal:
    """The factor a lease of *priority* pays (the preemptible discount, or 1)."""
    return preemptible_discount() if priority == Priority.PREEMPTIBLE else Decimal(1)


def record_cost(card_minutes: int, price: Decimal) -> Decimal:
    """The one rounding rule: a record's cost to the cent, half up."""
    return (Decimal(card_minutes) * price / 60).quantize(CENT, rounding=ROUND_HALF_UP)


@dataclass
class PriceBook:
    """The prices a team pays for one card model over time (list, team override, default)."""

    default: Decimal
    list_prices: list[tuple[datetime, Decimal]]  # sorted by effective_from
    team_prices: list[tuple[datetime, Decimal]]
    offpeak: list[Span] = field(default_factory=list)  # the off-peak windows (tariff)

    @classmethod
    def load(cls, *, card_model, team_id: int, until: datetime) -> PriceBook:
        def rows(qs):
            return [
                (floor_minute(at), price)
                for at, price in qs.filter(effective_from__lt=until)
                .order_by("effective_from")
                .values_list("effective_from", "price_per_hour")
            ]

        return cls(
            default=card_model.price_per_hour,
            list_prices=rows(Price.objects.filter(card_model=card_model)),
            team_prices=rows(TeamPrice.objects.filter(card_model=card_model, team_id=team_id)),
            offpeak=OffPeakWindow.spans(),
        )

    @classmethod
    def load_many(cls, *, leases, until: datetime) -> dict[tuple[int, int], PriceBook]:
        """The books of many (card model, team) pairs in two queries, keyed by
        ``(card_model_id, team_id)``; *leases* carry ``card_model`` (loaded) and ``team_id``."""
        models = {lease.card_model_id: lease.card_model for lease in leases}
        teams = {lease.team_id for lease in leases}
        list_rows: dict[int, list] = {}
        team_rows: dict[tuple[int, int], list] = {}
        for model, at, price in (
            Price.objects.filter(card_model_id__in=models, effective_from__lt=until)
            .order_by("effective_from")
            .values_list("card_model_id", "effective_from", "price_per_hour")
        ):
            list_rows.setdefault(model, []).append((floor_minute(at), price))
        for model, team, at, price in (
            TeamPrice.objects.filter(
                card_model_id__in=models, team_id__in=teams, effective_from__lt=until
            )
            .order_by("effective_from")
            .values_list("card_model_id", "team_id", "effective_from", "price_per_hour")
        ):
            team_rows.setdefault((model, team), []).append((floor_minute(at), price))
        offpeak = OffPeakWindow.spans()
        return {
            (lease.card_model_id, lease.team_id): cls(
                default=models[lease.card_model_id].price_per_hour,
                list_prices=list_rows.get(lease.card_model_id, []),
                team_prices=team_rows.get((lease.card_model_id, lease.team_id), []),
                offpeak=offpeak,
            )
            for lease in leases
        }

    @staticmethod
    def _at(prices: list[tuple[datetime, Decimal]], t: datetime) -> Decimal | None:
        i = bisect_right([at for at, _ in prices], t)
        return prices[i - 1][1] if i else None

    def list_price_at(self, t: datetime) -> Decimal:
        """The price in force at *t*: a team override wins over the list price."""
        for prices in (self.team_prices, self.list_prices):
            found = self._at(prices, t)
            if found is not None:
                return found
        return self.default

    def team_price_at(self, t: datetime) -> Decimal | None:
        """The team's own price in force at *t*, or None (a page says whose price it shows)."""
        return self._at(self.team_prices, t)

    def tariff_at(self, t: datetime) -> Decimal | None:
        """The off-peak factor in force at *t*, or None at peak time."""
        return offpeak_factor(t, self.offpeak) if self.offpeak else None

    def changes(self, lo: datetime, hi: datetime) -> list[datetime]:
        """Every moment in (lo, hi) where the price may change: a new list or team price, an
        off-peak window's start or end."""
        return sorted(
            {
                *(at for at, _ in self.list_prices + self.team_prices if lo < at < hi),
                *offpeak_cuts(lo, hi, self.offpeak),
            }
        )

    def price_at(self, t: datetime, discount: Decimal = Decimal(1)) -> Decimal:
        """The price per card-hour charged at *t*: the price in force × the off-peak tariff
        (if any) × discount, to 4 places."""
        tariff = self.tariff_at(t)
        factor = discount if tariff is None else tariff * discount
        return (self.list_price_at(t) * factor).quantize(PRICE_PLACES, rounding=ROUND_HALF_UP)

    def cost(
        self, *, count: int, start: datetime, end: datetime, discount: Decimal = Decimal(1)
    ) -> Decimal:
        """What *count* cards over [start, end) cost at the prices in force then (unrounded:
        budgets add many of these; round the total with ``rounded``)."""
        if end <= start:
            return Decimal(0)
        cuts = [start, *self.changes(start, end), end]
        return sum(
            (
                count * Decimal((b - a).total_seconds()) / HOUR_SECONDS * self.price_at(a, discount)
                for a, b in zip(cuts, cuts[1:], strict=False)
            ),
            Decimal(0),
        )


class PriceBooks:
    """Price books loaded once per card model for one team (budgets add many leases' costs)."""

    def __init__(self, *, team_id: int, until: datetime):
        self.team_id, self.until = team_id, until
        self._books: dict[int, PriceBook] = {}

    def for_model(self, card_model_id: int) -> PriceBook:
        book = self._books.get(card_model_id)
        if book is None:
            card_model = CardModel.objects.only("pk", "price_per_hour").get(pk=card_model_id)
            book = PriceBook.load(card_model=card_model, team_id=self.team_id, until=self.until)
            self._books[card_model_id] = book
        return book

    def preload(self, card_models) -> PriceBooks:
        """Load the books of many card models in two queries (pages that price every model)."""
        pairs = [
            SimpleNamespace(card_model=m, card_model_id=m.pk, team_id=self.team_id)
            for m in card_models
            if m.pk not in self._books
        ]
        if pairs:
            books = PriceBook.load_many(leases=pairs, until=self.until)
            self._books.update({model_id: book for (model_id, _team), book in books.items()})
        return self

    def cost(
        self, *, card_model_id: int, count: int, start: datetime, end: datetime, priority: str
    ) -> Decimal:
        return self.for_model(card_model_id).cost(
            count=count, start=start, end=end, discount=discount_for(priority)
        )

    def estimate(
        self, *, card_model, count: int, start: datetime, end: datetime, priority: str
    ) -> Decimal:
        """What a lease would be billed, to the cent (see ``estimate``)."""
        self.preload([card_model])
        return self.cost(
            card_model_id=card_model.pk, count=count, start=start, end=end, priority=priority
        ).quantize(CENT, rounding=ROUND_HALF_UP)


def reader_team(user):
    """The team whose prices a reader sees: their only team (with several or none, the list
    price book). The catalogue, the model page, the inventory API and the advisor quote it."""
    if user is None or not getattr(user, "is_authenticated", False):
        return None
    teams = [m.team for m in Membership.objects.filter(user=user).select_related("team")[:2]]
    return teams[0] if len(teams) == 1 else None


def reader_team_id(user) -> int | None:
    team = reader_team(user)
    return team.pk if team is not None else None


def books_now(card_models, *, team_id: int | None, at: datetime) -> PriceBooks:
    """The price books of *card_models* for *team_id*, as far as *at* (three queries)."""
    return PriceBooks(team_id=team_id or 0, until=at + timedelta(minutes=1)).preload(
        list(card_models)
    )


def prices_now(card_models, *, team_id: int | None, at: datetime, priority: str = "") -> dict:
    """The price per card-hour in force at *at* for *team_id*, per card model id: the team
    price over the list price over the model's default, × the off-peak tariff then (× the
    preemptible discount for that priority) — what a card-hour started then is billed."""
    models = list(card_models)
    books = books_now(models, team_id=team_id, at=at)
    discount = discount_for(priority)
    return {m.pk: books.for_model(m.pk).price_at(at, discount) for m in models}


def tariff_at(t: datetime) -> Decimal | None:
    """The off-peak factor in force at *t* (site-wide windows), or None at peak time."""
    return offpeak_factor(t, OffPeakWindow.spans())


def estimate(
    *, card_model, team_id: int | None, count: int, start: datetime, end: datetime, priority: str
) -> Decimal:
    """What a lease would be billed (to the cent): previews, the advisor, budgets' messages."""
    return PriceBooks(team_id=team_id or 0, until=end).estimate(
        card_model=card_model, count=count, start=start, end=end, priority=priority
    )
