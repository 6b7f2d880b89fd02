"""The longest gap a timeline keeps per card (``Timeline.gaps``) never lets ``earliest`` answer
differently: on a timeline changed by adds, removes and prunes, with the gaps found by earlier
searches kept, every one-card search decides what trying every candidate decides."""

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from leasing.scheduler.planner import Request, earliest
from tests.leasing.test_queueplan import M, T, brute_earliest, pools, timeline_of, timelines


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_one_card_searches_on_a_changing_timeline_match_every_candidate(data):
    cards = data.draw(pools())
    timeline = timeline_of(data.draw(timelines(cards)))
    added = []
    for _ in range(data.draw(st.integers(1, 12))):
        minutes, after = data.draw(st.integers(1, 240)), data.draw(st.integers(0, 120))
        request = Request(1, 1, minutes * M, T + after * M)
        assert earliest(cards, timeline, request) == brute_earliest(cards, timeline, request)
        step = data.draw(st.sampled_from(["add", "remove", "prune", "search"]))
        if step == "add":  # the search's answer reserved, as a plan does
            decision = earliest(cards, timeline, request)
            if decision.start is not None:
                period = (decision.start, decision.start + request.duration)
                timeline.add(decision.card_ids[0], *period)
                added.append((decision.card_ids[0], *period))
        elif step == "remove" and added:
            timeline.remove(*added.pop(data.draw(st.integers(0, len(added) - 1))))
        elif step == "prune":
            timeline.prune(T + data.draw(st.integers(0, 90)) * M)
            added = [a for a in added if a[1:] in timeline.busy.get(a[0], [])]  # not pruned
