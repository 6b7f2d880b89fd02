"""The queue plan with a reservation depth (scheduler.bounded): the head is the full planner's
plan of the first ``depth`` leases around what holds cards; the tail starts by backfill only
where nothing planned is in its way, and nothing more of it fits now; with a depth past the
queue it decides what ``QueuePlan`` decides; the tail's told starts are in order."""

from collections import defaultdict

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from leasing.scheduler.bounded import BoundedPlan, FreeTime
from leasing.scheduler.planner import CardSlot, Request, Timeline, cards_for, place, plan_queue
from leasing.scheduler.queueplan import QueuePlan
from tests.leasing.test_queueplan import M, T, keyed, pools, requests, timeline_of, timelines

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _no_overlap(timeline: Timeline) -> bool:
    for periods in timeline.busy.values():
        ordered = sorted(periods)
        if any(b[0] < a[1] for a, b in zip(ordered, ordered[1:], strict=False)):
            return False
    return True


def _check(plan: BoundedPlan, cards, busy, started, now, *, advanced=True):
    """The head is ``plan_queue`` of its requests around the holders (the pool's busy time
    and every lease started so far); no card is booked twice; once the plan has advanced
    (``advance`` starts the tail's backfill), no tail lease fits now."""
    assert _no_overlap(plan.timeline)
    assert len(plan.entries) <= plan.depth
    assert not plan.tail or len(plan.entries) == plan.depth
    keys = plan.keys + plan.tail_keys
    assert keys == sorted(keys)
    holders = timeline_of(busy)
    for entry in started:
        for c in entry.decision.card_ids:
            holders.add(c, entry.decision.start, entry.decision.start + entry.request.duration)
    holders.prune(now)
    head = [
        Request(r.lease_id, r.count, r.duration, max(r.not_before, now), r.same_node, r.nodes)
        for r in (e.request for e in plan.entries)
    ]
    full = plan_queue(cards, holders, head)
    mine = [(d.start, d.card_ids) for d in plan.decisions()]
    assert [(d.start, d.card_ids) for d in full] == mine
    # ``holders`` now holds the head's reservations too: what the backfill saw
    for entry in plan.tail:
        r = entry.request
        assert entry.decision.start is None
        if advanced and r.not_before <= now:
            fits = place(
                cards_for(cards, r), holders, r.count, now, now + r.duration,
                same_node=r.same_node,
            )  # fmt: skip
            assert fits is None, (r, fits)


@SETTINGS
@given(
    st.data(),
    pools(),
    st.lists(requests, min_size=1, max_size=9),
    st.integers(1, 3),
    st.lists(st.integers(0, 90), min_size=1, max_size=4),
)
def test_head_is_the_full_plan_and_the_tail_fills_what_is_free(data, cards, specs, depth, steps):
    busy = data.draw(timelines(cards))
    plan = BoundedPlan(cards, timeline_of(busy), now=T, depth=depth)
    started = []
    items = [keyed(n, spec) for n, spec in enumerate(specs, 1)]
    half = len(items) // 2
    for key, request in items[:half]:
        plan.add(key, request)
    started += plan.advance(T)
    _check(plan, cards, busy, started, T)
    for key, request in items[half:]:
        plan.add(key, request)
        _check(plan, cards, busy, started, T, advanced=False)
    now = T
    for minutes in sorted(steps):
        now = max(now, T + minutes * M)
        due = plan.advance(now)
        assert all(e.decision.start <= now for e in due)
        started += due
        _check(plan, cards, busy, started, now)
    gone = data.draw(st.sampled_from([r.lease_id for _k, r in items]))
    plan.remove(gone)
    _check(plan, cards, busy, started, now, advanced=False)
    waiting = {e.request.lease_id for e in plan.entries + plan.tail}
    begun = {e.request.lease_id for e in started}
    assert not waiting & begun
    assert waiting | begun | {gone} == {r.lease_id for _k, r in items}


@SETTINGS
@given(
    st.data(),
    pools(),
    st.lists(requests, min_size=1, max_size=8),
    st.lists(st.integers(0, 90), min_size=1, max_size=3),
)
def test_deep_enough_it_is_the_queue_plan(data, cards, specs, steps):
    busy = data.draw(timelines(cards))
    bounded = BoundedPlan(cards, timeline_of(busy), now=T, depth=len(specs))
    whole = QueuePlan(cards, timeline_of(busy), now=T)
    for n, spec in enumerate(specs, 1):
        key, request = keyed(n, spec)
        bounded.add(key, request)
        whole.add(key, request)
    assert not bounded.tail
    assert bounded.decisions() == whole.decisions()
    for minutes in sorted(steps):
        a = bounded.advance(T + minutes * M)
        b = whole.advance(T + minutes * M)
        assert [e.decision for e in a] == [e.decision for e in b]
        assert bounded.decisions() == whole.decisions()


@SETTINGS
@given(st.data(), pools(), st.lists(requests, min_size=2, max_size=9), st.integers(1, 2))
def test_a_reorder_keeps_head_and_tail_in_the_new_order(data, cards, specs, depth):
    busy = data.draw(timelines(cards))
    plan = BoundedPlan(cards, timeline_of(busy), now=T, depth=depth)
    for n, spec in enumerate(specs, 1):
        plan.add(*keyed(n, spec))
    started = plan.advance(T)
    # the new keys: the reverse order (a recomputation of the fair-share factors)
    plan.reorder(lambda r: (0, 0, T, -r.lease_id), now=T)
    started += plan.advance(T)
    _check(plan, cards, busy, started, T)


def test_a_tail_lease_is_told_a_start_when_cards_are_free_in_order():
    # two cards, both held for an hour; a depth of one: the head takes the first card free
    cards = [CardSlot(1, 1, 0), CardSlot(2, 1, 0)]
    busy = {1: [(T - 10 * M, T + 60 * M)], 2: [(T - 10 * M, T + 60 * M)]}
    plan = BoundedPlan(cards, timeline_of(busy), now=T, depth=1)
    for n in (1, 2, 3):
        plan.add(*keyed(n, (1, 60, 0, True, 60 - n)))
    assert plan.decisions()[0].start == T + 60 * M
    told = plan.tail_estimates(T)
    assert [e.request.lease_id for e, _t in told] == [2, 3]
    starts = [t for _e, t in told]
    # not before a card is free; the second once the card beside the head's has been free
    # for the hour of work ahead of it
    assert starts[0] == T + 60 * M
    assert starts[1] == T + 120 * M
    assert plan.tail_estimate(3, T) == starts[1]
    assert plan.tail_estimate(99, T) is None


def test_free_time_counts_free_cards_and_waits_for_enough_of_them():
    timeline = Timeline(busy=defaultdict(list))
    timeline.add(1, T, T + 60 * M)
    free = FreeTime(timeline, 2, T)
    # one card free from T: 30 card-minutes are covered at T + 30 min
    assert free.at(30 * 60, 1) == T + 30 * M
    # two cards: only from T + 60 min
    assert free.at(30 * 60, 2) == T + 60 * M
    # 150 card-minutes: 60 by T + 60 min (one card), the other 90 on both cards in 45 minutes
    assert free.at(150 * 60, 1) == T + 105 * M


def test_a_depth_below_one_is_refused():
    with pytest.raises(ValueError):
        BoundedPlan([], Timeline(), now=T, depth=0)


def test_a_tail_lease_that_fits_now_starts_around_the_head():
    # two nodes of one card; node 1 busy for an hour, then the head's (long) reservation;
    # a tail lease that ends as the head starts fits node 2 now and starts; a longer one,
    # which would run into the head's reservation, does not
    cards = [CardSlot(1, 1, 0), CardSlot(2, 2, 0)]
    busy = {1: [(T - 10 * M, T + 60 * M)]}
    plan = BoundedPlan(cards, timeline_of(busy), now=T, depth=1)
    plan.add(*keyed(1, (2, 120, 60, False, 120)))  # needs both cards, from T + 60 min
    plan.add(*keyed(2, (1, 60, 0, True, 60)))  # an hour: ends on node 2 as the head starts
    plan.add(*keyed(3, (1, 90, 0, True, 50)))  # 90 min: would delay the head
    started = plan.advance(T)
    assert [e.request.lease_id for e in started] == [2]
    assert started[0].decision.card_ids == (2,)
    assert [e.request.lease_id for e in plan.tail] == [3]
    assert plan.decisions()[0].start == T + 60 * M


def test_the_head_takes_its_best_fit_again_around_what_the_tail_started():
    # node 1 of two cards, node 2 of three; the head (one card from T + 30 min) is planned on
    # node 1, the fuller one; the tail's two-card lease fits only node 2 now, and then node
    # 2 has one card free over the head's window: the best fit, as the full planner says
    cards = [CardSlot(11, 1, 0), CardSlot(12, 1, 0)] + [CardSlot(c, 2, 0) for c in (21, 22, 23)]
    plan = BoundedPlan(cards, Timeline(), now=T, depth=1)
    plan.add(*keyed(1, (1, 60, 30, True, 120)))
    assert plan.decisions()[0].card_ids == (11,)
    plan.add(*keyed(2, (2, 60, 0, True, 60)))
    started = plan.advance(T)
    assert [(e.request.lease_id, e.decision.card_ids) for e in started] == [(2, (21, 22))]
    assert plan.decisions()[0].card_ids == (23,)
    _check(plan, cards, {}, started, T)
