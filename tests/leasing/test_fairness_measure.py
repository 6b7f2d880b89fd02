"""The replay bench's fairness reading "work that could run" (bench/trace_replay.py
``Fairness.could_start``): a waiting job counts against a start only when the policy ordered
it behind that start and it could have run its whole length on the free cards without taking
cards promised to work ordered before it."""

import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import trace_replay as tr  # noqa: E402

NOW = datetime(2026, 1, 5, 9, tzinfo=UTC)
H = timedelta(hours=1)


class Runner:
    """A policy as ``Fairness`` reads it: an order and the cards it promised."""

    def __init__(self, order: dict, promises: dict):
        self.order, self.promises = order, promises

    def order_of(self, job):
        return self.order.get(job.id)

    def promised(self, card_id):
        return self.promises.get(card_id, ())


def job(jid, *, count=1, hours=2, team="a", same_node=True):
    return tr.Job(jid, NOW, hours * H, count, team, same_node)


@pytest.fixture
def fairness():
    cards = tr.grid_pool(2, 2)  # cards 1, 2 on node 1; 3, 4 on node 2
    return tr.Fairness(len(cards), cards)


def test_a_job_behind_the_start_that_fits_a_card_nobody_was_promised_counts(fairness):
    waiting, started = job(1), job(2, team="b")
    runner = Runner({1: 5, 2: 3}, {1: [(NOW + H, 1)]})  # card 1 promised in 1 h
    assert fairness.could_start(waiting, started, runner, {1, 2}, NOW)


def test_cards_promised_before_its_end_to_work_ordered_before_it_do_not_count(fairness):
    waiting, started = job(1), job(2, team="b")
    runner = Runner({1: 5, 2: 3}, {1: [(NOW + H, 1)], 2: [(NOW + H / 2, 4)]})
    assert not fairness.could_start(waiting, started, runner, {1, 2}, NOW)
    # promised only after its end, or to work ordered behind it: free for it
    later = Runner({1: 5, 2: 3}, {1: [(NOW + 3 * H, 1)], 2: [(NOW + H / 2, 9)]})
    assert fairness.could_start(waiting, started, later, {1, 2}, NOW)


def test_the_cards_of_the_start_itself_count_as_free(fairness):
    waiting, started = job(1), job(2, team="b")
    runner = Runner({1: 5, 2: 3}, {1: [(NOW, 3)]})  # the start took card 1
    assert fairness.could_start(waiting, started, runner, {1}, NOW)


def test_a_job_ordered_before_the_start_never_counts(fairness):
    waiting, started = job(1), job(2, team="b")
    assert not fairness.could_start(waiting, started, Runner({1: 2, 2: 3}, {}), {1, 2}, NOW)


def test_a_one_node_job_needs_its_cards_on_one_node(fairness):
    waiting, started = job(1, count=2), job(2, team="b")
    runner = Runner({1: 5, 2: 3}, {})
    assert not fairness.could_start(waiting, started, runner, {1, 3}, NOW)
    assert fairness.could_start(waiting, started, runner, {3, 4}, NOW)
    spread = job(3, count=2, same_node=False)
    assert fairness.could_start(spread, started, Runner({3: 5, 2: 3}, {}), {1, 3}, NOW)


# --- the replay's reclaim (``Reclaim``): the portal's rule on a simulated clock ------------


def test_the_replay_reclaims_for_a_team_below_its_share_and_counts_both_waits():
    """Team a fills a 2 x 2 pool with long jobs; team b's job comes an hour later: a's
    youngest job gives its cards back after the grace, b starts then, and a's job resumes
    with what it had left (plus the work lost) as soon as cards free: its wait is both."""
    import argparse

    cards = tr.grid_pool(2, 2)
    hog = [tr.Job(n, NOW + n * timedelta(minutes=5), 12 * H, 2, "a", True) for n in (1, 2)]
    late = tr.Job(3, NOW + 2 * H, 2 * H, 2, "b", True)
    args = argparse.Namespace(
        half_life=168, fair_every=5, check_full=True, slack_per_card_hour=15, slack_cap=4,
        depth=None, no_reclaim=False, grace=10, reclaim_lost=10,
    )  # fmt: skip
    out = tr.replay([*hog, late], cards, "portal", args)
    assert out["preempted"] == 1 and out["double"] == 0
    # b waited only for the grace, not for a's twelve hours
    assert late.start == late.submit + timedelta(minutes=10)
    # the youngest of a's jobs was taken back; it resumed when b's two hours were over
    victim, kept = hog[1], hog[0]
    assert kept.resumed_wait == 0 and victim.resumed_wait == (2 * H).total_seconds()
    assert out["mean"] == ((10 * 60) + victim.resumed_wait) / 3
    args.no_reclaim = True
    out = tr.replay([*hog, late], cards, "portal", args)
    assert out["preempted"] is None and late.start == hog[0].start + 12 * H


def test_a_lease_the_reclaim_lets_start_now_starts_in_the_same_pass():
    """Team b's four-card job waits for a whole node; its three-card job behind it could run
    now on node 1's free cards but for the four-card job's reservation there. The reclaim
    takes a's youngest node, the four-card job moves to it, and the three-card job starts
    at once, in the same pass (before, at the next event: later than its plan said)."""
    import argparse

    cards = tr.grid_pool(4, 4)
    m = timedelta(minutes=1)
    hog = [tr.Job(1, NOW, 10 * H, 1, "a", True)]
    hog += [tr.Job(n, NOW + 10 * m, 24 * H, 4, "a", True) for n in (2, 3, 4)]
    node, behind = (
        tr.Job(5, NOW + 2 * H, H, 4, "b", True),
        tr.Job(6, NOW + 2 * H, 20 * H, 3, "b", True),
    )
    args = argparse.Namespace(
        half_life=168, fair_every=5, check_full=True, slack_per_card_hour=15, slack_cap=4,
        depth=None, no_reclaim=False, grace=10, reclaim_lost=10,
    )  # fmt: skip
    out = tr.replay([*hog, node, behind], cards, "portal", args)
    assert out["preempted"] == 1 and out["double"] == 0
    assert behind.start == behind.submit  # it started in the reclaim's own pass
    assert node.start == node.submit + 10 * m  # on the youngest node, after the grace
    assert set(node.cards) == set(hog[3].cards)


def _row(**over):
    row = {
        "mean": 100.0, "p95": 200.0, "max": 300.0, "cpu": 1.0, "eta_first15": 0.9, "floor": False
    }  # fmt: skip
    return {**row, **over}


def test_the_overload_bar_names_each_part_the_portal_misses():
    """``--overload`` fails a row on each part of the issue's bar, the ETA target included."""
    easy = _row()
    assert tr.overload_verdict("x", {"easy": easy, "portal": _row(mean=90.0, p95=190.0)}) == []
    missed = tr.overload_verdict(
        "x", {"easy": easy, "portal": _row(p95=201.0, cpu=12.5, eta_first15=0.79)}
    )
    assert missed == ["x: mean", "x: p95", "x: CPU", "x: ETA"]
    # no job waited: no ETA to keep
    assert tr.overload_verdict("x", {"easy": easy, "portal": _row(mean=0, eta_first15=None)}) == [
        "x: p95"
    ]


def test_level_with_easy_passes_only_where_no_order_could_wait_less():
    """Level with EASY is short of the bar unless both are 0 or the portal's waits are at the
    floor (``at_floor``); the ``--table`` rows are held to the same bar, CPU included."""
    easy = _row()
    assert tr.overload_verdict("x", {"easy": easy, "portal": _row()}) == ["x: mean", "x: p95"]
    assert tr.overload_verdict("x", {"easy": easy, "portal": _row(floor=True)}) == []
    slow = _row(mean=90.0, p95=190.0, cpu=12.5, eta_1h15=0.95, eta_ratio=1.1)
    assert tr.verdict("x", {"easy": easy, "portal": slow}) == ["x: CPU"]


def _ran(jid, *, submit, start, card, count=1, hours=2):
    j = tr.Job(jid, NOW + submit * H, hours * H, count, "a", True)
    j.start, j.cards = NOW + start * H, (card,) if count == 1 else tuple(range(card, card + count))
    return j


def test_the_floor_is_one_card_jobs_taking_cards_the_moment_unwaiting_work_gives_them_back():
    first = _ran(1, submit=0, start=0, card=1)  # did not wait, ends at 2 h
    other = _ran(2, submit=0, start=0, card=2, hours=3)
    assert tr.at_floor([first, other, _ran(3, submit=1, start=2, card=1)])
    # nobody waited: the 0 = 0 rule covers it, not the floor
    assert not tr.at_floor([first, other])
    # the card was free for an hour before the waiting job took it
    assert not tr.at_floor([first, other, _ran(3, submit=1, start=3, card=1)])
    # a job that waited for two cards
    assert not tr.at_floor([first, other, _ran(3, submit=1, start=3, card=1, count=2)])
    # the card came from a job that had waited itself: its end was not the earliest it could be
    waited = _ran(1, submit=0, start=0.5, card=1, hours=1.5)
    assert not tr.at_floor([waited, other, _ran(3, submit=1, start=2, card=1)])
