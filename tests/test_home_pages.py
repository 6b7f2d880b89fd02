"""Each person's home page leads with what they do most: a researcher their leases, a lead the
requests waiting for them and the team's month, finance the month's cost and statements, an
operator the pool's health. Bounded queries for each."""

from datetime import datetime, timedelta
from decimal import Decimal
from zoneinfo import ZoneInfo

import pytest
import time_machine

from inventory.models import Node
from leasing.lifecycle import provisioning
from leasing.lifecycle import requests as lease_requests
from leasing.models import Statement
from leasing.teams import services as team_services
from portal.models import Membership
from tests.factories import CardModelFactory, make_node

T0 = datetime(2026, 12, 3, 10, 0, tzinfo=ZoneInfo("Asia/Shanghai"))


@pytest.fixture
def day(db, alice, lena, vision, ops):
    with time_machine.travel(T0, tick=False):
        model = CardModelFactory(slug="home-a100", name="Home A100", price_per_hour=Decimal(10))
        make_node(model, cards=4, hostname="home-01")
        make_node(model, cards=2, hostname="home-02", status=Node.Status.MAINTENANCE)
        held = lease_requests.lease_request(
            user=alice, team=vision, card_model=model, count=1, duration=timedelta(hours=4)
        )
        provisioning.provision_step(lease_id=held.pk)
        team_services.member_limit_set(
            user=lena,
            membership=Membership.objects.get(user=alice, team=vision),
            card_model=None,
            max_concurrent_cards=1,
        )
        waiting = lease_requests.lease_request(
            user=alice, team=vision, card_model=model, count=2, duration=timedelta(hours=1)
        )
        Statement.objects.create(
            team=vision,
            month="2026-11-01",
            number="2026-11-0001",
            issued_at=T0 - timedelta(days=2),
            card_minutes=600,
            cost=Decimal("100.00"),
            currency="CNY",
        )
    return {"held": held, "waiting": waiting}


def page(client, user, queries, django_assert_max_num_queries, at=T0 + timedelta(hours=1)):
    client.force_login(user)
    client.cookies["django_language"] = "en"
    with time_machine.travel(at, tick=False), django_assert_max_num_queries(queries):
        return client.get("/").content.decode()


def test_a_researcher_sees_her_leases_first_and_no_other_panel(
    client, day, alice, django_assert_max_num_queries
):
    html = page(client, alice, 14, django_assert_max_num_queries)
    assert 'id="home-mine"' in html and f'href="/leases/{day["held"].pk}/"' in html
    for panel in ("home-lead", "home-finance", "home-operator"):
        assert f'id="{panel}"' not in html
    assert html.index('id="home-mine"') < html.index("card-grid")


def test_a_lead_sees_approvals_and_the_team_month_first(
    client, day, lena, django_assert_max_num_queries
):
    html = page(client, lena, 30, django_assert_max_num_queries)
    assert html.index('id="home-lead"') < html.index('id="home-mine"')
    assert f'data-lease="{day["waiting"].pk}"' in html
    team = html.split('data-team="vision"', 1)[1].split("</tr>", 1)[0]
    assert ">1.0<" in team and ">10.00<" in team  # alice's card held 10:00 → 11:00 at 10 CNY
    assert team.endswith(">1</td>")  # one card held now


def test_finance_sees_the_months_cost_and_last_months_statements(
    client, day, fin, django_assert_max_num_queries
):
    html = page(client, fin, 25, django_assert_max_num_queries)
    assert html.index('id="home-finance"') < html.index("card-grid")
    # In no team and holding nothing: no empty "my leases", no request button, no "join a
    # team" hint; the role is named instead.
    assert 'id="home-mine"' not in html and 'href="/leases/new/"' not in html.split("card-grid")[0]
    assert 'data-role="finance"' in html and "ask a team lead" not in html
    assert "Cost in 2026-12 so far" in html
    cost = html.split('data-stat="cost"', 1)[1]
    assert 'class="stat__value">10.00<' in cost  # 1 card × 1 h × 10 CNY, accrued
    assert 'data-statement="2026-11-0001"' in html and "issued 2026-12-01" in html


def test_an_operator_sees_pool_health_first(client, day, ops, django_assert_max_num_queries):
    html = page(client, ops, 25, django_assert_max_num_queries)
    assert html.index('id="home-operator"') < html.index("card-grid")
    assert 'id="home-mine"' not in html and 'data-role="operator"' in html
    assert 'data-node="home-02"' in html and 'data-node="home-01"' not in html
    nodes_out = html.split('data-stat="nodes-out"', 1)[1]
    assert 'class="stat__value">1<' in nodes_out
    waiting = html.split('data-stat="waiting"', 1)[1]
    assert 'class="stat__value">1<' in waiting  # alice's request above her limit


def _extend_above_the_limit(day, lena, alice):
    """alice asks for 2 more hours, above a 4-hour member limit: a change waits for lena."""
    from leasing.lifecycle import changes

    team_services.member_limit_set(
        user=lena,
        membership=Membership.objects.get(user=alice, team=day["held"].team),
        card_model=None,
        max_concurrent_cards=1,
        max_lease_hours=4,
    )
    with time_machine.travel(T0 + timedelta(minutes=30), tick=False):
        return changes.lease_extend(lease=day["held"], user=alice, minutes=120).pending_change


def test_the_leads_home_lists_every_pending_item_it_counts(
    client, day, lena, alice, django_assert_max_num_queries
):
    change = _extend_above_the_limit(day, lena, alice)
    html = page(client, lena, 34, django_assert_max_num_queries)
    panel = html.split('id="home-lead"', 1)[1].split("</section>", 1)[0]
    assert 'data-approvals="1"' in panel and ">2</span>" in panel  # 1 request + 1 extension
    assert f'data-lease="{day["waiting"].pk}"' in panel
    assert f'data-change="{change.pk}"' in panel  # the extension is listed, not just counted
    assert f"/changes/{change.pk}/approve/" in panel and f"/changes/{change.pk}/reject/" in panel
    assert f"/{day['waiting'].pk}/approve/" in panel and f"/{day['waiting'].pk}/reject/" in panel


def test_the_operators_home_leads_with_open_alerts_worst_first(
    client, day, ops, django_assert_max_num_queries
):
    from leasing.choices import AlertKind, AlertSeverity
    from leasing.models import Alert

    Node.objects.filter(status=Node.Status.MAINTENANCE).update(status=Node.Status.ACTIVE)
    node = Node.objects.get(hostname="home-01")
    card = node.cards.order_by("index").first()
    warn = Alert.objects.create(
        kind=AlertKind.MEMORY_FULL,
        severity=AlertSeverity.WARNING,
        subject=f"card:{card.pk}",
        card=card,
        opened_at=T0 - timedelta(minutes=1),
        last_seen_at=T0,
    )
    crit = Alert.objects.create(
        kind=AlertKind.CARD_HOT,
        severity=AlertSeverity.CRITICAL,
        subject=f"card:{card.pk}:hot",
        card=card,
        opened_at=T0 - timedelta(minutes=5),
        last_seen_at=T0,
    )
    html = page(client, ops, 27, django_assert_max_num_queries)
    panel = html.split('id="home-operator"', 1)[1].split("</section>", 1)[0]
    assert 'data-alerts="2"' in panel
    assert panel.index(f'data-alert="{crit.pk}"') < panel.index(f'data-alert="{warn.pk}"')
    assert panel.index('id="home-alerts"') < panel.index('data-stat="cards"')
    assert "Every node takes leases" not in panel
    nav = html.split('class="site-nav"', 1)[1].split("</nav>", 1)[0]
    assert 'data-alerts-open="2"' in nav  # the badge on the alerts link


def test_no_alert_no_badge_and_every_node_takes_leases(
    client, day, ops, django_assert_max_num_queries
):
    Node.objects.filter(status=Node.Status.MAINTENANCE).update(status=Node.Status.ACTIVE)
    html = page(client, ops, 27, django_assert_max_num_queries)
    assert "data-alerts-open" not in html and 'id="home-alerts"' not in html
    assert "Every node takes leases" in html
