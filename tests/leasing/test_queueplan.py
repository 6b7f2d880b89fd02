"""The queue plan kept up to date (scheduler.queueplan) decides exactly what the full planner
(``planner.plan_queue`` over the whole queue) decides, on random pools and timelines; and the
queue order (``service_key``) serves short work first without letting anyone be passed for
longer than the cap."""

from dataclasses import fields, replace
from datetime import UTC, datetime, timedelta

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from leasing.scheduler.planner import (
    CardSlot,
    Decision,
    Request,
    Timeline,
    _place_many,
    earliest,
    place,
    plan_queue,
)
from leasing.scheduler.queueplan import SLACK_CAP, QueuePlan, service_key
from leasing.scheduler.search import first_free_card, longest_gap

T = datetime(2026, 3, 2, tzinfo=UTC)
M = timedelta(minutes=1)


@st.composite
def pools(draw):
    cards = []
    for node in range(1, draw(st.integers(1, 4)) + 1):
        size = draw(st.integers(1, 4))
        domains = draw(st.integers(1, 2))
        drain = draw(st.sampled_from([None, None, None, T + 200 * M]))
        for i in range(size):
            cards.append(CardSlot(node * 10 + i, node, i % domains, drain))
    return cards


@st.composite
def timelines(draw, cards):
    """Busy periods per card, never overlapping on one card, all of positive length."""
    busy = {}
    for card in cards:
        t = T - 30 * M + draw(st.integers(0, 60)) * M
        periods = []
        for _ in range(draw(st.integers(0, 3))):
            length = draw(st.integers(1, 120)) * M
            periods.append((t, t + length))
            t += length + draw(st.integers(0, 60)) * M
        if periods:
            busy[card.card_id] = periods
    return busy


@st.composite
def coarse_timelines(draw, cards):
    """As ``timelines``, on a half-hour grid: cards on several nodes free up at once."""
    busy = {}
    for card in cards:
        t = T - 30 * M * draw(st.integers(0, 2))
        periods = []
        for _ in range(draw(st.integers(1, 3))):
            length = 30 * M * draw(st.integers(1, 4))
            periods.append((t, t + length))
            t += length + 30 * M * draw(st.integers(0, 2))
        busy[card.card_id] = periods
    return busy


def timeline_of(busy) -> Timeline:
    timeline = Timeline()
    for card_id, periods in busy.items():
        for s, e in periods:
            timeline.add(card_id, s, e)
    return timeline


requests = st.tuples(
    st.integers(1, 5),  # count
    st.integers(1, 240),  # minutes
    st.integers(0, 90),  # not before, minutes after T
    st.booleans(),  # same node
    st.integers(0, 120),  # submitted, minutes before T
    # the nodes its requirements allow (None: any), some of them not in the pool
    st.one_of(st.none(), st.none(), st.frozensets(st.integers(1, 5), min_size=1, max_size=3)),
)


def keyed(n, spec):
    count, minutes, after, same_node, before, *rest = spec
    nodes = rest[0] if rest else None
    request = Request(n, count, minutes * M, T + after * M, same_node, nodes)
    key = service_key(
        rank=100, submitted_at=T - before * M, duration=minutes * M, count=count, lease_id=n
    )
    return key, request


def full_plan(cards, busy, items, now):
    ordered = sorted(items, key=lambda kr: kr[0])
    queue = [
        Request(r.lease_id, r.count, r.duration, max(r.not_before, now), r.same_node, r.nodes)
        for _k, r in ordered
    ]
    return plan_queue(cards, timeline_of(busy), queue)


def started_now(plan, now, busy, items):
    """Time moves to *now*: those the plan starts leave the queue (*items*) and hold their
    cards (*busy*)."""
    for entry in plan.advance(now):
        for card_id in entry.decision.card_ids:
            busy.setdefault(card_id, []).append(
                (entry.decision.start, entry.decision.start + entry.request.duration)
            )
        del items[entry.request.lease_id]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_requests_joining_one_by_one_get_what_the_full_planner_decides(data):
    cards = data.draw(pools())
    busy = data.draw(timelines(cards))
    specs = data.draw(st.lists(requests, max_size=8))
    plan = QueuePlan(cards, timeline_of(busy), now=T)
    items = []
    for n, spec in enumerate(specs, start=1):
        items.append(keyed(n, spec))
        plan.add(*items[-1])
        assert plan.decisions() == full_plan(cards, busy, items, T)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_leaving_and_time_moving_on_keep_the_plan_exact(data):
    cards = data.draw(pools())
    busy = data.draw(timelines(cards))
    specs = data.draw(st.lists(requests, min_size=1, max_size=8))
    items = {n: keyed(n, spec) for n, spec in enumerate(specs, start=1)}
    plan = QueuePlan(cards, timeline_of(busy), now=T)
    plan.rebuild(items.values())
    assert plan.decisions() == full_plan(cards, busy, items.values(), T)
    # one waiting lease leaves
    gone = data.draw(st.sampled_from(sorted(items)))
    plan.remove(gone)
    del items[gone]
    assert plan.decisions() == full_plan(cards, busy, items.values(), T)
    # time moves to a moment the plan starts someone (or just on): those leave the queue and
    # hold their cards; the rest must be what the full planner decides at that moment
    starts = sorted({d.start for d in plan.decisions() if d.start is not None})
    now = data.draw(st.sampled_from(starts)) if starts else T + 10 * M
    started_now(plan, now, busy, items)
    assert plan.decisions() == full_plan(cards, busy, items.values(), now)
    # and a newcomer after that
    extra = keyed(99, data.draw(requests))
    plan.add(*extra)
    items[99] = extra
    assert plan.decisions() == full_plan(cards, busy, items.values(), now)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_time_moving_through_every_start_keeps_the_plan_exact(data):
    """Time moves from start to start: leases that start from behind others still waiting
    make those ahead be planned again, and those behind them move only if one ahead does
    (``advance`` leaves their reservations until a search needs them gone). Small requests on
    a half-hour grid, so that starting from behind, and moving, are common."""
    cards = data.draw(pools())
    busy = data.draw(coarse_timelines(cards))
    small = st.tuples(
        st.integers(1, 2), st.sampled_from([30, 60, 90, 150]), st.sampled_from([0, 0, 30, 60]),
        st.just(True), st.integers(0, 120),
    )  # fmt: skip
    specs = data.draw(st.lists(small, min_size=2, max_size=10))
    items = {n: keyed(n, spec) for n, spec in enumerate(specs, start=1)}
    plan = QueuePlan(cards, timeline_of(busy), now=T)
    plan.rebuild(items.values())
    now = T
    while items:
        starts = sorted(
            {d.start for d in plan.decisions() if d.start is not None and d.start > now}
        )
        if not starts:
            break
        now = starts[0]
        started_now(plan, now, busy, items)
        assert plan.decisions() == full_plan(cards, busy, items.values(), now)


def brute_earliest(cards, timeline, request):
    """``place`` at every candidate in turn: the definition ``earliest`` must match."""
    t0 = request.not_before
    ends = sorted({e for ps in timeline.busy.values() for _s, e in ps if e > t0})
    for t in [t0, *ends]:
        chosen = place(
            cards, timeline, request.count, t, t + request.duration, same_node=request.same_node
        )
        if chosen is not None:
            return Decision(request.lease_id, t, tuple(chosen))
    return Decision(request.lease_id, None)


@settings(max_examples=400, deadline=None)
@given(data=st.data())
def test_earliest_matches_trying_every_candidate(data):
    cards = data.draw(pools())
    busy = data.draw(timelines(cards))
    count, minutes, after, same_node, *_ = data.draw(requests)
    if data.draw(st.booleans()):
        count = 1  # the one-card shortcut
    request = Request(1, count, minutes * M, T + after * M, same_node)
    timeline = timeline_of(busy)
    assert earliest(cards, timeline, request) == brute_earliest(cards, timeline, request)


@settings(max_examples=400, deadline=None)
@given(data=st.data())
def test_a_request_across_nodes_starts_where_trying_every_candidate_finds(data):
    """Across nodes ``earliest`` sweeps the cards' free windows (``search.first_spread``) instead of
    trying every end: held to the definition on pools where it rarely fits at once."""
    cards = data.draw(pools())
    busy = data.draw(timelines(cards))
    count = data.draw(st.integers(2, max(2, len(cards))))
    # often a length that makes one card's window close where another's opens (a tie)
    ties = sorted(
        {(s - e) // M for ps in busy.values() for s, _e in ps for qs in busy.values()
         for _s, e in qs if s - e >= M}
    )  # fmt: skip
    minutes = data.draw(
        st.sampled_from(ties) if ties and data.draw(st.booleans()) else st.integers(1, 240)
    )
    # from a moment the pool is busy, often exactly at an end or a window's last moment
    moments = sorted({t for ps in busy.values() for s, e in ps for t in (s, e)}) or [T]
    at = data.draw(st.sampled_from(moments)) + data.draw(st.sampled_from([0, 0, 1, -1])) * M
    request = Request(1, count, minutes * M, at, False)
    timeline = timeline_of(busy)
    assert earliest(cards, timeline, request) == brute_earliest(cards, timeline, request)


@settings(max_examples=400, deadline=None)
@given(data=st.data())
def test_one_card_starts_and_is_placed_where_trying_every_candidate_finds(data):
    """One card: ``earliest`` chooses among the few cards that can be free at the first
    moment (``search.first_free_card``), not all of them: the same card as ``place`` at every
    candidate in turn, where cards on several nodes free up at the same moment."""
    cards = data.draw(pools())
    busy = data.draw(coarse_timelines(cards))
    minutes = data.draw(st.sampled_from([1, 29, 30, 31, 60, 90]))
    after = data.draw(st.sampled_from([0, 0, 30, 60, 1]))
    request = Request(1, 1, minutes * M, T + after * M, data.draw(st.booleans()))
    timeline = timeline_of(busy)
    assert earliest(cards, timeline, request) == brute_earliest(cards, timeline, request)


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_a_cards_longest_gap_kept_through_changes_is_never_shorter_than_its_gaps(data):
    """``Timeline`` keeps each card's longest gap through ``add`` and ``remove`` after the
    last period and forgets it elsewhere and in ``prune``: what it keeps is never shorter
    than the truth (a shorter one would let ``first_free_card`` skip a free window), so one
    card's search after any changes finds what trying every candidate finds."""
    cards = data.draw(pools())
    busy = data.draw(timelines(cards))
    timeline = timeline_of(busy)
    for _ in range(data.draw(st.integers(1, 12))):
        card = data.draw(st.sampled_from(cards)).card_id
        periods = timeline.busy[card]
        action = data.draw(st.sampled_from(["add", "remove", "prune", "ask"]))
        if action == "add":  # after its last period, or in a free window before it
            after = data.draw(st.booleans())
            s = (periods[-1][1] if periods and after else T) + data.draw(st.integers(0, 90)) * M
            e = s + data.draw(st.integers(1, 120)) * M
            if timeline.is_free(card, s, e):
                timeline.add(card, s, e)
        elif action == "remove" and periods:
            timeline.remove(card, *data.draw(st.sampled_from(periods)))
        elif action == "prune":
            timeline.prune(T + data.draw(st.integers(-30, 120)) * M)
        else:
            request = Request(1, 1, data.draw(st.integers(1, 120)) * M, T, True)
            earliest(cards, timeline, request)  # finds and keeps gaps
        for card_id, gap in timeline.gaps.items():
            if timeline.busy.get(card_id):
                assert gap >= longest_gap(timeline.busy[card_id])
    request = Request(1, 1, data.draw(st.integers(1, 120)) * M, T, True)
    assert earliest(cards, timeline, request) == brute_earliest(cards, timeline, request)


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_the_free_card_index_answers_as_the_walk_over_every_card(data):
    """``Timeline.watch`` keeps ``search.FreeIndex`` over a list of cards through ``add``,
    ``remove`` and ``prune``: after any changes, ``first_free_card`` answers from it exactly
    what the walk over every card answers (the same moment, the same cards to choose among),
    and so do the cards idle at a moment, on stretches with and without gaps, cards with an
    end of use, and cards with none. ``prune`` that skips the walk while no first period has
    ended (``Timeline.ends_from``) forgets what the walk forgets."""
    cards = data.draw(pools())
    watched, plain = Timeline(), Timeline()
    watched.watch(cards)
    walked = Timeline()  # ``prune`` always walks every card (no ``ends_from``)
    for _ in range(data.draw(st.integers(1, 16))):
        card = data.draw(st.sampled_from(cards)).card_id
        periods = plain.busy[card]
        action = data.draw(st.sampled_from(["add", "add", "remove", "prune", "ask"]))
        if action == "add":  # often right after its last period: one unbroken stretch
            s = (
                (periods[-1][1] if periods else T)
                + data.draw(st.sampled_from([0, 0, 0, 5, 60])) * M
                - data.draw(st.sampled_from([0, 0, 40])) * M
            )
            e = s + data.draw(st.integers(1, 120)) * M
            if plain.is_free(card, s, e):
                for timeline in (watched, plain, walked):
                    timeline.add(card, s, e)
        elif action == "remove" and periods:
            period = data.draw(st.sampled_from(periods))
            for timeline in (watched, plain, walked):
                timeline.remove(card, *period)
        elif action == "prune":
            now = T + data.draw(st.integers(-30, 240)) * M
            walked.ends_from = None
            for timeline in (watched, plain, walked):
                timeline.prune(now)
            assert {c: p for c, p in plain.busy.items() if p} == {
                c: p for c, p in walked.busy.items() if p
            }
        t0 = T + data.draw(st.integers(-30, 240)) * M
        d = data.draw(st.integers(1, 150)) * M
        assert first_free_card(cards, watched, t0, d) == first_free_card(cards, plain, t0, d)
        # the cards no period has begun on by t0 (``HeadFirstPlan._idle_now``)
        assert watched.index.idle(watched, t0) == [
            n for n, c in enumerate(cards)
            if not (plain.busy.get(c.card_id) and plain.busy[c.card_id][0][0] <= t0)
            and (c.usable_until is None or c.usable_until > t0)
        ]  # fmt: skip
    assert watched.index is not None and watched.index.cards is cards and plain.index is None


def test_a_request_moved_later_keeps_every_other_field():
    """``Request.not_before_at`` names the fields itself (no ``dataclasses.replace``): a field
    added to ``Request`` must be added there too, or it would fall back to its default."""
    assert [f.name for f in fields(Request)] == [
        "lease_id", "count", "duration", "not_before", "same_node", "nodes"
    ]  # fmt: skip
    request = Request(7, 3, 2 * M, T, False, frozenset({1, 2}))
    assert request.not_before_at(T + M) == replace(request, not_before=T + M)


@settings(max_examples=400, deadline=None)
@given(data=st.data())
def test_one_card_is_placed_as_the_general_placement_places_it(data):
    """``place`` for one card takes a leaner loop (``_place_one``): the same card as the
    general placement's, or None where it finds none."""
    cards = data.draw(pools())
    timeline = timeline_of(data.draw(timelines(cards)))
    start = T + data.draw(st.integers(-40, 300)) * M
    end = start + data.draw(st.integers(1, 240)) * M
    same_node = data.draw(st.booleans())
    general = _place_many(cards, timeline, 1, start, end, same_node=same_node)
    assert place(cards, timeline, 1, start, end, same_node=same_node) == general


def test_short_work_passes_long_work_submitted_a_little_earlier():
    long = service_key(rank=100, submitted_at=T, duration=8 * 60 * M, count=8, lease_id=1)
    short = service_key(rank=100, submitted_at=T + 5 * M, duration=30 * M, count=1, lease_id=2)
    assert short < long


def test_nobody_is_passed_by_work_submitted_more_than_the_cap_later():
    huge = service_key(rank=100, submitted_at=T, duration=1000 * 60 * M, count=64, lease_id=1)
    tiny = service_key(rank=100, submitted_at=T + SLACK_CAP + M, duration=M, count=1, lease_id=2)
    assert huge < tiny


def test_a_higher_class_comes_first_whatever_its_size():
    high = service_key(rank=200, submitted_at=T + 60 * M, duration=9 * 60 * M, count=8, lease_id=2)
    normal = service_key(rank=100, submitted_at=T, duration=M, count=1, lease_id=1)
    assert high < normal


def test_a_lease_starting_from_behind_counts_for_those_ahead_of_it():
    """Found by the property test: a lease planned behind a waiting one starts now; for the
    one ahead its cards are busy time added, and the best fit there changes."""
    cards = [CardSlot(10 + i, 1, 0) for i in range(4)] + [CardSlot(20 + i, 2, 0) for i in range(3)]
    specs = [(1, 1, 0, False, 0)] * 4 + [(1, 1, 1, False, 0), (1, 2, 0, False, 0)]
    items = {n: keyed(n, spec) for n, spec in enumerate(specs, start=1)}
    plan = QueuePlan(cards, Timeline(), now=T)
    plan.rebuild(items.values())
    plan.remove(1)
    del items[1]
    busy = {}
    for entry in plan.advance(T):
        busy[entry.decision.card_ids[0]] = [
            (entry.decision.start, entry.decision.start + entry.request.duration)
        ]
        del items[entry.request.lease_id]
    assert plan.decisions() == full_plan(cards, busy, items.values(), T)
    assert plan.decisions()[0].card_ids == (11,)


def test_a_stored_plan_on_cards_off_the_requests_nodes_is_not_trusted():
    """A lease's requirements allow only some nodes (``Request.nodes``): a stored plan that
    puts it elsewhere (its requirements changed, a node left its region) is replanned."""
    cards = [CardSlot(10, 1, 0), CardSlot(20, 2, 0)]
    key, request = keyed(1, (1, 60, 30, True, 0, frozenset({2})))
    plan = QueuePlan(cards, Timeline(), now=T)
    assert not plan.restore([(key, request, T + 30 * M, (10,))])
    assert len(plan) == 0
    assert plan.restore([(key, request, T + 30 * M, (20,))])
    plan = QueuePlan(cards, Timeline(), now=T)
    assert plan.rebuild([(key, request)]) == [Decision(1, T + 30 * M, (20,))]


def test_requests_joining_on_their_nodes_only():
    """Node 1 is free now, node 2 busy for an hour: a request allowed only on node 2 waits
    for it, and one allowed anywhere behind it still starts now on node 1."""
    cards = [CardSlot(10, 1, 0), CardSlot(20, 2, 0)]
    busy = {20: [(T - 10 * M, T + 60 * M)]}
    plan = QueuePlan(cards, timeline_of(busy), now=T)
    first = keyed(1, (1, 30, 0, True, 10, frozenset({2})))
    second = keyed(2, (1, 30, 0, True, 0))
    plan.add(*first)
    plan.add(*second)
    assert plan.decisions() == [Decision(1, T + 60 * M, (20,)), Decision(2, T, (10,))]
    assert plan.decisions() == full_plan(cards, busy, [first, second], T)


def test_every_planned_start_stays_in_the_start_index_while_requests_join_ahead():
    """Each request joining ahead moves everyone behind it, and the index of planned starts
    (what ``advance`` looks at first) is rebuilt when outdated starts pile up: the newcomer's
    own start must survive that (found by the four teams' replay: a lease started late)."""
    plan = QueuePlan([CardSlot(10, 1, 0)], Timeline(), now=T)
    for n in range(1, 41):  # each submitted before all the others: it joins at the head
        key = service_key(rank=100, submitted_at=T - n * M, duration=10 * M, count=1, lease_id=n)
        plan.add(key, Request(n, 1, 10 * M, T, False))
        indexed = {(start, lease) for start, lease, *_rest in plan._starts}
        assert all((e.decision.start, e.request.lease_id) in indexed for e in plan.entries)
    (head,) = plan.advance(T)
    assert head.request.lease_id == 40
