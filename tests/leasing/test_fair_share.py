"""Fair share between teams (scheduler.fairshare, teams.fairshare): the factor's rule, the
queue order it gives in the real code path (a request joining, the refresh, a recomputation
that moves the plan's version), what it never overrides (guaranteed shares, reservations),
and how it is shown and set (the team page, waiting_because, the API)."""

import random
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.urls import reverse
from django.utils import timezone, translation
from django.utils.dateparse import parse_datetime
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rest_framework.test import APIClient

from leasing.choices import LeaseStatus
from leasing.lifecycle.waiting import because_text, waiting_because
from leasing.models import (
    FairShare,
    FairSharePolicy,
    GuaranteedShare,
    Lease,
    LeaseEvent,
    Notification,
    PlanVersion,
    QueueMark,
)
from leasing.notify.messages import estimate_why
from leasing.scheduler import fairshare, joining, plancache
from leasing.scheduler.planner import CardSlot, Request, Timeline
from leasing.scheduler.queueplan import QueuePlan, service_key
from leasing.scheduler.run import replan
from leasing.scheduler.snapshot import waiting_for
from leasing.teams import fairshare as fair_services
from tests.factories import CardModelFactory, make_node
from tests.leasing.conftest import ask, hours
from tests.leasing.test_queue_stale import full_plan, refresh_all, stored
from tests.leasing.test_queueplan import M, T, pools, requests, timeline_of, timelines
from tests.leasing.test_queueplan import full_plan as pure_full_plan

HALF = timedelta(days=7)

# --- the rule ----------------------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(
    use=st.lists(st.floats(0, 1e6), min_size=2, max_size=6),
    weights=st.lists(st.floats(0.1, 100), min_size=6, max_size=6),
)
def test_a_team_further_below_its_share_never_gets_a_lower_factor(use, weights):
    teams = range(len(use))
    found = fairshare.factors(dict(zip(teams, use, strict=False)), {t: weights[t] for t in teams})
    assert all(0 <= f <= 1 for f in found.values())
    ratio = {t: use[t] / weights[t] for t in teams}
    for a in teams:
        for b in teams:
            if ratio[a] < ratio[b]:
                assert found[a] >= found[b]
    if sum(use) == 0:
        assert set(found.values()) == {fairshare.NO_USE}


def test_at_its_share_a_team_has_half_and_without_use_one():
    assert fairshare.factors({1: 5.0, 2: 5.0}, {1: 1.0, 2: 1.0}) == {1: 0.5, 2: 0.5}
    assert fairshare.factors({1: 0.0, 2: 5.0}, {1: 1.0, 2: 1.0})[1] == 1.0
    # twice the weight, twice the use: still at its share
    assert fairshare.factors({1: 10.0, 2: 5.0}, {1: 2.0, 2: 1.0}) == {1: 0.5, 2: 0.5}


@settings(max_examples=100, deadline=None)
@given(
    spans=st.lists(
        st.tuples(st.integers(0, 20_000), st.integers(1, 5_000), st.integers(1, 8)), max_size=6
    ),  # fmt: skip
    later=st.integers(0, 30_000),
)
def test_the_ledger_decays_use_as_the_recomputation_reads_it(spans, later):
    """The bench's running ledger and the recomputation's sum over periods agree."""
    ledger = fairshare.Ledger(HALF, T)
    events = sorted(
        [(T + s * M, n) for s, _d, n in spans] + [(T + (s + d) * M, -n) for s, d, n in spans],
        key=lambda e: e[0],
    )
    now = T + later * M
    for at, n in events:
        if at <= now:
            ledger.hold("a", n, at)
    ledger.move(now)
    want = sum(n * fairshare.decayed(T + s * M, T + (s + d) * M, now, HALF) for s, d, n in spans)
    assert ledger.use.get("a", 0.0) == pytest.approx(want, rel=1e-6, abs=1e-6)


def test_recomputations_fall_at_fixed_times():
    every = timedelta(minutes=5)
    t = datetime(2026, 3, 2, 10, 0, 30, tzinfo=UTC)
    assert fairshare.due(None, t, every)
    assert not fairshare.due(t, t + timedelta(minutes=4), every)  # 10:04:30, no 10:05 passed
    assert fairshare.due(t, t + timedelta(minutes=4, seconds=30), every)  # 10:05:00


# --- the plan kept up to date, with factors that change ------------------------------------


def fair_key(n, team, request, submitted, factor):
    """Lease *n*'s key in the service order, its team's factor from *factor*."""
    return service_key(
        rank=100, submitted_at=submitted, duration=request.duration, count=request.count,
        lease_id=n, fair=factor[team],
    )  # fmt: skip


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_the_kept_plan_equals_a_full_plan_while_use_decays_and_requests_come_and_go(data):
    """Joins, leaves and time moving on are applied to the kept plan; a recomputation (use
    decayed, factors changed) gives every waiting lease its new key (``QueuePlan.reorder``:
    planned again from the start when the order changed). After every step the plan is what
    the full planner decides in the fair-share order of that moment."""
    cards = data.draw(pools())
    busy = {}
    plan = QueuePlan(cards, Timeline(), now=T)
    half = timedelta(hours=data.draw(st.sampled_from([1, 24, 168])))
    ledger = fairshare.Ledger(half, T - hours(5))
    for team in "abc":
        ledger.hold(team, data.draw(st.integers(0, 8)), T - hours(5))
    ledger.move(T)
    weights = {"a": 1.0, "b": data.draw(st.sampled_from([1.0, 2.0])), "c": 1.0}
    factor = fairshare.factors(ledger.use, weights)
    items = {}  # lease id -> (team, spec-derived request, submitted)
    now = T

    def key_of(n):
        return fair_key(n, *items[n], factor)

    def check():
        want = pure_full_plan(cards, busy, [(key_of(n), items[n][1]) for n in items], now)
        assert plan.decisions() == want

    for n in range(1, data.draw(st.integers(1, 16)) + 1):
        step = data.draw(st.sampled_from(["join", "join", "leave", "time", "recompute"]))
        if step == "join" or not items:
            count, minutes, after, same_node, before, nodes = data.draw(requests)
            request = Request(n, count, minutes * M, now + after * M, same_node, nodes)
            items[n] = (data.draw(st.sampled_from("abc")), request, now - before * M)
            plan.add(key_of(n), request)
        elif step == "leave":
            gone = data.draw(st.sampled_from(sorted(items)))
            plan.remove(gone)
            del items[gone]
        else:  # time moves on (to a planned start, or a little)
            starts = sorted({d.start for d in plan.decisions() if d.start is not None})
            now = data.draw(st.sampled_from(starts)) if starts else now + 10 * M
            for entry in plan.advance(now):
                team = items.pop(entry.request.lease_id)[0]
                ledger.hold(team, entry.request.count, now)
                for card_id in entry.decision.card_ids:
                    busy.setdefault(card_id, []).append(
                        (entry.decision.start, entry.decision.start + entry.request.duration)
                    )
            if step == "recompute":  # the factors change: new keys, the same order or not
                ledger.move(now)
                weights["b"] = data.draw(st.sampled_from([0.25, 1.0, 4.0]))  # an operator
                factor = fairshare.factors(ledger.use, weights)
                plan.reorder(lambda r: key_of(r.lease_id))
        check()


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_a_recomputation_between_two_passes_plans_from_its_own_time(data):
    """The replay's pass: the factors are recomputed at a moment after the last pass, when
    nothing started or ended since (``reorder(now=...)``), then time moves there
    (``advance``). Whoever starts then starts *then*, and the queue is what the full planner
    decides in the new order at that moment, with several teams whose ranking changes (a
    lease moved ahead may fit at once: planned from the last pass's time, it would start in
    the past and hold its cards from a moment it did not hold them)."""
    cards = data.draw(pools())
    busy = data.draw(timelines(cards))
    plan = QueuePlan(cards, timeline_of(busy), now=T)
    factor = {team: 1.0 for team in "abc"}
    items = {}  # lease id -> (team, request, submitted)

    def key_of(n):
        return fair_key(n, *items[n], factor)

    def moved(now):
        """A pass at *now*: those whose start has come start then (and hold their cards from
        then on); the rest is what the full planner decides around them."""
        for entry in plan.advance(now):
            assert entry.decision.start == now  # not at a moment already past
            del items[entry.request.lease_id]
            for card_id in entry.decision.card_ids:
                busy.setdefault(card_id, []).append((now, now + entry.request.duration))
        want = pure_full_plan(cards, busy, [(key_of(n), items[n][1]) for n in items], now)
        assert plan.decisions() == want

    now = T
    lease_id = 0
    for _round in range(data.draw(st.integers(1, 4))):
        for _join in range(data.draw(st.integers(0, 5))):
            lease_id += 1
            count, minutes, after, same_node, before, nodes = data.draw(requests)
            request = Request(lease_id, count, minutes * M, now + after * M, same_node, nodes)
            items[lease_id] = (data.draw(st.sampled_from("abc")), request, now - before * M)
            plan.add(key_of(lease_id), request)
        moved(now)  # the joins' pass
        # time moves on, no further than the next planned start (a pass comes at each)
        starts = [d.start for d in plan.decisions() if d.start is not None]
        room = int((min(starts) - now) / M) if starts else 30
        now += data.draw(st.integers(1, max(1, room))) * M
        if data.draw(st.booleans()):  # the factors are recomputed in between: a new ranking
            factor = {team: data.draw(st.sampled_from([0.1, 0.4, 0.5, 1.0])) for team in "abc"}
            plan.reorder(lambda r: key_of(r.lease_id), now=now)
        moved(now)


def test_a_lease_moved_ahead_between_two_passes_starts_at_the_recomputation_not_before():
    """The case the property test above finds: a one-card lease waits behind a whole-node
    one (it would be in its way); the factors put it ahead while nothing starts or ends, and
    it fits at once: it starts at the recomputation's moment, not at the last pass's."""
    cards = [CardSlot(10 + i, 1, 0) for i in range(4)]
    plan = QueuePlan(cards, timeline_of({10: [(T - 30 * M, T + 3 * M)]}), now=T)
    whole = Request(1, 4, 60 * M, T, False)
    one = Request(2, 1, 60 * M, T, False)
    factor = {1: 0.5, 2: 0.5}
    submitted = {1: T - 60 * M, 2: T}

    def key(request):
        n = request.lease_id
        return service_key(
            rank=100, submitted_at=submitted[n], duration=request.duration, count=request.count,
            lease_id=n, fair=factor[n],
        )  # fmt: skip

    plan.add(key(whole), whole)
    plan.add(key(one), one)
    assert plan.advance(T) == []
    assert [d.start for d in plan.decisions()] == [T + 3 * M, T + 63 * M]
    factor = {1: 0.1, 2: 1.0}  # the one-card lease's team is now far below its share
    plan.reorder(key, now=T + 2 * M)
    (started,) = plan.advance(T + 2 * M)
    assert (started.request.lease_id, started.decision.start) == (2, T + 2 * M)
    assert plan.decisions()[0].start == T + 62 * M


# --- in the database ---------------------------------------------------------------------


def _use(mapping):
    """A stand-in for the teams' decayed use (the allocations' sum is tested on its own)."""
    return lambda *, now, half, prices=None: dict(mapping)


@pytest.mark.parametrize("seed", range(6))
def test_requests_and_recomputations_keep_the_stored_plan_exact_after_the_refresh(
    seed, frozen, alice, bob, vision, nlp, a100, small_pool, monkeypatch,
    django_capture_on_commit_callbacks,
):  # fmt: skip
    rng = random.Random(seed)
    kept = seed % 2 == 1

    def committed():
        return django_capture_on_commit_callbacks(execute=kept)

    monkeypatch.setattr(joining, "JOIN_BUDGET", 8 * (1 + seed % 3))
    ask(bob, nlp, a100, count=8, duration=hours(1), same_node=False)  # the pool, 1 h
    recomputed = 0
    for i in range(12):
        user, team = (alice, vision) if i % 2 else (bob, nlp)
        with committed():
            lease = ask(
                user, team, a100, count=rng.randint(1, 4),
                duration=timedelta(minutes=30 * rng.randint(1, 16)),
            )  # fmt: skip
        if lease.status == LeaseStatus.QUEUED:
            lease.refresh_from_db()
            mark = QueueMark.objects.filter(card_model=a100).first()
            key = next(w.key for w in waiting_for(a100.pk, now=timezone.now())
                       if w.request.lease_id == lease.pk)  # fmt: skip
            if mark is None or key <= mark.key:  # exact: what the full planner decides
                want = full_plan(a100)[lease.pk]
                assert (lease.estimated_start, tuple(lease.planned_cards or ())) == (
                    want.start, want.card_ids,
                )  # fmt: skip
        if rng.random() < 0.4:  # the factors are recomputed with other use
            use = {vision.pk: rng.choice([0.0, 10.0, 100.0]), nlp.pk: rng.choice([0.0, 50.0])}
            monkeypatch.setattr(fair_services, "use_by_team", _use(use))
            before = PlanVersion.objects.get(card_model_id=a100.pk).version
            with committed():
                changed = fair_services.recompute()
            after = PlanVersion.objects.get(card_model_id=a100.pk).version
            assert after > before if changed else True
            recomputed += changed
            if changed and plancache.sharing() is False:
                # the waiting leases now carry the new factors in their keys
                factors = dict(FairShare.objects.values_list("team_id", "factor"))
                for w in waiting_for(a100.pk, now=timezone.now()):
                    team_id = Lease.objects.get(pk=w.request.lease_id).team_id
                    assert w.key[1] == -factors[team_id]
        if rng.random() < 0.3:
            refresh_all(a100, committed)
        if rng.random() < 0.2:
            frozen.shift(rng.randint(1, 120))
    assert recomputed  # the order changed at least once on the way
    refresh_all(a100, committed)
    assert stored(a100) == {pk: (d.start, d.card_ids or None) for pk, d in full_plan(a100).items()}


def test_a_recomputation_that_changes_the_order_moves_the_version_and_replans(
    frozen, alice, bob, vision, nlp, a100, small_pool, monkeypatch
):
    ask(bob, nlp, a100, count=8, duration=hours(1), same_node=False)
    first = ask(bob, nlp, a100, count=8, duration=hours(1), same_node=False)
    frozen.shift(60)
    second = ask(alice, vision, a100, count=8, duration=hours(1), same_node=False)
    first.refresh_from_db()
    second.refresh_from_db()
    assert first.estimated_start < second.estimated_start  # submitted first
    monkeypatch.setattr(fair_services, "use_by_team", _use({nlp.pk: 100.0, vision.pk: 1.0}))
    version = PlanVersion.objects.get(card_model_id=a100.pk).version
    assert fair_services.recompute()
    assert PlanVersion.objects.get(card_model_id=a100.pk).version > version
    first.refresh_from_db()
    second.refresh_from_db()
    assert second.estimated_start < first.estimated_start  # vision is further below its share
    assert not fair_services.recompute()  # nothing changed: nothing moves
    # bob is told why
    (because,) = [b for b in waiting_because(first, user=bob) if b.kind == "fair_share"]
    assert because.params["count"] == 1
    assert because.text.startswith("1 lease asked for later is served first")
    with translation.override("zh-hans"):
        assert "公平" in because_text(because)


def test_a_recomputation_that_keeps_the_order_keeps_the_plans_and_rewrites_the_mark(
    frozen, alice, bob, vision, nlp, a100, small_pool, monkeypatch
):
    """New factors that pass no team past another change no plan: no queue is planned again,
    the version still moves (kept pictures held the old keys), and the stale mark (a stored
    key) carries the new factor, so a request joining later is placed among keys of one
    recomputation; then the stored plan is still what the full planner decides."""
    monkeypatch.setattr(joining, "JOIN_BUDGET", 8)  # a join plans one lease: a mark is left
    ask(bob, nlp, a100, count=8, duration=hours(1), same_node=False)  # the pool, 1 h
    for user, team, minutes in ((bob, nlp, 600), (alice, vision, 600), (alice, vision, 30)):
        ask(user, team, a100, count=2, duration=timedelta(minutes=minutes))
        frozen.shift(60)
    mark = QueueMark.objects.get(card_model=a100)
    assert mark.key[1] == -1.0  # no team has used anything yet
    plans = stored(a100)
    version = PlanVersion.objects.get(card_model_id=a100.pk).version

    def no_replan(*args, **kwargs):
        raise AssertionError("planned again although the order stands")

    monkeypatch.setattr(fair_services, "replan", no_replan)
    monkeypatch.setattr(fair_services, "use_by_team", _use({nlp.pk: 10.0, vision.pk: 10.0}))
    assert fair_services.recompute()  # 1 -> 0.5 for both: a tie before, a tie after
    assert PlanVersion.objects.get(card_model_id=a100.pk).version > version
    assert stored(a100) == plans
    assert QueueMark.objects.get(card_model=a100).key[1] == -0.5
    ask(bob, nlp, a100, count=1, duration=timedelta(minutes=30))  # placed by the new keys
    refresh_all(a100)
    assert stored(a100) == {pk: (d.start, d.card_ids or None) for pk, d in full_plan(a100).items()}
    # a ranking that changes (vision passes nlp): planned again, exact once refreshed
    monkeypatch.setattr(fair_services, "replan", replan)
    monkeypatch.setattr(fair_services, "use_by_team", _use({nlp.pk: 100.0, vision.pk: 1.0}))
    assert fair_services.recompute()
    refresh_all(a100)
    assert stored(a100) == {pk: (d.start, d.card_ids or None) for pk, d in full_plan(a100).items()}


def test_use_is_weighted_by_the_cards_list_price_and_decays(
    frozen, alice, bob, vision, nlp, monkeypatch
):
    dear = CardModelFactory(slug="h800-fs", name="H800 fs", price_per_hour=Decimal("40"))
    cheap = CardModelFactory(slug="t4-fs", name="T4 fs", price_per_hour=Decimal("4"))
    make_node(dear, cards=2, hostname="dear")
    make_node(cheap, cards=2, hostname="cheap")
    ask(alice, vision, dear, count=1, duration=hours(10))
    ask(bob, nlp, cheap, count=1, duration=hours(10))
    frozen.shift(hours(2))
    use = fair_services.use_by_team(now=timezone.now(), half=HALF)
    assert use[vision.pk] == pytest.approx(10 * use[nlp.pk], rel=1e-6)  # same hours, 10x price
    assert use[nlp.pk] == pytest.approx(4 * fairshare.decayed(T, T + hours(2), T + hours(2), HALF))
    fair_services.recompute()
    factors = dict(FairShare.objects.values_list("team_id", "factor"))
    assert factors[nlp.pk] > factors[vision.pk]


def test_fair_share_never_goes_before_a_guaranteed_share_or_a_reservation(
    frozen, alice, bob, vision, nlp, a100, small_pool, monkeypatch
):
    """vision has a guaranteed share and the lower factor: its lease within the share is
    still served first; a booked reservation keeps its cards through a recomputation."""
    GuaranteedShare.objects.create(team=vision, card_model=a100, cards=4, within_minutes=10)
    booked = ask(bob, nlp, a100, count=4, duration=hours(1), start_at=timezone.now() + hours(3))
    booked.refresh_from_db()
    assert booked.status == LeaseStatus.SCHEDULED
    cards = set(booked.allocations.values_list("card_id", flat=True))
    ask(bob, nlp, a100, count=8, duration=hours(1), same_node=False)  # the pool, 1 h
    theirs = ask(bob, nlp, a100, count=4, duration=hours(1))
    mine = ask(alice, vision, a100, count=4, duration=hours(1))
    monkeypatch.setattr(fair_services, "use_by_team", _use({vision.pk: 100.0, nlp.pk: 1.0}))
    assert fair_services.recompute()
    mine.refresh_from_db()
    theirs.refresh_from_db()
    assert mine.estimated_start <= theirs.estimated_start  # within its share: first
    booked.refresh_from_db()
    assert booked.status == LeaseStatus.SCHEDULED
    assert set(booked.allocations.values_list("card_id", flat=True)) == cards


# --- the start told: room for the work of teams ahead ---------------------------------------


@settings(max_examples=200, deadline=None)
@given(
    demand=st.lists(st.floats(0, 3), min_size=1, max_size=6),
    weights=st.lists(st.floats(0.1, 100), min_size=6, max_size=6),
)
def test_work_ahead_counts_every_other_team_up_to_its_share(demand, weights):
    teams = range(len(demand))
    w = {t: weights[t] for t in teams}
    d = {t: demand[t] for t in teams}
    found = fairshare.ahead(d, w)
    total = sum(w.values())
    assert set(found) == set(teams)
    for team in teams:
        expected = sum(min(d[t], w[t] / total) for t in teams if t != team)
        assert found[team] == pytest.approx(min(fairshare.AHEAD_MAX, expected), abs=1e-6)
        assert 0 <= found[team] <= fairshare.AHEAD_MAX
    if len(demand) == 1:
        assert found == {0: 0.0}  # one team: nobody passes it


def test_the_start_told_leaves_room_for_the_work_ahead():
    from leasing.scheduler.eta import told_start

    now, planned = T, T + hours(6)
    virtual = T - hours(1)  # nobody can pass it by virtual submit time any more
    assert told_start(planned, virtual_at=virtual, now=now) == planned
    assert told_start(planned, virtual_at=virtual, now=now, ahead=0.25) == now + hours(8)
    assert told_start(now, virtual_at=virtual, now=now, ahead=0.5) == now  # starts now
    at_most = told_start(planned, virtual_at=virtual, now=now, ahead=5.0)
    assert at_most == now + hours(6) / (1 - fairshare.AHEAD_MAX)
    # a move of the plan's start is measured on the starts told, each stretched alike
    from leasing.scheduler.eta import told_again, told_moves, virtual_of

    key = service_key(rank=100, submitted_at=T - hours(6), duration=hours(1), count=1, lease_id=7)
    moved = [(7, T + hours(2), T + hours(4))]
    basis = {"planned": (T + hours(4)).isoformat(), "virtual": virtual_of(key).isoformat()}
    assert told_moves(moved, {7: key}, now=now, ahead_of={7: 0.5}) == [
        (7, now + hours(4), now + hours(8), {**basis, "ahead": 0.5})
    ]
    assert told_moves(moved, {7: key}, now=now) == [(*moved[0], {**basis, "ahead": 0.0})]
    # what the new start told is made of tells it again: here, nobody can pass any more
    assert told_again({**basis, "ahead": 0.5}, now=now) == now + hours(8)


def test_a_recomputation_finds_the_work_ahead_of_each_team_and_the_lease_page_tells_it(
    frozen, alice, bob, vision, nlp, a100, small_pool, client, monkeypatch
):
    """nlp asked for a lot lately: vision's queued lease is told a later start than the
    plan's, by the work ahead (nlp's demand up to its share), on its page and in its list;
    nlp's by vision's little demand."""
    ask(bob, nlp, a100, count=8, duration=hours(10), same_node=False)  # the pool, 10 h
    mine = ask(alice, vision, a100, count=2, duration=hours(1))
    theirs = ask(bob, nlp, a100, count=2, duration=hours(1))
    frozen.shift(hours(5))
    monkeypatch.setattr(fair_services, "use_by_team", _use({vision.pk: 100.0, nlp.pk: 1.0}))
    assert fair_services.recompute()
    rows = {r.team_id: r for r in FairShare.objects.all()}

    def demand(card_hours):  # asked 5 h ago, per hour over the 8 cards (ln 2 / 12 h)
        return fairshare.decay(card_hours, hours(5), fairshare.ARRIVALS_HALF_LIFE) * 0.05776 / 8

    # nlp asked for 8 x 10 + 2 x 1 card-hours, at most its share (half); vision 2 x 1
    assert rows[vision.pk].ahead == pytest.approx(min(0.5, demand(82)), rel=0.01)
    assert rows[nlp.pk].ahead == pytest.approx(demand(2), rel=0.01)
    assert 0 < rows[nlp.pk].ahead < rows[vision.pk].ahead <= 0.5
    from leasing.scheduler.snapshot import work_ahead_of_leases

    assert work_ahead_of_leases([mine.pk, theirs.pk]) == {
        mine.pk: rows[vision.pk].ahead,
        theirs.pk: rows[nlp.pk].ahead,
    }  # what a pass measures their moves with
    mine.refresh_from_db()
    theirs.refresh_from_db()
    now = timezone.now()
    from leasing.lifecycle.selectors import lease_truth, with_truth

    told = lease_truth(mine, now=now).start
    wait = (mine.estimated_start - now) / (1 - rows[vision.pk].ahead)
    assert told == now + wait  # (its virtual submit time has passed: no margin for that)
    theirs_wait = (theirs.estimated_start - now) / (1 - rows[nlp.pk].ahead)
    assert lease_truth(theirs, now=now).start == now + theirs_wait
    listed = {lease.pk: lease.truth.start for lease in with_truth(Lease.objects.filter(pk=mine.pk))}
    assert listed[mine.pk] == told
    api = APIClient()
    api.force_authenticate(alice)
    listed = {r["id"]: r for r in api.get(reverse("lease-list")).json()["results"]}
    assert parse_datetime(listed[mine.pk]["effective_start"]) == told  # the API tells the same
    # the start told moved by hours: on its timeline and told to alice, with why
    (moved,) = LeaseEvent.objects.filter(lease=mine, kind="estimate_moved")
    assert moved.data["why"] == "fair_share"
    assert parse_datetime(moved.data["to"]) == told
    notice = Notification.objects.get(lease=mine, data__message="estimate_moved")
    assert "各团队的公平份额已重新计算" in notice.body  # alice reads Chinese
    with translation.override("en"):
        assert estimate_why("fair_share", {}) == "the teams' fair shares were recomputed"
    # recomputed again with nothing new: nothing moves, nobody is told again
    assert not fair_services.recompute()
    assert LeaseEvent.objects.filter(lease=mine, kind="estimate_moved").count() == 1
    client.force_login(alice)
    page = client.get(reverse("leasing:detail", args=[mine.pk]), HTTP_ACCEPT_LANGUAGE="en")
    assert page.status_code == 200
    shown = timezone.localtime(told).strftime("%Y-%m-%d %H:%M")
    html = page.content.decode()
    assert f"<dt>Estimated start</dt><dd>{shown} " in html
    # and when the plan has cards for it: the rest is room for other teams' work ahead
    planned = timezone.localtime(mine.estimated_start).strftime("%Y-%m-%d %H:%M")
    assert f"the queue's plan has cards for it from {planned}" in html


def test_the_preview_tells_the_start_the_lease_page_will_tell_with_work_ahead(
    frozen, alice, bob, vision, nlp, a100, small_pool
):
    """A request that will wait is previewed with its team's work ahead stretched into the
    start it is told, the start its page tells once it is submitted; without work ahead the
    preview tells the plan's start with the margin for smaller work only."""
    from leasing.lifecycle import request_steps
    from leasing.lifecycle.selectors import lease_truth

    ask(bob, nlp, a100, count=8, duration=hours(10), same_node=False)  # the pool, 10 h
    values = {"user": alice, "team": vision, "card_model": a100, "count": 2,
              "duration": hours(30)}  # fmt: skip
    bare = request_steps.lease_request_check(**values)
    FairShare.objects.update_or_create(team=vision, defaults={"ahead": 0.4})
    outlook = request_steps.lease_request_check(**values)
    now = timezone.now()
    assert outlook.start == bare.start == now + hours(10)  # the plan's start: the same
    # 60 card-hours: a slack of 4 h (the cap), a margin of 2 h for smaller work (the cap),
    # and 1 % of the wait (whole minutes, rounded down): 6 min of 10 h, 10 min of the 16 h 40 min stretched
    assert bare.told == bare.start + hours(2) + timedelta(minutes=6)
    assert outlook.told == now + hours(10) / (1 - 0.4) + hours(2) + timedelta(minutes=10)
    lease = ask(alice, vision, a100, count=2, duration=hours(30))
    assert lease.status == LeaseStatus.QUEUED
    assert lease_truth(lease, now=now).start == outlook.told


# --- shown and set -------------------------------------------------------------------------


def test_the_team_page_shows_share_use_and_factor(client, alice, vision, nlp, monkeypatch):
    monkeypatch.setattr(fair_services, "use_by_team", _use({vision.pk: 30.0, nlp.pk: 10.0}))
    fair_services.recompute()
    client.force_login(alice)
    url = reverse("team_detail", args=[vision.slug])
    page = client.get(url, HTTP_ACCEPT_LANGUAGE="en").content.decode()
    assert 'id="fair-share"' in page
    assert "Fair share: 0.50 of the pool (weight 1)." in page
    assert "Recent use: 0.75 of all teams" in page
    assert f"Fair-share factor: {2**-1.5:.2f}" in page
    ahead = FairShare.objects.get(team=vision).ahead
    assert f"Work of other teams that may pass yours: {ahead:.2f} of the pool." in page


def test_operators_set_weights_and_the_policy_through_the_api(api, ops, alice, vision):
    url = reverse("team-fair-share", args=[vision.slug])
    api.force_authenticate(ops)
    answer = api.get(url)
    assert answer.status_code == 200 and answer.json()["weight"] == 1.0
    assert answer.json()["ahead"] == 0.0  # nothing recomputed yet: nobody may pass
    answer = api.put(url, {"weight": 2, "ahead": 0.5}, format="json")
    assert answer.status_code == 400 and "ahead" in str(answer.json())  # read only
    assert api.put(url, {"weight": 3}, format="json").json()["weight"] == 3.0
    assert FairShare.objects.get(team=vision).weight == 3.0
    for bad in ({"weight": 0}, {"weight": -1}, {"weight": "many"}, {}):
        answer = api.put(url, bad, format="json")
        assert answer.status_code == 400, bad
        assert "weight" in answer.json()
    answer = api.put(url, {"weight": 2, "factor": 1}, format="json")
    assert answer.status_code == 400 and "factor" in str(answer.json())
    policy = reverse("api-fair-share")
    assert api.get(policy).json()["half_life_hours"] == 168.0
    answer = api.put(policy, {"half_life_hours": 24, "every_minutes": 10}, format="json")
    assert answer.status_code == 200
    assert (FairSharePolicy.current().half_life_hours, FairSharePolicy.current().every_minutes) == (
        24.0, 10,
    )  # fmt: skip
    for bad in ({"half_life_hours": 0}, {"every_minutes": 0}, {"every_minutes": 1.5},
                {"half_life": 3}):  # fmt: skip
        assert api.put(policy, bad, format="json").status_code == 400, bad
    api.force_authenticate(alice)
    assert api.put(url, {"weight": 9}, format="json").status_code == 403
    assert api.put(policy, {"half_life_hours": 1}, format="json").status_code == 403
    assert api.get(url).status_code == 200


def test_the_database_refuses_a_weight_of_zero(vision):
    from django.db import IntegrityError, transaction

    with pytest.raises(IntegrityError), transaction.atomic():
        FairShare.objects.create(team=vision, weight=0)
    with pytest.raises(IntegrityError), transaction.atomic():
        FairSharePolicy.objects.create(pk=1, half_life_hours=0)


def test_the_admin_sets_a_weight(client, vision):
    from tests.factories import UserFactory

    client.force_login(UserFactory(username="root", is_staff=True, is_superuser=True))
    answer = client.post(
        reverse("admin:leasing_fairshare_add"), {"team": vision.pk, "weight": "2.5"}
    )
    assert answer.status_code == 302
    assert FairShare.objects.get(team=vision).weight == 2.5
    change = reverse("admin:leasing_fairshare_change", args=[vision.pk])
    answer = client.post(change, {"team": vision.pk, "weight": "0"})
    assert answer.status_code == 200  # the form again, with the error
    assert FairShare.objects.get(team=vision).weight == 2.5
