"""Priority classes an operator configures: a purpose can lift a request's class in the queue
(CARDPOOL["PURPOSE_PRIORITY"], e.g. inference above training when the pool is tight)."""

from datetime import timedelta

import pytest
from django.apps import apps
from django.core.exceptions import ImproperlyConfigured

from leasing.choices import PRIORITY_RANK, LeaseStatus, Priority, Purpose, queue_rank
from leasing.lifecycle.selectors import queue_position
from portal.settings import _purpose_priority
from tests.leasing.conftest import T0, ask, hours


@pytest.fixture
def inference_first(settings):
    settings.CARDPOOL = {**settings.CARDPOOL, "PURPOSE_PRIORITY": {"inference": "high"}}


def fill_then_queue(alice, bob, vision, nlp, a100):
    """The pool is held for an hour; then a training request and an inference request of the
    same size wait, training submitted first."""
    ask(alice, vision, a100, count=8, duration=hours(1), same_node=False)
    training = ask(bob, nlp, a100, count=8, purpose=Purpose.TRAINING, same_node=False)
    inference = ask(bob, nlp, a100, count=8, purpose=Purpose.INFERENCE, same_node=False)
    training.refresh_from_db()
    inference.refresh_from_db()
    assert training.status == inference.status == LeaseStatus.QUEUED
    return training, inference


def test_inference_is_served_before_training_when_the_operator_says_so(
    inference_first, frozen, alice, bob, vision, nlp, a100, small_pool
):
    training, inference = fill_then_queue(alice, bob, vision, nlp, a100)
    assert inference.priority == Priority.NORMAL  # what the holder asked (and pays for)
    assert inference.priority_rank == PRIORITY_RANK[Priority.HIGH]
    assert inference.estimated_start == T0 + hours(1)
    assert training.estimated_start == T0 + hours(3)
    assert queue_position(inference) == 1 and queue_position(training) == 2


def test_without_the_setting_purpose_does_not_change_the_order(
    frozen, alice, bob, vision, nlp, a100, small_pool
):
    training, inference = fill_then_queue(alice, bob, vision, nlp, a100)
    assert inference.priority_rank == training.priority_rank == PRIORITY_RANK[Priority.NORMAL]
    assert training.estimated_start == T0 + hours(1)
    assert inference.estimated_start == T0 + hours(3)


def test_purpose_never_lowers_a_class_and_preemptible_stays_preemptible(inference_first):
    assert queue_rank(Priority.CRITICAL, Purpose.INFERENCE) == PRIORITY_RANK[Priority.CRITICAL]
    assert (
        queue_rank(Priority.PREEMPTIBLE, Purpose.INFERENCE) == PRIORITY_RANK[Priority.PREEMPTIBLE]
    )
    assert queue_rank(Priority.NORMAL, Purpose.TRAINING) == PRIORITY_RANK[Priority.NORMAL]
    assert queue_rank(Priority.NORMAL, Purpose.INFERENCE) == PRIORITY_RANK[Priority.HIGH]


def test_a_malformed_setting_fails_loudly(settings):
    assert _purpose_priority(" inference=high , rendering=normal ") == {
        "inference": "high",
        "rendering": "normal",
    }
    with pytest.raises(ImproperlyConfigured):
        _purpose_priority("inference")
    settings.CARDPOOL = {**settings.CARDPOOL, "PURPOSE_PRIORITY": {"inference": "urgent"}}
    with pytest.raises(ImproperlyConfigured, match="classes are"):
        apps.get_app_config("leasing").ready()
    settings.CARDPOOL = {**settings.CARDPOOL, "PURPOSE_PRIORITY": {"gaming": "high"}}
    with pytest.raises(ImproperlyConfigured, match="purposes are"):
        apps.get_app_config("leasing").ready()


def test_the_preview_counts_the_lifted_class_like_the_request(
    inference_first, frozen, alice, bob, vision, nlp, a100, small_pool
):
    """The request form's preview (``lease_request_check``) runs the same order: an inference
    request would start before the training already waiting, a training one after it."""
    from leasing.lifecycle.request_steps import lease_request_check
    from leasing.scheduler.eta import lease_told_start

    training, _inference = fill_then_queue(alice, bob, vision, nlp, a100)
    shape = {"user": bob, "team": nlp, "card_model": a100, "count": 8, "same_node": False}
    shape["duration"] = hours(2)
    ahead = lease_request_check(purpose=Purpose.INFERENCE, **shape)
    behind = lease_request_check(purpose=Purpose.TRAINING, **shape)
    assert ahead.start == T0 + hours(3)  # after the waiting inference only
    assert behind.start == T0 + hours(5)  # after both
    late = ask(bob, nlp, a100, count=8, purpose=Purpose.INFERENCE, same_node=False)
    late.refresh_from_db()
    assert late.estimated_start == ahead.start
    # told (scheduler.eta): the plan's start plus 2 h of room for smaller work and 1 % of
    # the 3 h wait (1.8 min: 1, whole minutes rounded down)
    told = T0 + hours(3 + 2) + timedelta(minutes=1)
    assert ahead.told == told == lease_told_start(late, now=T0)
