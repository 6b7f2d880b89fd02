"""Guaranteed shares (issue #18): a team's cards are lent to others while it does not use
them, and taken back — borrowed work first — within the share's stated time when it asks."""

from datetime import timedelta

import pytest
import time_machine
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from hypothesis import HealthCheck, example, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from leasing.choices import EndReason, LeaseStatus, Priority
from leasing.lifecycle import endings, provisioning
from leasing.models import GuaranteedShare, Lease
from leasing.teams.services import share_set
from tests.factories import CardModelFactory, TeamFactory, make_node
from tests.leasing.conftest import T0, ask, hours


def active(lease):
    provisioning.provision_step(lease_id=lease.pk)
    lease.refresh_from_db()
    return lease


@pytest.fixture
def eight(a100):
    return make_node(a100, cards=8, domains=1, hostname="s8")


def test_idle_share_is_lent_then_taken_back_within_its_time(
    frozen, ops, lena, bob, vision, nlp, a100, eight, sent_tasks
):
    share_set(user=ops, team=vision, card_model=a100, cards=4, within_minutes=3)
    # nlp fills the pool while vision does not use its share: the first four cards are not
    # owed to anyone, the next four are vision's, lent.
    own = active(ask(bob, nlp, a100, count=4, duration=hours(8)))
    lent = active(ask(bob, nlp, a100, count=4, duration=hours(8)))
    assert (own.lent, lent.lent) == (False, True)

    mine = ask(lena, vision, a100, count=4, duration=hours(2))
    assert mine.status == LeaseStatus.QUEUED
    lent.refresh_from_db()
    own.refresh_from_db()
    # Taken back within the share's 3 minutes (shorter than the site's 10-minute grace),
    # from the lease on loan; the lease inside nlp's own room is untouched.
    assert lent.preempt_at == T0 + timedelta(minutes=3)
    assert lent.preempted_for_id == mine.pk
    assert own.preempt_at is None
    mine.refresh_from_db()
    assert mine.estimated_start == T0 + timedelta(minutes=3)
    event = lent.events.get(kind="preemption_scheduled")
    assert event.data["reclaim"] is True
    # its holder is told a guaranteed share takes them back, not a higher class
    assert lent.preempt_why == "share" and event.data["why"] == "share"
    (note,) = lent.notifications.filter(kind="preemption_warning")
    assert "保障份额" in note.body and "更高优先级" not in note.body  # bob reads Chinese

    frozen.move_to(T0 + timedelta(minutes=3))
    assert endings.preemptions_due() == 1
    lent.refresh_from_db()
    mine.refresh_from_db()
    assert lent.end_reason == EndReason.PREEMPTED
    assert mine.status == LeaseStatus.PROVISIONING and mine.start_at == T0 + timedelta(minutes=3)


def test_borrowed_work_goes_before_other_preemptible_work(
    frozen, ops, lena, bob, vision, nlp, a100, eight
):
    # A preemptible lease placed before any share existed is not on loan.
    cheap = active(ask(bob, nlp, a100, count=2, duration=hours(8), priority=Priority.PREEMPTIBLE))
    share_set(user=ops, team=vision, card_model=a100, cards=2, within_minutes=5)
    rest = active(ask(bob, nlp, a100, count=4, duration=hours(8)))
    on_loan = active(ask(bob, nlp, a100, count=2, duration=hours(8)))
    assert (cheap.lent, rest.lent, on_loan.lent) == (False, False, True)

    mine = ask(lena, vision, a100, count=2, duration=hours(1))
    assert mine.status == LeaseStatus.QUEUED
    for lease in (cheap, rest, on_loan):
        lease.refresh_from_db()
    # The normal-priority lease on loan goes, not the preemptible one (the usual first choice).
    assert on_loan.preempt_at == T0 + timedelta(minutes=5)
    assert cheap.preempt_at is None and rest.preempt_at is None


def test_past_its_share_a_team_waits_like_anyone(frozen, ops, lena, bob, vision, nlp, a100, eight):
    share_set(user=ops, team=vision, card_model=a100, cards=2, within_minutes=5)
    active(ask(lena, vision, a100, count=2, duration=hours(8)))
    others = active(ask(bob, nlp, a100, count=6, duration=hours(8)))
    more = ask(lena, vision, a100, count=2, duration=hours(1))
    assert more.status == LeaseStatus.QUEUED
    others.refresh_from_db()
    assert others.lent is False and others.preempt_at is None
    more.refresh_from_db()
    assert more.estimated_start == T0 + hours(8)


def test_a_reclaim_cuts_short_the_longer_grace_of_work_already_being_taken_back(
    frozen, ops, lena, bob, vision, nlp, a100, eight
):
    # Found by the stated-time property: nlp's preemptible lease on loan is already being
    # taken back, with the site's 10-minute grace, for nlp's own higher-class lease when vision
    # asks; nothing else may be taken, so vision waited those 10 minutes, past its 5.
    share_set(user=ops, team=vision, card_model=a100, cards=4, within_minutes=5)
    own = active(ask(bob, nlp, a100, count=4, duration=hours(8)))
    cheap = active(ask(bob, nlp, a100, count=4, duration=hours(8), priority=Priority.PREEMPTIBLE))
    assert (own.lent, cheap.lent) == (False, True)
    theirs = ask(bob, nlp, a100, count=4, duration=hours(8))
    cheap.refresh_from_db()
    assert cheap.preempt_at == T0 + timedelta(minutes=10) and cheap.preempted_for_id == theirs.pk

    mine = ask(lena, vision, a100, count=4, duration=hours(1))
    cheap.refresh_from_db()
    own.refresh_from_db()
    assert cheap.preempt_at == T0 + timedelta(minutes=5) and cheap.preempt_cards is None
    assert cheap.preempted_for_id == mine.pk and own.preempt_at is None
    assert cheap.events.filter(kind="preemption_scheduled").count() == 2
    assert cheap.warnings.count() == 2  # told again, with the sooner time
    frozen.move_to(T0 + timedelta(minutes=5))
    endings.preemptions_due()
    mine.refresh_from_db()
    assert mine.status == LeaseStatus.PROVISIONING and mine.start_at == T0 + timedelta(minutes=5)
    theirs.refresh_from_db()
    assert theirs.status == LeaseStatus.QUEUED


def test_a_reclaim_cuts_short_a_partial_take_back_and_keeps_what_it_gave(
    frozen, ops, lena, bob, vision, nlp, a100, eight
):
    share_set(user=ops, team=vision, card_model=a100, cards=4, within_minutes=5)
    active(ask(bob, nlp, a100, count=4, duration=hours(8)))
    cheap = active(ask(bob, nlp, a100, count=4, duration=hours(8), priority=Priority.PREEMPTIBLE))
    theirs = ask(bob, nlp, a100, count=2, duration=hours(8))
    cheap.refresh_from_db()
    assert cheap.preempt_at == T0 + timedelta(minutes=10) and cheap.preempt_cards == 2
    given = set(cheap.allocations.filter(end_at=cheap.preempt_at).values_list("card_id", flat=True))

    mine = ask(lena, vision, a100, count=1, duration=hours(1))
    cheap.refresh_from_db()
    soon = T0 + timedelta(minutes=5)
    assert cheap.preempt_at == soon and cheap.preempted_for_id == mine.pk
    now_given = set(cheap.allocations.filter(end_at=soon).values_list("card_id", flat=True))
    assert given <= now_given and cheap.preempt_cards == len(now_given) < 4
    frozen.move_to(soon)
    endings.preemptions_due()
    mine.refresh_from_db()
    cheap.refresh_from_db()
    assert mine.status == LeaseStatus.PROVISIONING and mine.start_at == soon
    assert cheap.status == LeaseStatus.ACTIVE and cheap.count == 4 - len(now_given)
    theirs.refresh_from_db()
    assert theirs.status in (LeaseStatus.QUEUED, LeaseStatus.PROVISIONING)


def test_a_family_share_counts_every_model_of_the_family(frozen, ops, lena, bob, vision, nlp):
    small = CardModelFactory(slug="fam-a", name="Fam A", family="fam")
    big = CardModelFactory(slug="fam-b", name="Fam B", family="fam")
    make_node(small, cards=2, domains=1, hostname="fa")
    make_node(big, cards=2, domains=1, hostname="fb")
    share_set(user=ops, team=vision, family="fam", cards=2, within_minutes=4)
    first = active(ask(bob, nlp, small, count=2, duration=hours(8)))
    second = active(ask(bob, nlp, big, count=2, duration=hours(8)))
    assert (first.lent, second.lent) == (False, True)
    mine = ask(lena, vision, big, count=2, duration=hours(1))
    second.refresh_from_db()
    assert mine.status == LeaseStatus.QUEUED
    assert second.preempt_at == T0 + timedelta(minutes=4)


def test_share_rules(ops, lena, vision, nlp, a100, eight):
    with pytest.raises(PermissionDenied):
        share_set(user=lena, team=vision, card_model=a100, cards=2, within_minutes=5)
    share_set(user=ops, team=vision, card_model=a100, cards=6, within_minutes=5)
    with pytest.raises(ValidationError, match="only 8 are in service"):
        share_set(user=ops, team=nlp, card_model=a100, cards=3, within_minutes=5)
    with pytest.raises(ValidationError):
        share_set(user=ops, team=nlp, card_model=a100, family="x", cards=1, within_minutes=5)
    with pytest.raises(ValidationError):
        share_set(user=ops, team=nlp, family="no-such-family", cards=1, within_minutes=5)
    # Setting it again changes it, never a second row.
    share_set(user=ops, team=vision, card_model=a100, cards=5, within_minutes=2)
    assert GuaranteedShare.objects.get(team=vision).cards == 5


def test_without_shares_nothing_is_lent(frozen, bob, nlp, a100, eight):
    TeamFactory(slug="other")
    lease = active(ask(bob, nlp, a100, count=8, duration=hours(1)))
    assert Lease.objects.get(pk=lease.pk).lent is False


def test_the_team_page_shows_its_share(ops, lena, vision, a100, eight, client):
    share_set(user=ops, team=vision, card_model=a100, cards=4, within_minutes=3)
    client.force_login(lena)
    page = client.get(f"/teams/{vision.slug}/").content.decode()
    assert f'data-share="{a100.slug}"' in page
    assert "A100 test 共 4 张卡，3 分钟内归您使用" in page  # lena reads Chinese


# --- the guarantee as a property --------------------------------------------------------------

ASK = st.tuples(
    st.just("ask"),
    st.integers(1, 4),
    st.sampled_from([Priority.NORMAL, Priority.PREEMPTIBLE]),
    st.integers(1, 8),
)
OTHERS = st.lists(
    st.one_of(
        ASK,
        ASK,
        ASK,  # mostly asks: the pool fills and a queue forms
        st.tuples(st.just("release"), st.integers(0, 20)),
        st.tuples(st.just("wait"), st.integers(1, 90)),
    ),
    min_size=2,
    max_size=12,
)
FILLED = [("ask", 4, Priority.NORMAL, 8), ("ask", 4, Priority.NORMAL, 8)]
QUEUED_AHEAD = [*FILLED, ("ask", 2, Priority.NORMAL, 1)]


@given(others=OTHERS, mine=st.integers(1, 4))
@example(others=FILLED, mine=4)
@example(others=QUEUED_AHEAD, mine=2)
@hsettings(
    max_examples=40,
    deadline=None,
    database=None,
    derandomize=True,
    suppress_health_check=list(HealthCheck),
)
def test_a_team_within_its_share_always_starts_within_the_stated_time(
    db, others, mine, django_user_model
):
    """Whatever other teams did before (filled the pool, queued more, released some), a team
    asking within its guaranteed share starts within the share's stated time, and only work
    on loan or preemptible work was taken back for it."""
    from leasing.lifecycle.changes import lease_release
    from portal.models import Membership
    from tests.factories import MembershipFactory, UserFactory
    from tests.leasing.passes import queue_advance

    with transaction.atomic(), time_machine.travel(T0, tick=False) as clock:
        model = CardModelFactory(slug="prop-a100", name="Prop A100")
        make_node(model, cards=8, domains=1, hostname="prop8")
        owner, other = TeamFactory(slug="owner"), TeamFactory(slug="other")
        me, them = UserFactory(username="me"), UserFactory(username="them")
        MembershipFactory(user=me, team=owner, role=Membership.Role.MEMBER)
        MembershipFactory(user=them, team=other, role=Membership.Role.MEMBER)
        admin = UserFactory(username="op", profile__is_operator=True)
        share_set(user=admin, team=owner, card_model=model, cards=4, within_minutes=5)
        now = T0
        theirs = []
        for step in others:
            if step[0] == "ask":
                _kind, count, priority, length = step
                theirs.append(
                    ask(them, other, model, count=count, duration=hours(length), priority=priority)
                )
            elif step[0] == "release" and theirs:
                lease = Lease.objects.get(pk=theirs[step[1] % len(theirs)].pk)
                if lease.status in (LeaseStatus.PROVISIONING, LeaseStatus.ACTIVE):
                    lease_release(lease=lease, user=them)
            elif step[0] == "wait":
                now += timedelta(minutes=step[1])
                clock.move_to(now)
                endings.preemptions_due()
                queue_advance(card_model_ids=[model.pk])
        untouchable = set(
            Lease.objects.filter(
                team=other, lent=False, borrowed=False, priority=Priority.NORMAL
            ).values_list("pk", flat=True)
        )
        asked = ask(me, owner, model, count=mine, duration=hours(1))
        clock.move_to(now + timedelta(minutes=5))
        endings.preemptions_due()
        queue_advance(card_model_ids=[model.pk])
        asked.refresh_from_db()
        assert asked.status == LeaseStatus.PROVISIONING, (asked.status, asked.estimated_start)
        taken = set(
            Lease.objects.filter(end_reason=EndReason.PREEMPTED).values_list("pk", flat=True)
        ) | set(Lease.objects.filter(preempt_at__isnull=False).values_list("pk", flat=True))
        assert not (taken & untouchable)
        transaction.set_rollback(True)


def test_operators_replace_a_teams_shares_through_the_api(ops, lena, vision, a100, eight, api):
    api.force_authenticate(ops)
    url = f"/api/v1/teams/{vision.slug}/shares/"
    put = api.put(url, [{"card_model": a100.slug, "cards": 4, "within_minutes": 5}], format="json")
    assert put.status_code == 200, put.content
    assert put.json() == [{"card_model": a100.slug, "family": "", "cards": 4, "within_minutes": 5}]
    too_many = api.put(
        url, [{"card_model": a100.slug, "cards": 9, "within_minutes": 5}], format="json"
    )
    assert too_many.status_code == 400 and "在役的只有 8 张" in too_many.json()["cards"][0]
    assert GuaranteedShare.objects.get(team=vision).cards == 4  # all or nothing
    assert api.put(url, [], format="json").json() == []
    assert not GuaranteedShare.objects.exists()
    api.force_authenticate(lena)
    assert api.get(url).status_code == 200
    assert api.put(url, [], format="json").status_code == 403
