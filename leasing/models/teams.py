"""What teams may use: quota rules per card model and per-member limits."""

from __future__ import annotations

from django.db import models
from django.db.models import Q
from django.utils.translation import gettext_lazy as _


class QuotaLimits(models.Model):
    """The limits a quota rule or a member limit may set; empty means no limit."""

    max_concurrent_cards = models.PositiveIntegerField(_("concurrent cards"), null=True, blank=True)
    card_hours_per_month = models.DecimalField(
        _("card-hours per month"), max_digits=12, decimal_places=1, null=True, blank=True
    )
    max_lease_hours = models.PositiveIntegerField(_("longest lease (hours)"), null=True, blank=True)

    class Meta:
        abstract = True

    LIMIT_FIELDS = ("max_concurrent_cards", "card_hours_per_month", "max_lease_hours")


class Quota(QuotaLimits):
    """A team's limits for one card model, or — with no model — for all models together."""

    team = models.ForeignKey(
        "portal.Team", verbose_name=_("team"), on_delete=models.CASCADE, related_name="quotas"
    )
    card_model = models.ForeignKey(
        "inventory.CardModel",
        verbose_name=_("card model"),
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="quotas",
        help_text=_("Empty: the rule applies to all card models together."),
    )
    money_per_month = models.DecimalField(
        _("money per month (site currency)"), max_digits=14, decimal_places=2, null=True, blank=True
    )

    class Meta:
        verbose_name = _("team quota")
        verbose_name_plural = _("team quotas")
        constraints = [
            models.UniqueConstraint(fields=["team", "card_model"], name="quota_unique_team_model"),
            models.UniqueConstraint(
                fields=["team"],
                condition=Q(card_model__isnull=True),
                name="quota_unique_team_all_models",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.team} / {self.card_model or 'all models'}"


class MemberLimit(QuotaLimits):
    """A member's limits inside the team's, set by the lead; going above them needs approval."""

    membership = models.ForeignKey(
        "portal.Membership",
        verbose_name=_("member"),
        on_delete=models.CASCADE,
        related_name="limits",
    )
    card_model = models.ForeignKey(
        "inventory.CardModel",
        verbose_name=_("card model"),
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="member_limits",
    )

    class Meta:
        verbose_name = _("member limit")
        verbose_name_plural = _("member limits")
        constraints = [
            models.UniqueConstraint(
                fields=["membership", "card_model"], name="memberlimit_unique_model"
            ),
            models.UniqueConstraint(
                fields=["membership"],
                condition=Q(card_model__isnull=True),
                name="memberlimit_unique_all_models",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.membership} / {self.card_model or 'all models'}"


class GuaranteedShare(models.Model):
    """A team's guaranteed share of a card model or of a family: *cards* always available to
    it within *within_minutes*. While the team does not use them they are lent to others,
    whose leases on them are taken back (preempted) first when the team needs them."""

    team = models.ForeignKey(
        "portal.Team", verbose_name=_("team"), on_delete=models.CASCADE, related_name="shares"
    )
    card_model = models.ForeignKey(
        "inventory.CardModel",
        verbose_name=_("card model"),
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="shares",
    )
    family = models.CharField(
        _("card family"),
        max_length=40,
        blank=True,
        default="",
        help_text=_("Instead of one card model: every model of this family together."),
    )
    cards = models.PositiveIntegerField(_("guaranteed cards"))
    within_minutes = models.PositiveIntegerField(
        _("available within (minutes)"),
        default=10,
        help_text=_("How long borrowers get to give the cards back (their grace period)."),
    )

    class Meta:
        verbose_name = _("guaranteed share")
        verbose_name_plural = _("guaranteed shares")
        constraints = [
            models.CheckConstraint(
                condition=(Q(card_model__isnull=False) & Q(family=""))
                | (Q(card_model__isnull=True) & ~Q(family="")),
                name="share_model_xor_family",
            ),
            models.CheckConstraint(condition=Q(cards__gt=0), name="share_cards_positive"),
            models.UniqueConstraint(
                fields=["team", "card_model"],
                condition=Q(card_model__isnull=False),
                name="share_unique_team_model",
            ),
            models.UniqueConstraint(
                fields=["team", "family"], condition=~Q(family=""), name="share_unique_team_family"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.team} / {self.card_model or self.family}: {self.cards}"


class FairShare(models.Model):
    """A team's fair share of the pool (``scheduler.fairshare``): the *weight* operators give
    it, and the decayed *use*, *factor* and work *ahead* the last recomputation found (the
    queue orders inside a priority class by the factor). A team without a row weighs 1 and
    has used nothing."""

    team = models.OneToOneField(
        "portal.Team",
        verbose_name=_("team"),
        on_delete=models.CASCADE,
        primary_key=True,
        related_name="fair_share",
    )
    weight = models.FloatField(
        _("share weight"),
        default=1.0,
        help_text=_("The team's share is its weight over the weights of every team."),
    )
    use = models.FloatField(_("recent use"), default=0.0)
    factor = models.FloatField(_("fair-share factor"), default=1.0)
    # the fraction of the pool that other teams' work may take while its leases wait, passing
    # them (``fairshare.ahead``): the start they are told leaves room for it
    ahead = models.FloatField(_("work ahead"), default=0.0)
    computed_at = models.DateTimeField(_("computed at"), null=True, blank=True)

    class Meta:
        verbose_name = _("fair share")
        verbose_name_plural = _("fair shares")
        constraints = [
            models.CheckConstraint(condition=Q(weight__gt=0), name="fair_share_weight_positive"),
            models.CheckConstraint(condition=Q(use__gte=0), name="fair_share_use_not_negative"),
            models.CheckConstraint(
                condition=Q(factor__gte=0) & Q(factor__lte=1), name="fair_share_factor_0_1"
            ),
            models.CheckConstraint(
                condition=Q(ahead__gte=0) & Q(ahead__lt=1), name="fair_share_ahead_0_1"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.team}: {self.weight:g}"


class FairSharePolicy(models.Model):
    """The site's fair-share settings (one row, id 1): how fast use is forgotten, how
    often the factors are recomputed, and whether a team below its share takes cards back
    (``scheduler.fairshare.reclaim``)."""

    id = models.PositiveSmallIntegerField(primary_key=True, default=1, editable=False)
    half_life_hours = models.FloatField(
        _("half-life of use (hours)"),
        default=7 * 24,
        help_text=_("Use this long ago counts half."),
    )
    every_minutes = models.PositiveIntegerField(
        _("recompute every (minutes)"),
        default=5,
        help_text=_("The factors are recomputed at fixed times, this many minutes apart."),
    )
    reclaim = models.BooleanField(
        _("take cards back for a team below its share"),
        default=True,
        help_text=_(
            "A team below its share that would wait more than 5 minutes takes cards back "
            "from teams above theirs: from leases that agreed to be requeued, with at least "
            "6 hours left, that have run an hour; after the grace period, and never taking "
            "a team below its share or its guaranteed share."
        ),
    )
    computed_at = models.DateTimeField(_("last computed at"), null=True, blank=True)

    class Meta:
        verbose_name = _("fair-share policy")
        verbose_name_plural = _("fair-share policy")
        constraints = [
            models.CheckConstraint(condition=Q(id=1), name="fair_share_policy_one_row"),
            models.CheckConstraint(
                condition=Q(half_life_hours__gt=0), name="fair_share_half_life_positive"
            ),
            models.CheckConstraint(
                condition=Q(every_minutes__gt=0), name="fair_share_every_positive"
            ),
        ]

    def __str__(self) -> str:
        return f"half-life {self.half_life_hours:g} h, every {self.every_minutes} min"

    @classmethod
    def current(cls) -> FairSharePolicy:
        return cls.objects.get_or_create(pk=1)[0]
