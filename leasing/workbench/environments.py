"""Which environments fit which cards: the one rule for the request form, the API, the
lease page and the sessions."""

from __future__ import annotations

from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from leasing.choices import TERMINAL_STATES
from leasing.models import Environment
from leasing.transitions import event_record


def environment_refusal(environment: Environment, card_model) -> str:
    """Why *environment* cannot serve cards of *card_model* ("" when it can)."""
    if not environment.active:
        return _("The environment %(env)s is no longer offered.") % {"env": environment.name}
    if card_model.vendor in (environment.vendors or []):
        return ""
    if environment.card_models.filter(pk=card_model.pk).exists():
        return ""
    fits = [m.name for m in environment.card_models.all()] + [
        str(v) for v in environment.vendors or []
    ]
    return _("%(env)s runs on %(fits)s, not on %(model)s.") % {
        "env": environment.name,
        "fits": ", ".join(fits) or _("no cards yet"),
        "model": card_model.name,
    }


def environment_check(environment: Environment | None, card_model) -> None:
    """Raise a ValidationError with the reason when *environment* does not fit."""
    if environment is None:
        return
    reason = environment_refusal(environment, card_model)
    if reason:
        raise ValidationError({"environment": reason})


def environments_for(card_model) -> list[Environment]:
    """The offered environments that fit *card_model* (its model listed, or its vendor).
    Few rows: the vendor list is read in Python (SQLite has no JSON ``contains``)."""
    listed = set(
        Environment.card_models.through.objects.filter(cardmodel=card_model).values_list(
            "environment_id", flat=True
        )
    )
    return [
        env
        for env in Environment.objects.filter(active=True).order_by("name")
        if env.pk in listed or card_model.vendor in (env.vendors or [])
    ]


def lease_set_environment(*, lease, user, environment: Environment | None) -> None:
    """Choose (or clear) the environment of one's open lease; used by sessions opened from
    now on. Refused with the reason when it does not fit the lease's cards."""
    if lease.user_id != user.pk:
        raise PermissionDenied(_("Only the holder may choose the lease's environment."))
    if lease.status in TERMINAL_STATES:
        raise ValidationError(_("The lease is over."))
    environment_check(environment, lease.card_model)
    with transaction.atomic():
        type(lease).objects.filter(pk=lease.pk).update(environment=environment)
        event_record(
            lease.pk,
            kind="environment_set",
            at=timezone.now(),
            actor=user,
            data={"environment": environment.slug if environment else ""},
        )
    lease.environment = environment
