"""Off-peak starts in the queue pass: a waiting lease that asked for the next off-peak window
(or off-peak time only) starts only where its policy allows.

The request path already moved its start to the first such moment
(``lifecycle.validation.offpeak_start_for``); the planner sees that as a start-not-before.
When the cards are not free then, the planner's start may fall outside off-peak time (or
leave too little of it): the lease's start-not-before moves to the next moment its policy
allows, from the planner's start, and the next pass plans it from there.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.core.exceptions import ValidationError
from django.utils.translation import gettext as _

from leasing.choices import LeaseStatus, StartPolicy
from leasing.models import Lease, OffPeakWindow
from leasing.periods import Span, offpeak_start


class OffPeakHold:
    """The off-peak rule for one queue pass (the windows are read once, when first needed)."""

    def __init__(self) -> None:
        self._spans: list[Span] | None = None

    def allowed_start(self, policy: str, start: datetime, duration: timedelta) -> datetime | None:
        """The first start from *start* that *policy* allows (*start* itself when it does)."""
        if not policy:
            return start
        if self._spans is None:
            self._spans = OffPeakWindow.spans()
        return offpeak_start(
            start, self._spans, fits=duration if policy == StartPolicy.OFF_PEAK_ONLY else None
        )

    def hold(
        self, lease_id: int, policy: str, start: datetime, duration: timedelta
    ) -> datetime | None:
        """If *policy* does not allow *start*, move the waiting lease's start-not-before to the
        next moment it does and return that (None when no window is left: the start stays);
        else return *start* unchanged."""
        moved = self.allowed_start(policy, start, duration)
        if moved is None or moved == start:
            return start
        Lease.objects.filter(pk=lease_id, status=LeaseStatus.QUEUED).update(
            start_at=moved, end_at=moved + duration
        )
        return moved


def offpeak_start_for(policy: str, *, start: datetime, duration: timedelta) -> datetime:
    """Where a request with start *policy* begins: the first off-peak moment from *start*
    (``next_off_peak``), or the first from which the whole *duration* is off-peak
    (``off_peak_only``). A ValidationError when no window is set or none fits."""
    if policy not in StartPolicy.values:
        raise ValidationError({"start_policy": [_("Unknown start policy %(p)s.") % {"p": policy}]})
    if not policy:
        return start
    spans = OffPeakWindow.spans()
    if not spans:
        raise ValidationError(
            {"start_policy": [_("No off-peak windows are set; ask for a start time instead.")]}
        )
    found = offpeak_start(
        start, spans, fits=duration if policy == StartPolicy.OFF_PEAK_ONLY else None
    )
    if found is None:
        raise ValidationError(
            {
                "start_policy": [
                    _(
                        "No off-peak window in the next two weeks is long enough for this "
                        "lease; ask for less time or start at any time."
                    )
                ]
            }
        )
    return found
