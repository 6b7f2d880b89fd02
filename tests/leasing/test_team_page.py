"""The team page: quota use, holders, approvals, member limits, the daily chart."""

from decimal import Decimal

import pytest

from leasing.choices import LeaseStatus
from leasing.lifecycle import provisioning
from leasing.models import MemberLimit
from leasing.teams import services as team_services
from portal.models import Membership
from tests.leasing.conftest import ask, hours


@pytest.fixture
def as_lena(client, lena):
    client.force_login(lena)
    client.cookies["django_language"] = "en"
    return client


def test_lead_sees_quota_use_holders_and_chart(
    as_lena, frozen, alice, ops, vision, a100, small_pool, django_assert_max_num_queries
):
    team_services.quota_set(
        user=ops,
        team=vision,
        card_model=a100,
        max_concurrent_cards=6,
        card_hours_per_month=Decimal(100),
    )
    lease = ask(alice, vision, a100, count=2, duration=hours(3))
    provisioning.provision_step(lease_id=lease.pk)
    frozen.shift(hours(1))
    # +1 the allocations (charges follow the cards held), +1 the changes waiting for the lead,
    # +1 the guaranteed shares, +1 the chart's card model names (its charges are read with
    # the month's: selectors.team_page),
    # +1 the members' own limits shown to a member reading her team's page, +1 the card
    # models' colours (one per model on every chart), +2 the fair share (every team's weight
    # and use, the half-life)
    # "Used" is the report's figure: the month's records + accrued usage (a bounded 7 more).
    with django_assert_max_num_queries(34):
        page = as_lena.get("/teams/vision/").content.decode()
    row = page[page.index('data-quota-row="a100-test"') :]
    row = row[: row.index("</tr>")]
    assert "2.0" in row and "4.0" in row  # 2 card-hours used, 4 still booked
    assert "94.0 / 100.0" in row and "2 / 6" in row
    assert "alice" in page[page.index('id="holders"') :]
    assert 'class="plotly-chart" data-figure=' in page


def test_lead_approves_and_rejects_from_the_page(
    as_lena, frozen, alice, lena, vision, a100, small_pool
):
    membership = Membership.objects.get(user=alice, team=vision)
    team_services.member_limit_set(
        user=lena, membership=membership, card_model=None, max_concurrent_cards=1
    )
    first, second = ask(alice, vision, a100, count=2), ask(alice, vision, a100, count=2)
    page = as_lena.get("/teams/vision/").content.decode()
    assert f'data-lease="{first.pk}"' in page and "alice may hold at most 1 cards" in page
    as_lena.post(f"/teams/vision/approvals/{first.pk}/approve/", {"reason": "ok"})
    as_lena.post(f"/teams/vision/approvals/{second.pk}/reject/", {"reason": ""})
    first.refresh_from_db()
    second.refresh_from_db()
    assert first.status == LeaseStatus.PROVISIONING
    assert second.status == LeaseStatus.PENDING_APPROVAL  # a rejection needs a reason
    response = as_lena.post(
        f"/teams/vision/approvals/{second.pk}/reject/", {"reason": "too many"}, follow=True
    )
    second.refresh_from_db()
    assert second.status == LeaseStatus.REJECTED and "Rejected" in response.content.decode()


def test_lead_sets_a_member_limit_inside_the_team_quota(
    as_lena, frozen, alice, ops, vision, a100, small_pool
):
    team_services.quota_set(user=ops, team=vision, card_model=a100, max_concurrent_cards=4)
    membership = Membership.objects.get(user=alice, team=vision)
    data = {
        "limit-member": membership.pk,
        "limit-card_model": a100.slug,
        "limit-max_concurrent_cards": 8,
    }
    response = as_lena.post("/teams/vision/limits/", data, follow=True)
    assert "own limit is 4" in response.content.decode()
    assert not MemberLimit.objects.exists()
    as_lena.post("/teams/vision/limits/", data | {"limit-max_concurrent_cards": 2})
    assert MemberLimit.objects.get().max_concurrent_cards == 2


def test_lead_cannot_set_team_quota_but_operator_can(client, as_lena, frozen, ops, vision, a100):
    as_lena.post(
        "/teams/vision/quotas/", {"quota-card_model": a100.slug, "quota-max_concurrent_cards": 99}
    )
    assert not vision.quotas.exists()
    client.force_login(ops)
    client.post("/teams/vision/quotas/", {"quota-card_model": "", "quota-max_concurrent_cards": 12})
    assert vision.quotas.get().max_concurrent_cards == 12


def test_other_teams_get_404_and_members_only_read(client, frozen, alice, bob, vision, nlp):
    client.force_login(bob)  # not in vision
    assert client.get("/teams/vision/").status_code == 404
    assert client.post("/teams/vision/limits/", {}).status_code == 404
    client.force_login(alice)  # a member of vision: her team's page, read only
    page = client.get("/teams/vision/").content.decode()
    assert 'id="quota-use"' in page and 'id="members"' in page
    assert 'id="approvals"' not in page and 'id="member-form"' not in page
    assert client.post("/teams/vision/limits/", {}).status_code == 404
    assert client.post("/teams/vision/members/", {"member-username": "bob"}).status_code == 404


def test_daily_chart_splits_card_hours_at_midnight(frozen, alice, vision, a100, small_pool):
    from datetime import date

    from leasing.teams import selectors as team_selectors
    from tests.leasing.conftest import T0

    lease = ask(alice, vision, a100, count=2, duration=hours(20))  # 09:00 → 05:00 next day
    provisioning.provision_step(lease_id=lease.pk)
    ask(alice, vision, a100, count=1, duration=hours(1), start_at=T0 + hours(40))  # not yet
    frozen.move_to(T0 + hours(30))
    now = T0 + hours(30)
    month = team_selectors.periods.month_of(now)
    daily = team_selectors.team_daily_hours(vision, since=month[0], until=month[1], now=now)
    assert daily == {a100.name: {date(2026, 12, 1): Decimal(30), date(2026, 12, 2): Decimal(10)}}
