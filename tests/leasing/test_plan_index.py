"""The planner's picture keeps its waiting leases by lease id and its off-peak policies
(``plancache.Picture.index``, ``policies``) up to date as passes change it
(``plancache._advance``: leases join, start, are booked, get new plans; few changes are made
lease by lease, many by one walk). Random passes on random queues: after each, the picture
is what the same passes give a picture without an index (the whole walk), and the index and
policies are what building them again gives."""

from dataclasses import replace
from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from leasing.scheduler import plancache
from leasing.scheduler.planner import Decision, Request, Timeline
from leasing.scheduler.queueplan import service_key
from leasing.scheduler.snapshot import Waiting

T0 = datetime(2026, 1, 5, 9, tzinfo=UTC)


def waiting(lease_id: int, minutes: int, policy: bool) -> Waiting:
    request = Request(lease_id, 1 + lease_id % 3, timedelta(hours=1), T0)
    key = service_key(
        rank=lease_id % 2, submitted_at=T0 + timedelta(minutes=minutes),
        duration=request.duration, count=request.count, lease_id=lease_id,
    )  # fmt: skip
    return Waiting(key, request, None, None, "", "off_peak" if policy else "")


def picture(queue: list[Waiting]) -> plancache.Picture:
    return plancache.Picture(1, [], Timeline(), sorted(queue, key=lambda w: w.key))


lease = st.tuples(st.integers(0, 600), st.booleans())  # (submit minute, off-peak policy)


@st.composite
def passes(draw):
    """A queue, then passes: each some newcomers, some leases started or booked, some plans
    stored (their estimated start and cards)."""
    first = draw(st.lists(lease, max_size=40))
    queue = [waiting(n, m, p) for n, (m, p) in enumerate(first)]
    ids = list(range(len(queue)))
    steps = []
    for _ in range(draw(st.integers(1, 5))):
        added = [waiting(len(ids) + n, m, p) for n, (m, p) in enumerate(draw(st.lists(lease)))]
        ids += [w.request.lease_id for w in added]
        picked = st.sampled_from(ids) if ids else st.nothing()
        gone = draw(st.lists(picked, max_size=70, unique=True)) if ids else []
        many = st.integers(0, 80) if draw(st.booleans()) else st.integers(0, 6)
        shown = {
            pk: (T0 + timedelta(minutes=draw(st.integers(0, 99))), "", (pk % 7,))
            for pk in (draw(st.lists(picked, max_size=draw(many), unique=True)) if ids else [])
        }
        steps.append((added, gone, shown))
    return queue, steps


def applied(gone: list[int], shown: dict, requests: dict[int, Request]):
    started = [(requests[pk], Decision(pk, T0, ())) for pk in gone if pk % 2]
    booked = [
        (requests[pk], Decision(pk, T0 + timedelta(hours=1), ())) for pk in gone if pk % 2 == 0
    ]
    return plancache.Applied(started=started, booked=booked, shown=dict(shown))


def expected(queue: list[Waiting], added, gone, shown) -> list[Waiting]:
    """What a pass leaves, said plainly: the newcomers in, those gone out, plans stored."""
    out = []
    for w in sorted([*queue, *added], key=lambda w: w.key):
        pk = w.request.lease_id
        if pk in gone:
            continue
        if pk in shown:
            eta, stall, planned = shown[pk]
            w = replace(w, estimated_start=eta, stall_reason=stall, planned_cards=planned)
        out.append(w)
    return out


@settings(max_examples=300, deadline=None)
@given(passes(), st.booleans())
def test_the_index_follows_the_passes(case, asked_first):
    queue, steps = case
    kept = picture(queue)
    want = list(kept.waiting)
    if asked_first:
        kept.index(), kept.policies()
    requests = {w.request.lease_id: w.request for w in queue}
    for added, gone, shown in steps:
        requests.update((w.request.lease_id, w.request) for w in added)
        done = {pk for pk in gone if pk in requests}
        plancache._advance(kept, [(applied(sorted(done), shown, requests), T0)], added)
        want = expected(want, added, done, shown)
        assert kept.waiting == want
        if kept.by_id is not None:
            assert kept.by_id == {w.request.lease_id: w for w in want}
            assert all(kept.by_id[w.request.lease_id] is w for w in kept.waiting)
        if kept.start_policies is not None:
            assert kept.start_policies == {
                w.request.lease_id: w.start_policy for w in want if w.start_policy
            }
        if len(done) % 2:  # asked for now and then, so later passes find them built
            assert kept.index() == {w.request.lease_id: w for w in want}
            kept.policies()
        for pk in done:
            requests.pop(pk)


def test_a_stored_plan_replaces_the_entry_the_index_holds():
    queue = [waiting(n, 10 * n, n == 2) for n in range(5)]
    p = picture(queue)
    p.index()
    plan = (T0 + timedelta(hours=3), "", (4,))
    plancache._advance(p, [(plancache.Applied([], [], {3: plan}), T0)])
    now = p.index()[3]
    assert any(w is now for w in p.waiting) and len(p.waiting) == len(queue)
    assert now == replace(queue[3], estimated_start=plan[0], planned_cards=(4,))
