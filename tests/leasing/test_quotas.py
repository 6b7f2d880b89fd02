"""Team quotas and member limits: admission, refunds, month boundaries, approvals, borrowing."""

from datetime import datetime
from decimal import Decimal
from zoneinfo import ZoneInfo

import pytest
import time_machine
from django.core import mail
from django.core.exceptions import PermissionDenied, ValidationError
from django.test import override_settings

from leasing import periods
from leasing.choices import LeaseStatus, Priority
from leasing.lifecycle import changes, provisioning
from leasing.lifecycle import requests as lease_requests
from leasing.models import MemberLimit, Quota
from leasing.notify.messages import breaches_text
from leasing.teams import approvals, quotas
from leasing.teams import services as team_services
from portal.models import Membership
from tests.leasing.conftest import T0, ask, hours

SH = ZoneInfo("Asia/Shanghai")


@pytest.fixture
def quota(vision, a100, ops):
    def make(card_model=a100, **limits):
        return team_services.quota_set(user=ops, team=vision, card_model=card_model, **limits)

    return make


def test_concurrent_quota_refuses_with_limit_left_and_when(
    frozen, alice, vision, a100, small_pool, quota
):
    quota(max_concurrent_cards=4)
    ask(alice, vision, a100, count=3, duration=hours(2))
    with pytest.raises(ValidationError) as caught:
        ask(alice, vision, a100, count=2)
    message = " ".join(caught.value.messages)
    assert "at most 4 cards of A100 test at once" in message
    assert "3 are held or waiting, so 1 are left" in message
    assert "free up at 2026-12-01 11:00" in message
    assert ask(alice, vision, a100, count=1).status == LeaseStatus.PROVISIONING


def test_rule_without_model_covers_all_models_together(
    frozen, alice, vision, a100, small_pool, quota
):
    from tests.factories import CardModelFactory, make_node

    other = CardModelFactory(slug="other-model")
    make_node(other, cards=4, domains=1, hostname="other")
    quota(card_model=None, max_concurrent_cards=5)
    ask(alice, vision, a100, count=4)
    with pytest.raises(ValidationError, match="all models"):
        ask(alice, vision, other, count=2)


def test_longest_lease(frozen, alice, vision, a100, small_pool, quota):
    quota(max_lease_hours=24)
    with pytest.raises(ValidationError, match="at most 24 hours"):
        ask(alice, vision, a100, duration=hours(25))


def test_month_budget_charged_refunded_on_early_release(
    frozen, alice, vision, a100, small_pool, quota
):
    quota(card_hours_per_month=Decimal("20"))
    lease = ask(alice, vision, a100, count=2, duration=hours(8))  # charges 16 card-hours
    month = periods.month_of(T0)
    assert quotas.month_usage(vision.pk, month)[0] == Decimal(16)
    with pytest.raises(ValidationError) as caught:
        ask(alice, vision, a100, count=1, duration=hours(5))
    assert "4.0 of 20.0 card-hours" in " ".join(caught.value.messages)
    assert "renews on 2027-01-01" in " ".join(caught.value.messages)
    provisioning.provision_step(lease_id=lease.pk)
    frozen.shift(hours(1))
    changes.lease_release(lease=lease, user=alice)  # held 1 h: 14 card-hours come back
    assert quotas.month_usage(vision.pk, month)[0] == Decimal(2)
    assert ask(alice, vision, a100, count=1, duration=hours(5)).status == LeaseStatus.PROVISIONING


@override_settings(TIME_ZONE="Asia/Shanghai")
def test_lease_across_month_boundary_charges_each_month_its_share(
    alice, vision, a100, small_pool, quota
):
    quota(card_hours_per_month=Decimal("100"))
    start = datetime(2026, 12, 31, 22, 0, tzinfo=SH)
    with time_machine.travel(start, tick=False):
        ask(alice, vision, a100, count=2, duration=hours(6))  # 2 h in December, 4 h in January
    dec, jan = periods.month_of(start), periods.month_of(start + hours(6))
    assert quotas.month_usage(vision.pk, dec)[0] == Decimal(4)
    assert quotas.month_usage(vision.pk, jan)[0] == Decimal(8)


def test_money_budget(frozen, alice, vision, a100, small_pool, quota):
    quota(money_per_month=Decimal("100"))  # the test model costs ¥10 per card-hour
    ask(alice, vision, a100, count=1, duration=hours(8))
    with pytest.raises(ValidationError, match="CNY 20.00 of CNY 100"):
        ask(alice, vision, a100, count=1, duration=hours(3))


def test_member_limit_goes_to_the_lead_who_approves(
    frozen, alice, lena, vision, a100, small_pool, quota
):
    quota(max_concurrent_cards=8)
    membership = Membership.objects.get(user=alice, team=vision)
    team_services.member_limit_set(
        user=lena, membership=membership, card_model=a100, max_concurrent_cards=2
    )
    lease = ask(alice, vision, a100, count=3)
    assert lease.status == LeaseStatus.PENDING_APPROVAL
    assert "alice may hold at most 2 cards" in breaches_text(lease.approval_breaches)
    assert lease.approval_reason == ""  # kept as parameters, worded for each reader
    assert not lease.allocations.exists()
    with pytest.raises(PermissionDenied):
        approvals.lease_approve(lease=lease, user=alice)
    approved = approvals.lease_approve(lease=lease, user=lena, note="deadline Friday")
    assert approved.status == LeaseStatus.PROVISIONING
    assert list(approved.events.values_list("kind", flat=True)) == [
        "requested",
        "needs_approval",
        "approved",
        "placed",
    ]


def test_lead_rejects_with_a_reason(frozen, alice, lena, vision, a100, small_pool, quota):
    membership = Membership.objects.get(user=alice, team=vision)
    team_services.member_limit_set(
        user=lena, membership=membership, card_model=None, max_lease_hours=4
    )
    lease = ask(alice, vision, a100, duration=hours(10))
    assert lease.status == LeaseStatus.PENDING_APPROVAL
    with pytest.raises(ValidationError, match="Say why"):
        approvals.lease_reject(lease=lease, user=lena, reason="  ")
    rejected = approvals.lease_reject(lease=lease, user=lena, reason="use the T4s for this")
    assert rejected.status == LeaseStatus.REJECTED
    assert quotas.month_usage(vision.pk, periods.month_of(T0))[0] == 0


def test_approval_refused_when_the_team_quota_no_longer_holds(
    frozen, alice, lena, vision, a100, small_pool, quota
):
    quota(max_concurrent_cards=4)
    membership = Membership.objects.get(user=alice, team=vision)
    team_services.member_limit_set(
        user=lena, membership=membership, card_model=a100, max_concurrent_cards=1
    )
    waiting = ask(alice, vision, a100, count=2)
    ask(lena, vision, a100, count=3)
    with pytest.raises(ValidationError, match="at most 4 cards"):
        approvals.lease_approve(lease=waiting, user=lena)


def test_member_limit_must_fit_inside_the_team(frozen, lena, alice, vision, a100, quota):
    quota(max_concurrent_cards=4)
    membership = Membership.objects.get(user=alice, team=vision)
    with pytest.raises(ValidationError, match="team's own limit is 4"):
        team_services.member_limit_set(
            user=lena, membership=membership, card_model=a100, max_concurrent_cards=6
        )
    with pytest.raises(PermissionDenied):
        team_services.member_limit_set(
            user=alice, membership=membership, card_model=a100, max_concurrent_cards=1
        )
    assert not MemberLimit.objects.exists()


def test_only_operators_set_team_quotas(lena, vision, a100):
    with pytest.raises(PermissionDenied):
        team_services.quota_set(user=lena, team=vision, card_model=a100, max_concurrent_cards=100)
    assert not Quota.objects.exists()


def test_operator_override_is_recorded(frozen, alice, ops, vision, a100, small_pool, quota):
    quota(max_concurrent_cards=1)
    lease = lease_requests.lease_request(
        user=ops,
        team=vision,
        card_model=a100,
        count=4,
        duration=hours(1),
        override_reason="paper deadline, ok'd by CTO",
    )
    assert lease.status == LeaseStatus.PROVISIONING
    event = lease.events.get(kind="quota_override")
    assert event.message == "paper deadline, ok'd by CTO" and event.actor == ops
    with pytest.raises(PermissionDenied):
        lease_requests.lease_request(
            user=alice,
            team=vision,
            card_model=a100,
            count=4,
            duration=hours(1),
            override_reason="please",
        )


def test_borrowing_idle_cards_as_preemptible(frozen, alice, vision, a100, small_pool, quota):
    quota(max_concurrent_cards=2)
    ask(alice, vision, a100, count=2)
    with pytest.raises(ValidationError):
        ask(
            alice, vision, a100, count=2, priority=Priority.PREEMPTIBLE
        )  # borrowing not allowed yet
    vision.allow_borrowing = True
    vision.save()
    borrowed = ask(alice, vision, a100, count=2, priority=Priority.PREEMPTIBLE)
    assert borrowed.borrowed and borrowed.status == LeaseStatus.PROVISIONING
    with pytest.raises(ValidationError):
        ask(alice, vision, a100, count=2)  # normal priority still refused
    ask(alice, vision, a100, count=4, priority=Priority.PREEMPTIBLE)  # the last idle cards
    with pytest.raises(ValidationError, match="no idle"):
        ask(alice, vision, a100, count=1, priority=Priority.PREEMPTIBLE)


def test_lead_is_told_about_a_request_waiting_for_approval(
    frozen, alice, lena, vision, a100, small_pool
):
    from leasing.lifecycle import tasks as lease_tasks
    from leasing.models import Delivery
    from leasing.notify import tasks as notify_tasks

    lena.email = "lena@example.org"
    lena.save()
    lena.profile.language = "en"  # her email in her language (notify.messages.person_language)
    lena.profile.save(update_fields=["language"])
    membership = Membership.objects.get(user=alice, team=vision)
    team_services.member_limit_set(
        user=lena, membership=membership, card_model=None, max_concurrent_cards=0
    )
    lease = ask(alice, vision, a100)
    lease_tasks.notify_lease(lease.pk, "approval_requested")
    for delivery in Delivery.objects.filter(notification__user=lena, channel="email"):
        notify_tasks.deliver(delivery.pk)
    assert mail.outbox[-1].to == ["lena@example.org"]
    assert "approval" in mail.outbox[-1].subject


def test_leads_hear_at_80_and_100_percent_of_a_budget_once(
    frozen, alice, lena, vision, a100, small_pool, quota
):
    from leasing.models import Notification

    quota(card_hours_per_month=Decimal("10"))
    ask(alice, vision, a100, count=1, duration=hours(4))
    assert quotas.budget_alerts(team=vision, card_model_id=a100.pk, now=T0) == 0  # 40%
    ask(alice, vision, a100, count=1, duration=hours(4))
    quotas.budget_alerts(team=vision, card_model_id=a100.pk, now=T0)  # 80%
    quotas.budget_alerts(team=vision, card_model_id=a100.pk, now=T0)  # again: no second notice
    ask(alice, vision, a100, count=1, duration=hours(2))
    quotas.budget_alerts(team=vision, card_model_id=a100.pk, now=T0)  # 100%
    kinds = list(
        Notification.objects.filter(user=lena).order_by("pk").values_list("kind", flat=True)
    )
    assert kinds == ["budget_80", "budget_100"]
    assert not Notification.objects.filter(user=alice, kind__startswith="budget").exists()
