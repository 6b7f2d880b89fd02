"""Issuing a closed month's statements: a number, a date, and a notice to whoever pays.

``statements_issue`` runs right after ``usage_close_month`` (the same beat task): once no
lease still has an unrecorded part of the month, each team that used cards that month gets
one ``Statement`` (numbered per month, ``2026-11-0001``, in team order) with the totals of
its usage records, and its leads and every finance user are told, each in their own language
(stored as message + parameters). Safe to run twice or at once: one statement per team and
month (a unique constraint), one notice per statement and reader (a notice key).
"""

from __future__ import annotations

import logging
from datetime import date, datetime, timedelta

from django.contrib.auth import get_user_model
from django.db import IntegrityError, transaction
from django.db.models import Sum
from django.utils import timezone

from leasing.billing.prices import currency
from leasing.billing.usage import leases_to_close
from leasing.choices import Kind
from leasing.models import Statement, UsageRecord
from leasing.notify.messages import holder_zone, person_language, render
from leasing.notify.services import notify, team_leads
from leasing.periods import month_of, site_tz
from portal.models import Team

logger = logging.getLogger(__name__)


def last_closed_month(now: datetime) -> tuple[date, datetime]:
    """The month before *now*'s (its first day, site time zone) and the start of *now*'s."""
    this_month = month_of(now)[0]
    previous = month_of(this_month - timedelta(minutes=1))[0]
    return previous.astimezone(site_tz()).date(), this_month


def _next_number(month: date) -> str:
    prefix = f"{month:%Y-%m}-"
    last = (
        Statement.objects.filter(number__startswith=prefix)
        .order_by("-number")
        .values_list("number", flat=True)
        .first()
    )
    return f"{prefix}{(int(last[len(prefix) :]) + 1) if last else 1:04d}"


def statement_readers(team: Team) -> list:
    """Who gets a team's statement: its leads and every finance user (each once)."""
    readers = {u.pk: u for u in team_leads(team)}
    finance = get_user_model().objects.filter(profile__is_finance=True, is_active=True)
    for user in finance.select_related("profile").order_by("pk"):
        readers.setdefault(user.pk, user)
    return list(readers.values())


def statement_send(statement: Statement) -> int:
    """Tell the statement's readers; returns how many were told (a repeat tells nobody new)."""
    params = {
        "number": statement.number,
        "team": statement.team.name,
        "month": f"{statement.month:%Y-%m}",
        "cost": f"{statement.cost:.2f}",
        "currency": statement.currency,
        "hours": f"{statement.card_minutes / 60:.2f}",
    }
    url = f"/reports/statements/{statement.team.slug}/{statement.month:%Y-%m}/"
    for reader in statement_readers(statement.team):
        title, body = render(
            "statement", params, language=person_language(reader), zone=holder_zone(reader)
        )
        notify(
            user=reader,
            kind=Kind.STATEMENT_ISSUED,
            title=title,
            body=body,
            url=url,
            data={"message": "statement", "params": params},
            key=f"statement:{statement.number}",
        )
    return len(statement_readers(statement.team))


def statements_issue(*, now: datetime | None = None) -> list[Statement]:
    """Issue the statements of the last closed month once it is fully recorded; returns the
    statements issued by this call."""
    now = now or timezone.now()
    month, month_end = last_closed_month(now)
    if leases_to_close(month_end).exists():
        return []  # the close is still writing this month's records: not final yet
    totals = (
        UsageRecord.objects.filter(month=month)
        .values("team_id")
        .annotate(card_minutes=Sum("card_minutes"), cost=Sum("cost"))
        .order_by("team__slug")
    )
    issued_for = set(Statement.objects.filter(month=month).values_list("team_id", flat=True))
    made = []
    for row in totals:
        if row["team_id"] in issued_for:
            continue
        try:
            with transaction.atomic():
                statement = Statement.objects.create(
                    team_id=row["team_id"],
                    month=month,
                    number=_next_number(month),
                    issued_at=now,
                    card_minutes=row["card_minutes"] or 0,
                    cost=row["cost"] or 0,
                    currency=currency(),
                )
                statement_send(statement)
        except IntegrityError:  # another run issued it (or took the number) first
            logger.info("statement for team %s, %s issued elsewhere", row["team_id"], month)
            continue
        made.append(statement)
    return made
