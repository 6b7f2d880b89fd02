"""Prices in force over time and the usage records bills are made of."""

from __future__ import annotations

from decimal import Decimal

from django.conf import settings
from django.db import models
from django.db.models import F, Q
from django.utils.translation import gettext_lazy as _

from leasing.choices import Priority


class PricePeriod(models.Model):
    """A price per card-hour in force from ``effective_from`` until the next row's."""

    price_per_hour = models.DecimalField(_("price per card-hour"), max_digits=10, decimal_places=2)
    effective_from = models.DateTimeField(_("effective from"))

    class Meta:
        abstract = True


class Price(PricePeriod):
    """A card model's list price per card-hour from ``effective_from`` on.

    The price in force at time *t* is the latest row with ``effective_from <= t``; with none,
    the card model's ``price_per_hour``. Usage already recorded never changes, so a price set
    for next month leaves last month's bills alone.
    """

    card_model = models.ForeignKey(
        "inventory.CardModel",
        verbose_name=_("card model"),
        on_delete=models.CASCADE,
        related_name="prices",
    )

    class Meta:
        ordering = ["card_model", "-effective_from"]
        verbose_name = _("price")
        verbose_name_plural = _("prices")
        constraints = [
            models.UniqueConstraint(
                fields=["card_model", "effective_from"], name="price_unique_model_from"
            ),
            models.CheckConstraint(condition=Q(price_per_hour__gte=0), name="price_not_negative"),
        ]

    def __str__(self) -> str:
        return (
            f"{self.card_model_id}: {self.price_per_hour} from {self.effective_from:%Y-%m-%d %H:%M}"
        )


class TeamPrice(PricePeriod):
    """A price one team pays for a card model from ``effective_from`` on, instead of the list price."""

    team = models.ForeignKey(
        "portal.Team", verbose_name=_("team"), on_delete=models.CASCADE, related_name="prices"
    )
    card_model = models.ForeignKey(
        "inventory.CardModel",
        verbose_name=_("card model"),
        on_delete=models.CASCADE,
        related_name="team_prices",
    )

    class Meta:
        ordering = ["team", "card_model", "-effective_from"]
        verbose_name = _("team price")
        verbose_name_plural = _("team prices")
        constraints = [
            models.UniqueConstraint(
                fields=["team", "card_model", "effective_from"], name="teamprice_unique"
            ),
            models.CheckConstraint(
                condition=Q(price_per_hour__gte=0), name="teamprice_not_negative"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.team_id}/{self.card_model_id}: {self.price_per_hour}"


class UsageRecord(models.Model):
    """Card-time a lease held on one node within one month and one price period, and its cost.

    Written once when the lease ends (``leasing.billing.usage``), from its allocations; never
    rewritten. Who, what and where are copied in so reports group without joins.
    ``cost = round(card_minutes × price / 60, 2)``; every total is a sum of ``cost``.
    """

    lease = models.ForeignKey(
        "leasing.Lease", on_delete=models.CASCADE, related_name="usage_records"
    )
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="usage_records"
    )
    team = models.ForeignKey("portal.Team", on_delete=models.PROTECT, related_name="usage_records")
    department = models.ForeignKey(
        "portal.Department",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="usage_records",
    )
    card_model = models.ForeignKey(
        "inventory.CardModel", on_delete=models.PROTECT, related_name="usage_records"
    )
    vendor = models.CharField(max_length=20)
    node = models.ForeignKey("inventory.Node", on_delete=models.PROTECT, related_name="+")
    region = models.ForeignKey("inventory.Region", on_delete=models.PROTECT, related_name="+")
    priority = models.CharField(max_length=16, choices=Priority.choices)
    month = models.DateField(help_text="First day of the month (site time zone).")
    start_at = models.DateTimeField()
    end_at = models.DateTimeField()
    cards = models.PositiveSmallIntegerField()
    minutes = models.PositiveIntegerField(help_text="Wall-clock minutes from start to end.")
    card_minutes = models.PositiveIntegerField()
    list_price = models.DecimalField(max_digits=10, decimal_places=2)
    discount = models.DecimalField(max_digits=5, decimal_places=4, default=1)
    price = models.DecimalField(
        max_digits=12, decimal_places=4, help_text="Per card-hour, after override and discount."
    )
    cost = models.DecimalField(max_digits=14, decimal_places=2)
    wait_seconds = models.PositiveIntegerField(
        null=True, blank=True, help_text="Queue wait; on the lease's first record only."
    )
    off_peak = models.BooleanField(
        default=False, help_text="Held in an off-peak window (priced at its tariff)."
    )
    tariff = models.DecimalField(
        max_digits=5,
        decimal_places=4,
        default=1,
        help_text="The time-of-day factor in force (an off-peak window's, else 1).",
    )

    class Meta:
        verbose_name = _("usage record")
        verbose_name_plural = _("usage records")
        ordering = ["start_at", "lease_id", "node_id"]
        constraints = [
            models.UniqueConstraint(
                fields=["lease", "node", "start_at"], name="usagerecord_unique_piece"
            ),
            models.CheckConstraint(
                condition=Q(end_at__gt=F("start_at")), name="usagerecord_end_after_start"
            ),
        ]
        indexes = [
            models.Index(fields=["month", "team"], name="usage_month_team_idx"),
            models.Index(fields=["start_at"], name="usage_start_idx"),
            models.Index(fields=["team", "start_at"], name="usage_team_start_idx"),
        ]

    def __str__(self) -> str:
        return f"lease {self.lease_id} {self.start_at:%Y-%m-%d %H:%M}: {self.card_minutes} card-min"

    @property
    def card_hours(self):
        return (Decimal(self.card_minutes) / 60).quantize(Decimal("0.01"))


class OffPeakWindow(models.Model):
    """An off-peak period of the week (site time zone): *weekday* from *start_hour* to
    *end_hour* (24 = midnight), priced at the list price × *price_factor* (the tariff).
    A period across midnight is two windows."""

    class Weekday(models.IntegerChoices):
        MONDAY = 0, _("Monday")
        TUESDAY = 1, _("Tuesday")
        WEDNESDAY = 2, _("Wednesday")
        THURSDAY = 3, _("Thursday")
        FRIDAY = 4, _("Friday")
        SATURDAY = 5, _("Saturday")
        SUNDAY = 6, _("Sunday")

    weekday = models.PositiveSmallIntegerField(_("weekday"), choices=Weekday.choices)
    start_hour = models.PositiveSmallIntegerField(_("from hour"))
    end_hour = models.PositiveSmallIntegerField(_("to hour"), help_text=_("24 is midnight."))
    price_factor = models.DecimalField(
        _("price factor"),
        max_digits=5,
        decimal_places=4,
        default=Decimal("0.5"),
        help_text=_("The off-peak tariff: the list price is multiplied by this (0…1)."),
    )

    class Meta:
        ordering = ["weekday", "start_hour"]
        verbose_name = _("off-peak window")
        verbose_name_plural = _("off-peak windows")
        constraints = [
            models.CheckConstraint(
                condition=Q(weekday__lte=6) & Q(start_hour__lt=F("end_hour")) & Q(end_hour__lte=24),
                name="offpeak_hours_in_a_day",
            ),
            models.CheckConstraint(
                condition=Q(price_factor__gte=0) & Q(price_factor__lte=1),
                name="offpeak_factor_0_1",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.get_weekday_display()} {self.start_hour:02d}–{self.end_hour:02d} × {self.price_factor}"

    @classmethod
    def spans(cls) -> list[tuple[int, int, int, Decimal]]:
        """Every window as (weekday, start hour, end hour, factor): what ``leasing.periods``'
        off-peak helpers take."""
        return [
            (w, s, e, f)
            for w, s, e, f in cls.objects.order_by("weekday", "start_hour").values_list(
                "weekday", "start_hour", "end_hour", "price_factor"
            )
        ]


class Statement(models.Model):
    """A team's monthly statement once the month is closed: numbered, dated and sent.

    Issued by ``leasing.billing.statements.statements_issue`` after ``usage_close_month``
    has recorded every lease's part of the month; the lines are the month's usage records
    (which never change after the close), the totals are kept as issued so a later check can
    show that they still match. Numbers run per month: ``2026-11-0001``.
    """

    team = models.ForeignKey("portal.Team", on_delete=models.PROTECT, related_name="statements")
    month = models.DateField(help_text="First day of the month (site time zone).")
    number = models.CharField(_("statement number"), max_length=20, unique=True)
    issued_at = models.DateTimeField(_("issued"))
    card_minutes = models.PositiveBigIntegerField()
    cost = models.DecimalField(max_digits=16, decimal_places=2)
    currency = models.CharField(max_length=3)

    class Meta:
        verbose_name = _("statement")
        verbose_name_plural = _("statements")
        ordering = ["-month", "number"]
        constraints = [
            models.UniqueConstraint(fields=["team", "month"], name="statement_one_per_team_month")
        ]

    def __str__(self) -> str:
        return self.number
