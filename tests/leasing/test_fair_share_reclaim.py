"""Fair share's reclaim (issue #31): a team below its share that would wait takes cards back
from teams above theirs — the rule (``fairshare.reclaim``, property-tested) and the real
queue pass (``preemption.fair_share_reclaim``): which leases give back, when, and which never
do (no agreement to be requeued, too young, about to end, a guaranteed share, the site's
policy off)."""

from datetime import UTC, datetime, timedelta

import pytest
from django.urls import reverse
from django.utils import translation
from hypothesis import given, settings
from hypothesis import strategies as st

from leasing.choices import EndReason, LeaseStatus, PreemptWhy
from leasing.lifecycle import endings
from leasing.lifecycle.validation import Checkpoint
from leasing.lifecycle.waiting import because_text, waiting_because
from leasing.models import FairShare, FairSharePolicy, Lease, Notification
from leasing.notify.messages import notice_text
from leasing.scheduler import fairshare
from leasing.scheduler.refresh import queue_tick
from leasing.teams.services import share_set
from tests.factories import make_node
from tests.leasing.conftest import T0, ask, hours
from tests.leasing.test_guaranteed_shares import active

SAVE = Checkpoint(signal="usr1", seconds=900, requeue=True)  # a 15-minute checkpoint
NOW = datetime(2026, 1, 1, tzinfo=UTC)

# --- the rule ----------------------------------------------------------------------------

TEAMS = ("a", "b", "c", "d")


@st.composite
def pools(draw):
    """A pool, the leases holding it (per team), weights, a floor, and a team asking."""
    holdings = []
    for n in range(draw(st.integers(0, 12))):
        started = NOW - timedelta(minutes=draw(st.integers(0, 600)))
        holdings.append(
            fairshare.Holding(
                n,
                draw(st.sampled_from(TEAMS)),
                draw(st.sampled_from((1, 2, 4, 8))),
                started,
                NOW + timedelta(minutes=draw(st.integers(1, 1440))),
            )
        )
    held = {t: sum(h.count for h in holdings if h.team == t) for t in TEAMS}
    pool = sum(held.values()) + draw(st.integers(0, 16))
    weights = {t: draw(st.sampled_from((0.5, 1.0, 3.0))) for t in TEAMS}
    floor = {t: draw(st.integers(0, 8)) for t in TEAMS if draw(st.booleans())}
    team = draw(st.sampled_from(TEAMS))
    waiting = {team} | set(draw(st.lists(st.sampled_from(TEAMS), max_size=3)))
    need = draw(st.integers(-2, 16))
    return holdings, held, pool or 1, weights, floor, team, waiting, need


@settings(max_examples=400, deadline=None)
@given(pools())
def test_reclaim_takes_only_what_the_rule_allows_and_enough_or_nothing(case):
    holdings, held, pool, weights, floor, team, waiting, need = case
    victims = fairshare.reclaim(
        team=team, need=need, pool=pool, held=held, weights=weights, waiting=waiting,
        holdings=holdings, now=NOW, floor=floor,
    )  # fmt: skip
    active = {t for t, n in held.items() if n} | set(waiting)
    share = fairshare.shares_of(pool, weights, active)
    if not victims:
        return
    # the team asking is below its share; enough is taken, and no lease more than needed
    assert held[team] < share[team]
    taken = sum(v.count for v in victims)
    assert taken >= need > taken - victims[-1].count
    for v in victims:
        assert v.team != team
        assert v.end - NOW >= fairshare.RECLAIM_MIN_LEFT
        assert NOW - v.started >= fairshare.RECLAIM_MIN_RUN
    # nobody falls below its fair share, nor below its floor (a guaranteed share)
    for t in {v.team for v in victims}:
        left = held[t] - sum(v.count for v in victims if v.team == t)
        assert left >= share[t] and left >= floor.get(t, 0)
    # the youngest first: a lease the rule passed over, younger than one it took, would
    # have taken its team below what it keeps
    chosen = {v.lease_id for v in victims}
    for h in holdings:
        if h.lease_id in chosen or h.team == team:
            continue
        eligible = h.end - NOW >= fairshare.RECLAIM_MIN_LEFT and (
            NOW - h.started >= fairshare.RECLAIM_MIN_RUN
        )
        younger = any((h.started, h.lease_id) > (v.started, v.lease_id) for v in victims)
        if eligible and younger and h.team in share:
            before = [v for v in victims if (v.started, v.lease_id) > (h.started, h.lease_id)]
            kept = max(share[h.team], floor.get(h.team, 0))
            given = sum(v.count for v in before if v.team == h.team)
            assert held[h.team] - given - h.count < kept


def test_a_team_at_or_above_its_share_takes_nothing_back():
    long = fairshare.Holding(1, "b", 4, NOW - hours(2), NOW + hours(10))
    args = dict(need=4, pool=8, weights={}, holdings=[long], now=NOW)
    assert fairshare.reclaim(team="a", held={"a": 4, "b": 4}, waiting={"a"}, **args) == []
    assert fairshare.reclaim(team="a", held={"a": 0, "b": 8}, waiting={"a"}, **args) == [long]
    # a heavier weight makes b's share the whole of what it holds: nothing to give
    heavy = {**args, "weights": {"a": 1.0, "b": 3.0}}
    assert fairshare.reclaim(team="a", held={"a": 0, "b": 8}, waiting={"a"}, **heavy) == []


# --- the queue pass ----------------------------------------------------------------------


@pytest.fixture
def eight(a100):
    return make_node(a100, cards=8, domains=1, hostname="f8")


def _nlp_fills_the_pool(bob, nlp, a100, *, checkpoint=SAVE, duration=None):
    duration = duration or hours(12)
    return [
        active(ask(bob, nlp, a100, count=4, duration=duration, checkpoint=checkpoint))
        for _ in range(2)
    ]


def _marked(leases):
    for lease in leases:
        lease.refresh_from_db()
    return [lease for lease in leases if lease.preempt_at is not None]


def _told_why(victim, mine, *, bob, lena, client, api):
    """The holder of a lease taken back for fair share is told so (notice, page, API), in
    their language, and the waiting lease says its cards are coming back."""
    # the holder is told why, in their language: not "a higher-priority request"
    assert victim.preempt_why == PreemptWhy.FAIR_SHARE
    note = Notification.objects.get(lease=victim, kind="preemption_warning")
    assert note.data["params"]["why"] == "fair_share"
    title, body = notice_text(note)
    assert "below its fair share" in body and "resumes in a new lease" in body
    assert "higher-priority" not in body
    with translation.override("zh-hans"):
        title, body = notice_text(note)
    assert "公平份额" in body and "更高优先级" not in body
    client.force_login(bob)
    page = client.get(f"/leases/{victim.pk}/", HTTP_ACCEPT_LANGUAGE="zh-hans").content.decode()
    assert 'data-because="fair_share"' in page and "低于其公平份额" in page
    assert "卡将被收回给低于公平份额的团队" in page and "更高优先级" not in page  # the timeline
    api.force_authenticate(bob)
    early = api.get(f"/api/v1/leases/{victim.pk}/").json()["ends_early"]
    assert (early["why"], early["because"]) == ("preemption", "fair_share")
    # the waiting lease says why it waits: its cards are being taken back, free then
    (taken,) = [b for b in waiting_because(mine, user=lena) if b.kind == "taken_back"]
    assert taken.params == {"count": 4, "at": victim.preempt_at, "why": "fair_share"}
    with translation.override("en"):
        assert "from teams above their fair share" in because_text(taken)
    with translation.override("zh-hans"):
        assert "高于公平份额" in because_text(taken)


def test_a_team_below_its_share_takes_cards_back_and_the_work_resumes(
    frozen,
    lena,
    bob,
    vision,
    nlp,
    a100,
    eight,
    sent_tasks,
    django_capture_on_commit_callbacks,
    client,
    api,
):
    first, second = _nlp_fills_the_pool(bob, nlp, a100)
    frozen.move_to(T0 + hours(2))
    with django_capture_on_commit_callbacks(execute=True):
        mine = ask(lena, vision, a100, count=4, duration=hours(3))
    assert mine.status == LeaseStatus.QUEUED
    # its own pass takes the cards back (it could not start before nlp's leases end, ten
    # hours away), so the first start it is told is already after the grace
    victims = _marked([first, second])
    assert len(victims) == 1  # four cards are needed: one lease, not both
    victim = victims[0]
    # its grace is its checkpoint's 15 minutes; the signal goes to its backend
    assert victim.preempt_at == T0 + hours(2) + timedelta(minutes=15)
    assert victim.preempted_for_id == mine.pk
    assert victim.events.get(kind="preemption_scheduled").data["why"] == "fair_share"
    assert ("leasing.tasks.checkpoint_lease", (victim.pk,)) in [
        (t.name, t.args) for t in sent_tasks
    ]
    mine.refresh_from_db()
    assert mine.estimated_start == victim.preempt_at
    _told_why(victim, mine, bob=bob, lena=lena, client=client, api=api)
    # nlp keeps its share: the other lease runs on
    queue_tick(a100.pk)
    assert len(_marked([first, second])) == 1

    frozen.move_to(victim.preempt_at)
    assert endings.preemptions_due() == 1
    victim.refresh_from_db()
    assert victim.end_reason == EndReason.PREEMPTED
    page = client.get(f"/leases/{victim.pk}/", HTTP_ACCEPT_LANGUAGE="en").content.decode()
    assert "Preempted for a team below its fair share" in page
    assert "higher-priority" not in page
    resumed = Lease.objects.get(resumes=victim)
    assert resumed.status == LeaseStatus.QUEUED and resumed.team == nlp
    assert resumed.duration == victim.end_at - victim.ended_at  # the time it still had
    queue_tick(a100.pk)
    mine.refresh_from_db()
    assert mine.status != LeaseStatus.QUEUED and mine.start_at == victim.preempt_at


@pytest.mark.parametrize(
    "case", ["no requeue", "too young", "about to end", "policy off", "guaranteed share"]
)
def test_what_fair_share_never_takes_back(case, frozen, ops, lena, bob, vision, nlp, a100, eight):
    checkpoint = None if case == "no requeue" else SAVE
    duration = hours(7) if case == "about to end" else hours(12)
    if case == "guaranteed share":
        share_set(user=ops, team=nlp, card_model=a100, cards=8, within_minutes=5)
    leases = _nlp_fills_the_pool(bob, nlp, a100, checkpoint=checkpoint, duration=duration)
    if case == "policy off":
        FairSharePolicy.objects.update_or_create(pk=1, defaults={"reclaim": False})
    frozen.move_to(T0 + (hours(0.5) if case == "too young" else hours(2)))
    mine = ask(lena, vision, a100, count=4, duration=hours(3))
    queue_tick(a100.pk)
    mine.refresh_from_db()
    assert mine.status == LeaseStatus.QUEUED
    assert _marked(leases) == []
    assert mine.estimated_start == min(lease.end_at for lease in leases)


def test_a_team_that_weighs_more_keeps_more(frozen, lena, bob, vision, nlp, a100, eight):
    FairShare.objects.create(team=nlp, weight=3)  # nlp's share: 6 of the 8 cards
    leases = _nlp_fills_the_pool(bob, nlp, a100)
    frozen.move_to(T0 + hours(2))
    ask(lena, vision, a100, count=4, duration=hours(3))
    queue_tick(a100.pk)
    assert _marked(leases) == []  # giving back four would take nlp to 4 < 6


def test_operators_turn_reclaim_off_and_on_through_the_api(api, ops, alice):
    url = reverse("api-fair-share")
    api.force_authenticate(ops)
    assert api.get(url).json()["reclaim"] is True
    answer = api.put(url, {"reclaim": False}, format="json")
    assert answer.status_code == 200 and answer.json()["reclaim"] is False
    assert FairSharePolicy.current().reclaim is False
    answer = api.put(url, {"reclaim": "sometimes"}, format="json")
    assert answer.status_code == 400 and "reclaim" in answer.json()
    api.force_authenticate(alice)
    assert api.put(url, {"reclaim": True}, format="json").status_code == 403
    assert FairSharePolicy.current().reclaim is False


def test_the_admin_turns_reclaim_off(client, db):
    from tests.factories import UserFactory

    client.force_login(UserFactory(username="root", is_staff=True, is_superuser=True))
    FairSharePolicy.current()
    change = reverse("admin:leasing_fairsharepolicy_change", args=[1])
    form = {"half_life_hours": "168", "every_minutes": "5"}  # the box unticked: off
    assert client.post(change, form).status_code == 302
    assert FairSharePolicy.current().reclaim is False
    assert client.post(change, {**form, "reclaim": "on"}).status_code == 302
    assert FairSharePolicy.current().reclaim is True
