"""A whole queue pass over some card models, as a test (or a bench) asks for one: production
runs the pass through ``replan`` (a request, a release, the tick) for one model at a time."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from django.db import transaction
from django.utils import timezone

from leasing.locking import lock_card_models
from leasing.scheduler.run import PassResult, schedule_card_model
from leasing.transitions import hand_over


def queue_advance(*, card_model_ids: Iterable[int], now: datetime | None = None) -> PassResult:
    """A whole queue pass over the given card models (locks them, places what fits), for
    tests and benches; production passes go through ``replan`` one model at a time."""
    now = now or timezone.now()
    total = PassResult()
    with transaction.atomic():
        for card_model_id in lock_card_models(card_model_ids):
            result = schedule_card_model(card_model_id, now=now)
            total.started += result.started
            total.booked += result.booked
            total.waiting.update(result.waiting)
        hand_over(total.started)
    return total
