"""What a lease's state allows, and who sees which lease: the two rules the pages, the API
and the services ask of a lease (``Lease.actions``, ``Lease.objects.visible_to``)."""

from __future__ import annotations

from dataclasses import dataclass

from django.db import models
from django.db.models import Q

from leasing.choices import (
    CANCELLABLE_STATES,
    EXTENDABLE_STATES,
    RELEASABLE_STATES,
    RESIZABLE_STATES,
    TERMINAL_STATES,
    UNHELD_STATES,
    LeaseStatus,
)
from portal.permissions import is_finance, is_operator, teams_led_by


@dataclass(frozen=True)
class LeaseActions:
    """What a lease's state allows, for the pages (``lease.actions.release``): the same state
    groups the services check (``leasing.choices``), never a status compared in a template.
    Whether this person may do it is the services' and the views' (``can_manage_lease``)."""

    status: str

    @property
    def release(self) -> bool:
        return self.status in RELEASABLE_STATES

    @property
    def cancel(self) -> bool:
        return self.status in CANCELLABLE_STATES

    @property
    def extend(self) -> bool:
        return self.status in EXTENDABLE_STATES

    @property
    def resize(self) -> bool:
        return self.status in RESIZABLE_STATES

    @property
    def choose_environment(self) -> bool:
        return self.status not in TERMINAL_STATES

    @property
    def active(self) -> bool:
        """The cards are handed over: access details, sessions."""
        return self.status == LeaseStatus.ACTIVE

    @property
    def handing_over(self) -> bool:
        return self.status == LeaseStatus.PROVISIONING

    @property
    def estimated(self) -> bool:
        """Waiting in the queue: its start and end are the planner's estimates."""
        return self.status == LeaseStatus.QUEUED

    @property
    def release_failed(self) -> bool:
        return self.status == LeaseStatus.RELEASE_FAILED

    @property
    def held(self) -> bool:
        """It was given cards (so it has a start and an end of its own)."""
        return self.status not in UNHELD_STATES


class LeaseQuerySet(models.QuerySet):
    def visible_to(self, user, *, to_work_on: bool = False) -> LeaseQuerySet:
        """The one rule of who sees which lease: a member their own, a lead their teams',
        finance and operators all. *to_work_on*: the leases *user* may act inside (sessions,
        the environment): their own, and any for an operator; a lead or finance reads a
        team's lease but does not open a session on it."""
        if is_operator(user):
            return self
        if to_work_on:
            return self.filter(user=user)
        if is_finance(user):
            return self
        return self.filter(Q(user=user) | Q(team_id__in=teams_led_by(user)))
