"""The pure planner: placement and conservative backfill, without a database."""

from datetime import UTC, datetime, timedelta

from leasing.scheduler.planner import CardSlot, Request, Timeline, earliest, place, plan_queue

T = datetime(2026, 1, 1, tzinfo=UTC)
H = timedelta(hours=1)


def node(node_id, cards=8, domains=2, first_id=None, usable_until=None):
    first = first_id if first_id is not None else node_id * 100
    per = cards // domains
    return [CardSlot(first + i, node_id, i // per, usable_until) for i in range(cards)]


def test_single_domain_preferred_over_spanning_domains():
    cards = node(1)
    chosen = place(cards, Timeline(), 4, T, T + H, same_node=True)
    assert {c // 100 for c in chosen} == {1}
    assert len({cards[c - 100].domain for c in chosen}) == 1


def test_best_fit_fills_partly_used_node_and_keeps_whole_node_whole():
    cards = node(1) + node(2)
    timeline = Timeline()
    for card_id in (100, 101, 102, 103, 104, 105):  # node 1 has 2 free cards left
        timeline.add(card_id, T, T + 10 * H)
    chosen = place(cards, timeline, 2, T, T + H, same_node=True)
    assert chosen == [106, 107]


def test_same_node_required_refuses_to_span_nodes():
    cards = node(1, cards=4) + node(2, cards=4)
    assert place(cards, Timeline(), 6, T, T + H, same_node=True) is None
    spread = place(cards, Timeline(), 6, T, T + H, same_node=False)
    assert spread is not None and len(spread) == 6 and len(set(spread)) == 6


def test_draining_node_takes_only_leases_ending_before_drain():
    cards = node(1, cards=2, domains=1, usable_until=T + 2 * H)
    assert place(cards, Timeline(), 1, T, T + H, same_node=True) is not None
    assert place(cards, Timeline(), 1, T, T + 3 * H, same_node=True) is None


def test_free_check_handles_touching_periods():
    timeline = Timeline()
    timeline.add(1, T, T + H)
    timeline.add(1, T + 2 * H, T + 3 * H)
    assert timeline.is_free(1, T + H, T + 2 * H)  # exactly the gap
    assert not timeline.is_free(1, T + H, T + 2 * H + timedelta(seconds=1))
    assert not timeline.is_free(1, T - H, T + timedelta(seconds=1))


def test_earliest_start_is_when_enough_cards_free_up():
    cards = node(1, cards=2, domains=1)
    timeline = Timeline()
    timeline.add(100, T, T + 2 * H)
    timeline.add(101, T, T + 3 * H)
    decision = earliest(cards, timeline, Request(1, 2, H, T))
    assert decision.start == T + 3 * H


def test_backfill_starts_small_later_request_only_when_it_delays_no_one():
    # 2 cards; card 100 busy for 2 h, card 101 free. Head wants both for 1 h.
    cards = node(1, cards=2, domains=1)
    timeline = Timeline()
    timeline.add(100, T, T + 2 * H)
    short = Request(3, 1, H, T)  # fits on 101 before the head starts at T+2h: backfilled
    long = Request(4, 1, 5 * H, T)  # would push the head back: waits
    decisions = plan_queue(cards, timeline, [Request(2, 2, H, T), short, long])
    assert decisions[0].start == T + 2 * H
    assert decisions[1].start == T
    assert decisions[2].start == T + 3 * H


def test_request_larger_than_pool_never_fits():
    decision = earliest(node(1, cards=2, domains=1), Timeline(), Request(1, 3, H, T))
    assert decision.start is None
