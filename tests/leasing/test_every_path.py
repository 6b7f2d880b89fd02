"""Every path that adds cards or card-time obeys the same admission, queue order and price.

Each test is one finding of issue #14 (the request path held the rules; extend, resize and
approval did not; budgets priced with the list price while bills used the price book).
"""

from datetime import timedelta
from decimal import Decimal

import pytest
from django.core.exceptions import ValidationError
from django.utils import translation

from leasing.billing import prices
from leasing.choices import LeaseStatus, Priority
from leasing.lifecycle import change_decisions, changes, provisioning, resize
from leasing.models import Lease, LeaseChange, Notification, TeamPrice
from leasing.notify.messages import breaches_text, notice_text
from leasing.teams import approvals, quotas
from leasing.teams import services as team_services
from portal.models import Membership
from tests.leasing.conftest import T0, ask, hours


@pytest.fixture
def rules(vision, alice, ops, lena):
    """The issue's team: member limits 4 cards / 48 h; team rule 72 h, 2,000 card-hours."""

    def make(*, team=None, member=None):
        if team is not None:
            team_services.quota_set(user=ops, team=vision, card_model=None, **team)
        if member is not None:
            membership = Membership.objects.get(user=alice, team=vision)
            team_services.member_limit_set(
                user=lena, membership=membership, card_model=None, **member
            )

    return make


def active(lease: Lease) -> Lease:
    provisioning.provision_step(lease_id=lease.pk)
    lease.refresh_from_db()
    assert lease.status == LeaseStatus.ACTIVE
    return lease


# --- extend ---------------------------------------------------------------------------------


def test_extend_over_the_team_budget_is_refused_naming_what_is_left(
    frozen, alice, vision, a100, small_pool, rules
):
    rules(team={"card_hours_per_month": Decimal(20), "max_lease_hours": 72})
    lease = ask(alice, vision, a100, count=2, duration=hours(4))  # 8 of 20 card-hours
    with pytest.raises(ValidationError) as caught:
        changes.lease_extend(lease=lease, user=alice, minutes=42_000)
    message = " ".join(caught.value.messages)
    assert "12.0 of 20.0 card-hours" in message
    assert "renews on" in message
    lease.refresh_from_db()
    assert lease.end_at == T0 + hours(4)  # nothing written
    assert quotas.month_usage(vision.pk, quotas.month_of(T0))[0] == Decimal(8)
    # Within what is left it goes through.
    changes.lease_extend(lease=lease, user=alice, minutes=6 * 60)
    lease.refresh_from_db()
    assert lease.end_at == T0 + hours(10)


def test_extend_past_the_team_longest_lease_is_refused(
    frozen, alice, vision, a100, small_pool, rules
):
    rules(team={"max_lease_hours": 72})
    lease = ask(alice, vision, a100, duration=hours(70))
    with pytest.raises(ValidationError, match="would make the lease 73.0 hours long"):
        changes.lease_extend(lease=lease, user=alice, minutes=180)


def test_extend_above_a_member_limit_waits_for_the_lead(
    frozen, alice, lena, vision, a100, small_pool, rules, django_capture_on_commit_callbacks
):
    rules(member={"max_lease_hours": 48})
    lease = ask(alice, vision, a100, duration=hours(40))
    with django_capture_on_commit_callbacks(execute=True):
        result = changes.lease_extend(lease=lease, user=alice, minutes=10 * 60)
    change = result.pending_change
    assert change.status == LeaseChange.Status.PENDING and change.minutes == 600
    assert "at most 48 hours" in breaches_text(change.breaches)
    with translation.override("zh-hans"):  # kept as parameters: worded for whoever reads it
        assert "最长 48 小时" in breaches_text(change.breaches)
    lease.refresh_from_db()
    assert lease.end_at == T0 + hours(40)  # unchanged until the lead decides
    asked = Notification.objects.get(user=lena, kind="approval_requested")
    assert asked.data["message"] == "change"  # kept as message + parameters
    with translation.override("zh-hans"):
        assert "请求审批" in notice_text(asked)[0]  # and worded for whoever reads it
    assert "请求审批" in asked.title  # lena chose no language: the site's (one rule)
    with pytest.raises(ValidationError, match="already waiting"):
        changes.lease_extend(lease=lease, user=alice, minutes=700)

    with django_capture_on_commit_callbacks(execute=True):
        change_decisions.change_approve(change=change, user=lena, note="deadline")
    lease.refresh_from_db()
    change.refresh_from_db()
    assert lease.end_at == T0 + hours(50)
    assert change.status == LeaseChange.Status.APPROVED and change.decided_by == lena
    assert Notification.objects.filter(user=alice, kind="approval_decided").exists()


def test_an_approved_change_still_obeys_the_team_quota(
    frozen, alice, lena, ops, vision, a100, small_pool, rules
):
    rules(member={"max_lease_hours": 4})
    lease = ask(alice, vision, a100, duration=hours(4))
    change = changes.lease_extend(lease=lease, user=alice, minutes=600).pending_change
    # The team's budget shrinks before the lead decides: the approval is refused, and waits.
    team_services.quota_set(user=ops, team=vision, card_model=None, card_hours_per_month=5)
    with pytest.raises(ValidationError, match="card-hours"):
        change_decisions.change_approve(change=change, user=lena)
    change.refresh_from_db()
    assert change.status == LeaseChange.Status.PENDING
    change_decisions.change_reject(change=change, user=lena, reason="over budget")
    change.refresh_from_db()
    assert change.status == LeaseChange.Status.REJECTED


def test_the_holder_withdraws_and_a_lead_extends_without_asking(
    frozen, alice, lena, vision, a100, small_pool, rules
):
    rules(member={"max_lease_hours": 4})
    lease = ask(alice, vision, a100, duration=hours(4))
    change = changes.lease_extend(lease=lease, user=alice, minutes=60).pending_change
    change_decisions.change_withdraw(change=change, user=alice)
    change.refresh_from_db()
    assert change.status == LeaseChange.Status.WITHDRAWN
    # The lead is the one who would approve: her own extension of the lease needs nobody.
    changes.lease_extend(lease=lease, user=lena, minutes=60)
    lease.refresh_from_db()
    assert lease.end_at == T0 + hours(5)


# --- resize ---------------------------------------------------------------------------------


def test_resize_above_a_member_limit_waits_for_the_lead(
    frozen, alice, lena, vision, a100, small_pool, rules
):
    rules(member={"max_concurrent_cards": 4})
    ask(alice, vision, a100, count=2)
    lease = active(ask(alice, vision, a100, count=2, same_node=False))
    result = resize.lease_resize(lease=lease, user=alice, count=6)
    assert result.pending_change.count == 6
    assert "at most 4 cards" in breaches_text(result.pending_change.breaches)
    lease.refresh_from_db()
    assert lease.count == 2 and lease.allocations.count() == 2
    change_decisions.change_approve(change=result.pending_change, user=lena)
    lease.refresh_from_db()
    assert lease.count == 6 and lease.allocations.filter(end_at=lease.end_at).count() == 6


def test_resize_over_the_team_quota_is_refused(frozen, alice, vision, a100, small_pool, rules):
    rules(team={"max_concurrent_cards": 4})
    lease = active(ask(alice, vision, a100, count=2))
    with pytest.raises(ValidationError, match="at most 4 cards"):
        resize.lease_resize(lease=lease, user=alice, count=6)


def test_resize_does_not_jump_the_queue(frozen, alice, bob, vision, nlp, a100, small_pool):
    """8 cards: alice holds 2 for 12 h, bob 4 for 2 h; a 6-card request waits (starts when
    bob's end, on those and the 2 free). Alice taking the 2 free cards for 12 h would push it
    back 10 hours: refused."""
    lease = active(ask(alice, vision, a100, count=2, duration=hours(12), same_node=False))
    ask(bob, nlp, a100, count=4, duration=hours(2), same_node=False)
    waiting = ask(bob, nlp, a100, count=6, same_node=False)
    assert waiting.status == LeaseStatus.QUEUED
    eta = waiting.estimated_start
    assert eta == T0 + hours(2)
    with pytest.raises(ValidationError, match="1 waiting request"):
        resize.lease_resize(lease=lease, user=alice, count=4)
    waiting.refresh_from_db()
    assert waiting.estimated_start == eta
    lease.refresh_from_db()
    assert lease.count == 2


# --- approval -------------------------------------------------------------------------------


def test_approval_sends_the_budget_alert(
    frozen, alice, lena, vision, a100, small_pool, rules, django_capture_on_commit_callbacks
):
    rules(team={"card_hours_per_month": Decimal(10)}, member={"max_concurrent_cards": 1})
    with django_capture_on_commit_callbacks(execute=True):
        pending = ask(alice, vision, a100, count=2, duration=hours(4))  # 8 of 10 card-hours
    assert pending.status == LeaseStatus.PENDING_APPROVAL
    assert not Notification.objects.filter(kind="budget_80").exists()
    with django_capture_on_commit_callbacks(execute=True):
        approvals.lease_approve(lease=pending, user=lena)
    assert Notification.objects.filter(user=lena, kind="budget_80").exists()


# --- one price ------------------------------------------------------------------------------


def test_money_budget_counts_the_team_price_the_bill_uses(
    frozen, alice, vision, a100, small_pool, ops
):
    a100.price_per_hour = Decimal(10)
    a100.save()
    TeamPrice.objects.create(
        team=vision, card_model=a100, price_per_hour=Decimal(40), effective_from=T0 - hours(1)
    )
    team_services.quota_set(user=ops, team=vision, card_model=None, money_per_month=Decimal(100))
    ask(alice, vision, a100, count=1, duration=hours(1))
    assert quotas.month_usage(vision.pk, quotas.month_of(T0))[1] == Decimal(40)
    with pytest.raises(ValidationError, match="costs CNY 80.00"):
        ask(alice, vision, a100, count=1, duration=hours(2))
    assert ask(alice, vision, a100, count=1, duration=hours(1)).pk


def test_estimates_price_with_the_book(frozen, vision, a100):
    a100.price_per_hour = Decimal(10)
    a100.save()
    TeamPrice.objects.create(
        team=vision, card_model=a100, price_per_hour=Decimal(40), effective_from=T0 + hours(1)
    )
    quote = prices.estimate(
        card_model=a100,
        team_id=vision.pk,
        count=2,
        start=T0,
        end=T0 + hours(2),
        priority=Priority.NORMAL,
    )
    assert quote == Decimal("100.00")  # 2 × (1 h × 10 + 1 h × 40)
    assert prices.estimate(
        card_model=a100,
        team_id=None,
        count=2,
        start=T0,
        end=T0 + timedelta(hours=2),
        priority=Priority.NORMAL,
    ) == Decimal("40.00")


# --- pages ----------------------------------------------------------------------------------


def test_pending_change_on_the_lease_list_lease_page_and_team_page(
    frozen, client, alice, lena, vision, a100, small_pool, rules
):
    rules(member={"max_lease_hours": 4})
    lease = ask(alice, vision, a100, duration=hours(4))
    client.cookies["django_language"] = "en"
    client.force_login(alice)
    response = client.post(f"/leases/{lease.pk}/extend/", {"minutes": "60"}, follow=True)
    page = response.content.decode()
    assert "waits for lena to approve it" in page  # what happens next, by name
    assert "Extend by 1 hour" in page and 'name="withdraw"' in page
    assert 'name="approve"' not in page  # alice does not decide her own change
    assert "change waiting for approval" in client.get("/leases/").content.decode()

    client.force_login(lena)
    team_page = client.get(f"/teams/{vision.slug}/").content.decode()
    change = LeaseChange.objects.get()
    assert f'data-change="{change.pk}"' in team_page and 'name="approve"' in team_page
    client.post(
        f"/leases/changes/{change.pk}/approve/", {"next": f"/teams/{vision.slug}/"}, follow=True
    )
    lease.refresh_from_db()
    assert lease.end_at == T0 + hours(5)
    assert "change waiting" not in client.get("/leases/").content.decode()


# --- found by the stateful test ---------------------------------------------------------------


def test_a_lease_takes_back_a_card_it_dropped(frozen, alice, vision):
    """A lease may hold a card again after a resize dropped it (a second period of the same
    card: it was an IntegrityError, a 500); the periods never overlap and the bill counts both."""
    from leasing.billing.usage import usage_pieces
    from tests.factories import CardModelFactory, make_node

    tight = CardModelFactory(slug="tight", name="Tight")
    make_node(tight, cards=3, domains=1, hostname="tight0")
    lease = active(ask(alice, vision, tight, count=3, duration=hours(6)))
    frozen.shift(hours(1))
    resize.lease_resize(lease=lease, user=alice, count=1)
    frozen.shift(hours(1))
    resize.lease_resize(lease=lease, user=alice, count=3)  # only the dropped cards are free
    lease.refresh_from_db()
    assert lease.count == 3 and lease.allocations.count() == 5
    frozen.shift(hours(1))
    changes.lease_release(lease=lease, user=alice)
    provisioning.release_step(lease_id=lease.pk)
    lease.refresh_from_db()
    assert sum(r.card_minutes for r in usage_pieces(lease)) == 3 * 60 + 1 * 60 + 3 * 60


def test_a_change_waiting_when_the_lease_ends_lapses_and_the_holder_is_told(
    frozen, alice, lena, vision, a100, small_pool, rules, django_capture_on_commit_callbacks
):
    from leasing.lifecycle import change_decisions as decisions

    rules(member={"max_lease_hours": 4})
    lease = ask(alice, vision, a100, duration=hours(4))
    change = changes.lease_extend(lease=lease, user=alice, minutes=60).pending_change
    changes.lease_release(lease=lease, user=alice)
    with django_capture_on_commit_callbacks(execute=True):
        assert decisions.changes_lapse() == 1
    change.refresh_from_db()
    assert change.status == LeaseChange.Status.LAPSED
    assert Notification.objects.filter(user=alice, kind="approval_decided").exists()
    assert decisions.changes_lapse() == 0
