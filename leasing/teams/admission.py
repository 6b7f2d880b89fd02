"""Admission: the team's quota and the member's limits, checked under the team's lock.

The verdict says whether a request is refused (a team rule broken), borrowed (idle cards as
preemptible past the concurrent quota), or waits for the lead (a member limit broken).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.core.exceptions import ValidationError

from inventory.models import CardModel
from leasing.choices import (
    LeaseStatus,
    Priority,
)
from leasing.teams import quotas
from portal.models import Team


@dataclass
class Verdict:
    """What admission decided for a request."""

    status: str = LeaseStatus.QUEUED
    borrowed: bool = False
    member_breaches: list = field(default_factory=list)
    overridden: list = field(default_factory=list)


def admit(
    *,
    team: Team,
    user,
    card_model: CardModel,
    count: int,
    start: datetime,
    duration: timedelta,
    priority: str,
    override_reason: str,
) -> Verdict:
    """Check the team's quota and the member's limits (inside the team lock).

    Team quota broken: refused (unless an operator overrides with a reason, or the team may
    borrow idle cards as preemptible). Member limit broken: waits for the lead's approval.
    """
    breaches = quotas.admission_breaches(
        team=team, user=user, card_model=card_model, count=count, start=start, duration=duration
    )
    team_breaches = [b for b in breaches if b.scope == "team"]
    member_breaches = [b for b in breaches if b.scope == "member"]
    if override_reason:
        return Verdict(overridden=breaches)
    verdict = Verdict()
    if team_breaches:
        only_concurrency = all(b.limit == "max_concurrent_cards" for b in team_breaches)
        if only_concurrency and team.allow_borrowing and priority == Priority.PREEMPTIBLE:
            verdict.borrowed = True
        else:
            raise ValidationError({"count": [b.message for b in team_breaches]})
    if member_breaches:
        verdict.status = LeaseStatus.PENDING_APPROVAL
        verdict.member_breaches = member_breaches
    return verdict
