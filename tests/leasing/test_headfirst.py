"""Backfill around the head where one team waits (scheduler.headfirst): after every step the
plan is ``settled``, worked out from scratch: the full planner's plan, those it starts now
holding their cards, then, in service order, every lease that fits now around the holders
and the head's reservation alone started too, and again until nothing more starts; with two
teams waiting it is ``QueuePlan`` exactly; the head is never delayed."""

from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

from leasing.scheduler.headfirst import HeadFirstPlan
from leasing.scheduler.planner import CardSlot, Request, Timeline, cards_for, place, plan_queue
from leasing.scheduler.queueplan import QueuePlan
from tests.leasing.test_queueplan import M, T, keyed, pools, requests, timeline_of, timelines

SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _copy(timeline: Timeline) -> Timeline:
    out = Timeline()
    for card_id, periods in timeline.busy.items():
        for period in periods:
            out.add(card_id, *period)
    return out


def settled(cards, holders: Timeline, ordered: list[Request], now):
    """(the plan of those left waiting, {lease: (start, cards)} of those started now): the
    rule of the module, from scratch."""
    holders = _copy(holders)
    holders.prune(now)
    queue = [
        Request(r.lease_id, r.count, r.duration, max(r.not_before, now), r.same_node, r.nodes)
        for r in ordered
    ]
    started = {}

    def hold(request, chosen):
        for c in chosen:
            holders.add(c, now, now + request.duration)
        started[request.lease_id] = (now, tuple(chosen))

    while True:
        decisions = plan_queue(cards, _copy(holders), queue)  # it adds what it plans
        due = [(r, d) for r, d in zip(queue, decisions, strict=True) if d.start == now]
        if due:
            for r, d in due:
                hold(r, d.card_ids)
            gone = {r.lease_id for r, _d in due}
            queue = [r for r in queue if r.lease_id not in gone]
            continue
        if len(queue) < 2:
            return decisions, started
        scratch = _copy(holders)
        head = decisions[0]
        if head.start is not None:
            for c in head.card_ids:
                scratch.add(c, head.start, head.start + queue[0].duration)
        easy = []
        for r in queue[1:]:
            if r.not_before > now:
                continue
            chosen = place(cards_for(cards, r), scratch, r.count, now, now + r.duration,
                           same_node=r.same_node)  # fmt: skip
            if chosen is not None:
                for c in chosen:
                    scratch.add(c, now, now + r.duration)
                easy.append((r, chosen))
        if not easy:
            return decisions, started
        for r, chosen in easy:
            hold(r, chosen)
        gone = {r.lease_id for r, _c in easy}
        queue = [r for r in queue if r.lease_id not in gone]


def _started(entries):
    return {e.request.lease_id: (e.decision.start, e.decision.card_ids) for e in entries}


def _holders(busy, started_so_far):
    holders = timeline_of(busy)
    for lease_id, (start, card_ids, duration) in started_so_far.items():
        del lease_id
        for c in card_ids:
            holders.add(c, start, start + duration)
    return holders


@SETTINGS
@given(
    st.data(),
    pools(),
    st.lists(requests, min_size=1, max_size=8),
    st.lists(st.integers(0, 90), min_size=1, max_size=3),
)
def test_the_plan_is_settled_after_every_step(data, cards, specs, steps):
    busy = data.draw(timelines(cards))
    note(f"{cards=} {busy=} {specs=} {steps=}")
    plan = HeadFirstPlan(cards, timeline_of(busy), now=T, team_of=lambda _lease: "lab")
    items = {n: keyed(n, spec) for n, spec in enumerate(specs, 1)}
    begun: dict[int, tuple] = {}  # lease -> (start, cards, duration)
    now = T
    waiting: dict[int, tuple] = {}  # those added and not started

    def check(now, out, *, exact=True):
        """*exact*: the plan had been settled at *now* already (only joins and leaves since),
        so what starts is ``settled``'s; else time moved on, and those whose planned start
        came start at it: then what is left must be settled with them holding their cards."""
        if exact:
            holders = _holders(busy, begun)
            ordered = [r for _k, r in sorted(waiting.values(), key=lambda kr: kr[0])]
            assert _started(out) == settled(cards, holders, ordered, now)[1]
        for entry in out:
            d = entry.decision
            assert d.start <= now
            begun[entry.request.lease_id] = (d.start, d.card_ids, entry.request.duration)
            del waiting[entry.request.lease_id]
        holders = _holders(busy, begun)
        ordered = [r for _k, r in sorted(waiting.values(), key=lambda kr: kr[0])]
        decisions, started = settled(cards, holders, ordered, now)
        assert started == {}
        assert plan.decisions() == decisions

    half = len(specs) // 2
    for n in range(1, half + 1):
        plan.add(*items[n])
        waiting[n] = items[n]
    check(T, plan.advance(T))
    for n in range(half + 1, len(specs) + 1):
        plan.add(*items[n])
        waiting[n] = items[n]
    check(T, plan.advance(T))
    for minutes in sorted(steps):
        now = max(now, T + minutes * M)
        check(now, plan.advance(now), exact=False)
    if waiting:
        gone = data.draw(st.sampled_from(sorted(waiting)))
        plan.remove(gone)
        del waiting[gone]
        check(now, plan.advance(now))


@SETTINGS
@given(
    st.data(),
    pools(),
    st.lists(requests, min_size=2, max_size=8),
    st.lists(st.integers(0, 90), min_size=1, max_size=3),
)
def test_with_two_teams_waiting_it_is_the_queue_plan(data, cards, specs, steps):
    busy = data.draw(timelines(cards))
    # the last lease of another team: it waits as long as anyone does
    team = {n: "lab" for n in range(1, len(specs))} | {len(specs): "other"}
    head_first = HeadFirstPlan(cards, timeline_of(busy), now=T, team_of=team.__getitem__)
    whole = QueuePlan(cards, timeline_of(busy), now=T)
    for n, spec in enumerate(specs, 1):
        head_first.add(*keyed(n, spec))
        whole.add(*keyed(n, spec))
    for minutes in sorted(steps):
        a = head_first.advance(T + minutes * M)
        b = whole.advance(T + minutes * M)
        if any(e.request.lease_id == len(specs) for e in a):
            break  # the other team started: from here one team may wait
        assert [e.decision for e in a] == [e.decision for e in b]
        assert head_first.decisions() == whole.decisions()


def test_a_shorter_lease_passes_one_waiting_but_never_the_head():
    # node 1: four cards held for an hour; node 2: two cards free
    cards = [CardSlot(c, 1, 0) for c in (11, 12, 13, 14)] + [CardSlot(21, 2, 0), CardSlot(22, 2, 0)]
    busy = {c: [(T - 10 * M, T + 60 * M)] for c in (11, 12, 13, 14)}
    one_team = HeadFirstPlan(cards, timeline_of(busy), now=T, team_of=lambda _lease: "lab")
    every = QueuePlan(cards, timeline_of(busy), now=T)
    for plan in (one_team, every):
        plan.add(*keyed(1, (4, 120, 0, True, 600)))  # the head: node 1 from T + 60 min
        plan.add(*keyed(2, (2, 120, 30, True, 500)))  # node 2 from T + 30 min
        plan.add(*keyed(3, (2, 240, 0, True, 400)))  # 4 h: fits node 2 now, delays lease 2
        plan.add(*keyed(4, (1, 60, 0, True, 200)))  # an hour: no hole that long now
    assert [d.start for d in every.decisions()] == [
        T + 60 * M,
        T + 30 * M,
        T + 150 * M,
        T + 180 * M,
    ]
    # every reservation kept: nothing starts (node 2 is kept free for lease 2)
    assert every.advance(T) == []
    # one team: lease 3 starts now on node 2; lease 2 moves behind the head on node 1, and
    # the head keeps its start
    started = one_team.advance(T)
    assert [(e.request.lease_id, e.decision.card_ids) for e in started] == [(3, (21, 22))]
    starts = {d.lease_id: d.start for d in one_team.decisions()}
    assert starts == {1: T + 60 * M, 2: T + 180 * M, 4: T + 180 * M}


def test_a_lease_that_would_delay_the_head_does_not_start():
    # one node of two cards, one held for an hour; the head needs both from then on. Ninety
    # minutes on the free card would delay it: that lease waits; an hour fits and starts
    cards = [CardSlot(1, 1, 0), CardSlot(2, 1, 0)]
    busy = {1: [(T - 10 * M, T + 60 * M)]}
    plan = HeadFirstPlan(cards, timeline_of(busy), now=T, team_of=lambda _lease: "lab")
    plan.add(*keyed(1, (2, 120, 0, True, 600)))
    plan.add(*keyed(2, (1, 90, 0, True, 500)))
    assert plan.advance(T) == []
    assert [d.start for d in plan.decisions()] == [T + 60 * M, T + 180 * M]
    plan.add(*keyed(3, (1, 60, 0, True, 400)))
    assert [(e.request.lease_id, e.decision.card_ids) for e in plan.advance(T)] == [(3, (2,))]
    assert [d.start for d in plan.decisions()] == [T + 60 * M, T + 180 * M]
