"""Admission: the one rule every path that adds cards or card-time obeys.

A new request, an extension, a resize (more cards, or a move to another model), a lead's
approval and the start of a reservation all ask the same question, under the team's lock:
does this card-time fit the team's quotas and the member's limits? The verdict says whether
it is refused (a team rule broken: a message naming the limit, what is left and when it
frees), borrowed (idle cards as preemptible past the concurrent quota), or waits for the
lead (a member limit broken: a pending request, or a pending change on the lease).

A reservation's start adds nothing: its card-time was admitted (and is counted as booked)
when it was requested.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from django.core.exceptions import ValidationError

from leasing.choices import LeaseStatus, Priority
from leasing.teams import quotas
from leasing.teams.quotas import Ask

__all__ = ["Ask", "Verdict", "admit"]


@dataclass
class Verdict:
    """What admission decided for an ask."""

    status: str = LeaseStatus.QUEUED
    borrowed: bool = False
    member_breaches: list = field(default_factory=list)
    overridden: list = field(default_factory=list)

    @property
    def needs_approval(self) -> bool:
        return self.status == LeaseStatus.PENDING_APPROVAL

    @property
    def reason(self) -> str:
        """Why the lead is asked (the member limits broken), one per line."""
        return "\n".join(b.message for b in self.member_breaches)


def _may_borrow(ask: Ask) -> bool:
    """Past the concurrent quota only on idle cards: a new preemptible request of a team that
    may borrow, or a change to a lease that is already borrowed."""
    if not ask.team.allow_borrowing or ask.priority != Priority.PREEMPTIBLE:
        return False
    return ask.lease_id is None or ask.borrowed


# A new request's refusal sits on the field the person would change: too long a lease on the
# duration, the rest (cards held, card-hours, money) on the card count.
REQUEST_FIELDS = {"max_lease_hours": "duration_minutes"}


def _field_for(breach, ask: Ask, field: str) -> str:
    return REQUEST_FIELDS.get(breach.limit, field) if ask.kind == "request" else field


def admit(
    ask: Ask,
    *,
    override_reason: str = "",
    member_approved: bool = False,
    field: str = "count",
) -> Verdict:
    """Check the team's quotas and the member's limits for *ask* (inside the team lock).

    Team rule broken: ValidationError on *field* (unless an operator overrides with a reason,
    or the ask may borrow idle cards past the concurrent quota). Member limit broken: the
    verdict waits for the lead, unless the lead has already approved (*member_approved*).
    """
    breaches = quotas.admission_breaches(ask)
    if override_reason:
        return Verdict(overridden=breaches)
    team_breaches = [b for b in breaches if b.scope == "team"]
    member_breaches = [b for b in breaches if b.scope == "member"]
    verdict = Verdict()
    if team_breaches:
        only_concurrency = all(b.limit == "max_concurrent_cards" for b in team_breaches)
        if only_concurrency and _may_borrow(ask):
            verdict.borrowed = True
        else:
            errors: dict[str, list[str]] = {}
            for b in team_breaches:
                errors.setdefault(_field_for(b, ask, field), []).append(b.message)
            raise ValidationError(errors)
    if member_breaches and not member_approved:
        verdict.status = LeaseStatus.PENDING_APPROVAL
        verdict.member_breaches = member_breaches
    return verdict
