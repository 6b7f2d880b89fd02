"""Money shown = money billed (issue #32, DESIGN invariant 14): the catalogue, the model page,
the inventory API, the advisor and the choice by requirements read the price in force for
the reader's team (``billing.prices``), not ``CardModel.price_per_hour``; every amount names
the configured currency; the team page's "used" is the finance report's figure, with booked
and waiting requests apart; the lease page's cost to the end stops at a drain."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal
from pathlib import Path

import pytest

from leasing.advisor.estimator import TaskProfile
from leasing.advisor.recommend import recommend
from leasing.billing import reports
from leasing.choices import LeaseStatus
from leasing.lifecycle import maintenance, provisioning
from leasing.models import Price, TeamPrice
from leasing.periods import month_of
from leasing.teams.selectors import team_overview
from tests.factories import CardModelFactory, make_node
from tests.leasing.conftest import T0, ask, hours

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def priced(db, vision, a100):
    """a100 defaults to 10.00; its list price is 12.00; vision pays 7.00 (its own price)."""
    make_node(a100, cards=4, domains=1, hostname="m1")
    Price.objects.create(
        card_model=a100, price_per_hour=Decimal("12.00"), effective_from=T0 - hours(48)
    )
    TeamPrice.objects.create(
        team=vision,
        card_model=a100,
        price_per_hour=Decimal("7.00"),
        effective_from=T0 - hours(24),
    )
    return a100


def test_catalogue_and_model_page_show_the_readers_price(frozen, client, alice, bob, priced):
    client.force_login(alice)  # vision: its own price
    page = client.get("/inventory/?pool=all").content.decode()
    assert 'data-price="7.0000"' in page and "CNY 7.00" in page
    model_page = client.get(f"/inventory/models/{priced.slug}/").content.decode()
    assert 'data-price="7.0000"' in model_page
    assert 'data-price-preemptible="3.5000"' in model_page  # the preemptible discount
    client.force_login(bob)  # nlp: the list price, not the model's default
    page = client.get("/inventory/?pool=all").content.decode()
    row = page[page.index(f'/inventory/models/{priced.slug}/"') :]
    row = row[: row.index("</tr>")]
    assert 'data-price="12.0000"' in row and "CNY 12.00" in row


def test_catalogue_sorts_by_the_price_in_force(frozen, client, alice, priced):
    dear = CardModelFactory(slug="dear", name="Dear", price_per_hour=Decimal("9.00"))
    make_node(dear, cards=1, hostname="m2")
    client.force_login(alice)
    page = client.get("/inventory/?sort=price").content.decode()
    # By default price a100 (10.00) would sort after Dear (9.00); vision pays 7.00 for it.
    assert page.index(f'/inventory/models/{priced.slug}/"') < page.index('/inventory/models/dear/"')


def test_inventory_api_gives_the_price_in_force_and_the_currency(
    frozen, api, alice, bob, priced, settings
):
    settings.CARDPOOL_CURRENCY = "EUR"
    api.force_authenticate(alice)
    row = api.get(f"/api/v1/card-models/{priced.slug}/").json()
    assert (row["price_per_hour"], row["currency"]) == (7.0, "EUR")
    listed = {r["slug"]: r for r in api.get("/api/v1/card-models/").json()["results"]}
    assert listed[priced.slug]["price_per_hour"] == 7.0
    api.force_authenticate(bob)
    assert api.get(f"/api/v1/card-models/{priced.slug}/").json()["price_per_hour"] == 12.0


def test_the_advisor_quotes_the_teams_price(frozen, vision, priced):
    rec = recommend(
        profile=TaskProfile(task="inference", params_b=7),
        duration=hours(2),
        team_id=vision.pk,
    )
    option = next(o for o in rec.options if o.card_model == priced)
    assert option.price_per_hour == Decimal("7.0000")


def test_choosing_by_requirements_breaks_ties_on_the_teams_price(frozen, alice, vision, priced):
    # Same start, same memory; by default price "rival" (9.00) is cheaper than a100 (10.00),
    # but vision pays 7.00 for a100: its bill decides.
    rival = CardModelFactory(slug="rival", name="Rival", price_per_hour=Decimal("9.00"))
    make_node(rival, cards=4, domains=1, hostname="m3")
    lease = ask(alice, vision, None, requirements={"min_memory_gb": Decimal("40")})
    assert lease.card_model == priced


def test_amounts_name_the_configured_currency(frozen, client, alice, vision, priced, settings):
    settings.CARDPOOL_CURRENCY = "EUR"
    lease = ask(alice, vision, priced, duration=hours(2))
    provisioning.provision_step(lease_id=lease.pk)
    client.force_login(alice)
    page = client.get(f"/leases/{lease.pk}/").content.decode()
    assert 'data-cost="to-end">EUR 14.00' in page
    team = client.get("/teams/vision/").content.decode()
    assert "EUR" in team and "CNY" not in team


def test_no_currency_sign_is_written_in_templates_or_code():
    found = []
    for folder in ("templates", "leasing", "inventory", "portal", "static/js"):
        for path in (ROOT / folder).rglob("*"):
            if path.suffix not in (".html", ".py", ".js") or "migrations" in path.parts:
                continue
            for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
                if any(sign in line for sign in "¥€£"):
                    found.append(f"{path.relative_to(ROOT)}:{n}")
    assert found == []


def test_team_page_used_is_the_reports_figure_and_waiting_is_apart(
    frozen, client, alice, lena, vision, a100
):
    make_node(a100, cards=2, domains=1, hostname="w1")
    held = ask(alice, vision, a100, count=2, duration=hours(4))
    provisioning.provision_step(lease_id=held.pk)
    waiting = ask(lena, vision, a100, count=2, duration=hours(2))
    assert waiting.status == LeaseStatus.QUEUED
    frozen.shift(timedelta(hours=1, minutes=10, seconds=30))
    now = T0 + timedelta(hours=1, minutes=10, seconds=30)
    overview = team_overview(vision, now=now)
    row = next(r for r in overview["rows"] if r.card_model is None)
    since, until = month_of(now)
    report = reports.usage_report(
        reports.ReportFilter(
            start=since.date(),
            end=(until - timedelta(days=1)).date(),
            group_by="team",
            period="month",
            team_ids=(vision.pk,),
        ),
        now=now,
    )
    assert row.used_hours.quantize(Decimal("0.01")) == report["totals"]["card_hours"]
    assert row.used_hours == Decimal("2") * Decimal(70) / 60  # 2 cards × 70 whole minutes
    assert row.waiting_hours == Decimal(4)  # 2 cards × 2 h, not in "used"
    assert row.booked_hours > 0
    client.force_login(lena)
    page = client.get("/teams/vision/").content.decode()
    line = page[page.index('data-quota-row="all"') :]
    assert 'data-waiting="4.00"' in line[: line.index("</tr>")]


def test_lease_page_cost_to_the_end_stops_at_a_drain(frozen, client, alice, vision, a100, ops):
    node = make_node(a100, cards=1, domains=1, hostname="dr1")
    lease = ask(alice, vision, a100, duration=hours(5))
    provisioning.provision_step(lease_id=lease.pk)
    maintenance.node_drain(user=ops, node=node, drain_at=T0 + hours(1))
    client.force_login(alice)
    page = client.get(f"/leases/{lease.pk}/").content.decode()
    assert 'data-cost="to-end">CNY 10.00' in page  # 1 h at 10.00, not 5 h
