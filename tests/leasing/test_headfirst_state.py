"""``HeadFirstPlan`` driven as the passes drive it, by a Hypothesis state machine: leases of
one team or two join, leave and start as time moves; now and then the plan is taken back
from what a pass stored (``restore``, as the next pass in another process does) or planned
again from scratch (``rebuild``). After every step:

- its bookkeeping (the reservations it tells from the holders, the leases per team), where
  it keeps any, is what the plan's entries say;
- after ``advance``, the plan is the full plan of the queue: ``settled`` (head-first) where
  one team waits, ``planner.plan_queue`` with every reservation kept where two do.
"""

from collections import Counter

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from leasing.scheduler.headfirst import HeadFirstPlan
from leasing.scheduler.planner import Request, plan_queue
from tests.leasing.test_headfirst import _copy, _holders, settled
from tests.leasing.test_queueplan import M, T, keyed, pools, requests, timelines


class HeadFirstMachine(RuleBasedStateMachine):
    @initialize(data=st.data(), cards=pools())
    def start(self, data, cards):
        self.cards = cards
        self.busy = data.draw(timelines(cards))
        self.now = T
        self.next_id = 1
        self.team: dict[int, str] = {}
        self.waiting: dict[int, tuple] = {}  # lease -> (key, request): added, not started
        self.begun: dict[int, tuple] = {}  # lease -> (start, cards, duration)
        self.plan = self._fresh()
        self.settled = True  # ``advance`` ran since the last change

    def _fresh(self) -> HeadFirstPlan:
        holders = _holders(self.busy, self.begun)
        return HeadFirstPlan(self.cards, holders, now=self.now, team_of=self.team.get)

    # --- steps ----------------------------------------------------------------------------
    @precondition(lambda self: len(self.waiting) < 10)
    @rule(spec=requests, team=st.sampled_from(["lab", "lab", "lab", "other"]))
    def join(self, spec, team):
        n = self.next_id
        self.next_id += 1
        key, request = keyed(n, spec)
        # submitted later than those before it, not before now: a request as it comes
        request = Request(
            n, request.count, request.duration, max(request.not_before, self.now),
            request.same_node, request.nodes,
        )  # fmt: skip
        self.team[n] = team
        self.waiting[n] = (key, request)
        self.plan.add(key, request)
        self.settled = False

    @precondition(lambda self: self.waiting)
    @rule(data=st.data())
    def leave(self, data):
        gone = data.draw(st.sampled_from(sorted(self.waiting)))
        self.plan.remove(gone)
        del self.waiting[gone]
        self.settled = False

    @rule(minutes=st.sampled_from([0, 0, 1, 15, 30, 60, 120]))
    def advance(self, minutes):
        self.now += minutes * M
        out = self.plan.advance(self.now)
        for entry in out:
            d = entry.decision
            assert d.start is not None and d.start <= self.now
            self.begun[entry.request.lease_id] = (d.start, d.card_ids, entry.request.duration)
            del self.waiting[entry.request.lease_id]
        self.settled = True
        assert self.plan.decisions() == self._expected()

    @precondition(lambda self: self.settled)
    @rule()
    def restore(self):
        """The next pass, in a process that kept nothing: the stored plan taken back."""
        stored = [  # a lease that can never fit is stored with no cards
            (e.key, e.request, d.start, d.card_ids if d.start is not None else None)
            for e in self.plan.entries
            for d in [e.decision]
        ]
        plan = self._fresh()
        assert plan.restore(stored)  # nothing's start has come: ``advance`` took those out
        assert plan.decisions() == self.plan.decisions()
        self.plan = plan

    @precondition(lambda self: self.settled)
    @rule()
    def rebuild(self):
        """A pass with no stored plan: the queue planned from scratch, then advanced: nothing
        starts (the plan was settled) and the plan is the same."""
        plan = self._fresh()
        plan.rebuild(sorted(self.waiting.values(), key=lambda kr: kr[0]))
        assert plan.advance(self.now) == []
        assert plan.decisions() == self.plan.decisions()
        self.plan = plan

    # --- what must hold -------------------------------------------------------------------
    def _expected(self):
        holders = _holders(self.busy, self.begun)
        ordered = [r for _k, r in sorted(self.waiting.values(), key=lambda kr: kr[0])]
        if len({self.team[n] for n in self.waiting}) == 1:
            decisions, started = settled(self.cards, holders, ordered, self.now)
            assert started == {}
            return decisions
        holders.prune(self.now)
        queue = [
            Request(r.lease_id, r.count, r.duration, max(r.not_before, self.now), r.same_node,
                    r.nodes)
            for r in ordered
        ]  # fmt: skip
        decisions = plan_queue(self.cards, _copy(holders), queue)
        assert all(d.start is None or d.start > self.now for d in decisions)
        return decisions

    @invariant()
    def bookkeeping_is_what_the_entries_say(self):
        plan = self.plan
        if plan._reserved is not None:
            assert plan._reserved == {
                (c, e.decision.start, e.decision.start + e.request.duration)
                for e in plan.entries
                if e.decision.start is not None
                for c in e.decision.card_ids
            }
        if plan._teams is not None:  # (a team with none waiting is no team: not counted)
            teams = Counter(self.team[e.request.lease_id] for e in plan.entries)
            assert dict(plan._teams) == dict(teams)

    @invariant()
    def the_plan_holds_those_waiting(self):
        assert sorted(e.request.lease_id for e in self.plan.entries) == sorted(self.waiting)


HeadFirstMachine.TestCase.settings = settings(
    max_examples=150,
    stateful_step_count=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
test_head_first_plan_as_the_passes_drive_it = HeadFirstMachine.TestCase
