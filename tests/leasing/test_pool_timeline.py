"""The availability calendar and the pool timeline place a known reservation in its slot, and
both lead to the request form with the slot's start filled in."""

import json
import re
from datetime import timedelta
from html import unescape

import pytest

from leasing.choices import LeaseStatus
from leasing.lifecycle import pool_timeline
from tests.leasing.conftest import T0, ask, hours

TOMORROW_9 = T0 + timedelta(days=1)  # 2026-12-02 09:00 Asia/Shanghai


@pytest.fixture
def reservation(frozen, alice, vision, a100, small_pool):
    lease = ask(alice, vision, a100, count=2, duration=hours(3), start_at=TOMORROW_9)
    assert lease.status == LeaseStatus.SCHEDULED
    return lease


def _cells(page: str, day: str) -> list[tuple[str, str]]:
    """(slot start, shown text) of each cell in the calendar's row for *day* ("12-02")."""
    row = re.search(rf"<tr><th scope=\"row\" class=\"nowrap\">{day} .*?</tr>", page, re.S).group(0)
    return [
        (slot, re.sub(r"<[^>]+>", "", text).strip())
        for slot, text in re.findall(r'data-slot="([^"]+)"[^>]*>(.*?)</td>', row, re.S)
    ]


def test_calendar_rows_start_at_midnight_and_the_reservation_sits_under_0900(
    reservation, client, alice
):
    client.force_login(alice)
    page = client.get("/leases/calendar/a100-test/").content.decode()
    header = re.findall(r'<th scope="col" class="num">([0-9:]+)</th>', page)
    assert header == ["00:00", "03:00", "06:00", "09:00", "12:00", "15:00", "18:00", "21:00"]
    today, tomorrow = _cells(page, "12-01"), _cells(page, "12-02")
    assert [slot[-5:] for slot, _ in today] == header  # today's row also starts at 00:00
    assert [slot[-5:] for slot, _ in tomorrow] == header
    assert [text for _, text in tomorrow] == ["8", "8", "8", "6", "8", "8", "8", "8"]
    assert [text for _, text in today][:3] == ["·", "·", "·"]  # over before 09:00
    # a future slot links to the form, filled in for a reservation from that slot
    assert "start=later&amp;start_at=2026-12-02T12:00" in page


def test_timeline_places_the_reservation_on_its_cards_in_its_hours(reservation, alice, bob, a100):
    data = pool_timeline.pool_timeline(a100, user=alice, start=T0, end=T0 + timedelta(days=3))
    held = {
        f"{a.card.node.hostname} #{a.card.index}"
        for a in reservation.allocations.select_related("card__node")
    }
    mine = [b for b in data["booked"] if f"lease {reservation.pk}" in b.label]
    assert {b.row for b in mine} == held and len(mine) == 2
    assert all((b.start, b.end) == (TOMORROW_9, TOMORROW_9 + hours(3)) for b in mine)
    assert all(b.url == f"/leases/{reservation.pk}/" for b in mine)
    for row in held:  # free before it (from now) and after it (from 12:00)
        free = sorted((b.start, b.end) for b in data["free"] if b.row == row)
        assert free[0] == (T0, TOMORROW_9) and free[1][0] == TOMORROW_9 + hours(3)
    after = next(b for b in data["free"] if b.row in held and b.start == TOMORROW_9 + hours(3))
    assert "start=later&start_at=2026-12-02T12%3A00" in after.url
    assert len(data["rows"]) == 8 and all(b.start == T0 for b in data["free"] if b.row not in held)
    # someone who may not see the lease sees the slot booked, not who holds it
    theirs = pool_timeline.pool_timeline(a100, user=bob, start=T0, end=T0 + timedelta(days=3))
    assert {b.label for b in theirs["booked"]} == {"booked"}


def test_timeline_page_draws_the_bars_in_local_time(reservation, client, alice):
    client.force_login(alice)
    page = client.get("/leases/timeline/a100-test/").content.decode()
    figure = json.loads(unescape(re.search(r'data-figure="([^"]+)"', page).group(1)))
    booked, free = figure["data"]
    at = booked["base"].index("2026-12-02 09:00")
    assert booked["x"][at] == 3 * 3600 * 1000  # three hours, in plotly's milliseconds
    assert booked["customdata"][at] == f"/leases/{reservation.pk}/"
    assert (
        booked["orientation"] == "h"
        and booked["y"][at] in figure["layout"]["yaxis"]["categoryarray"]
    )
    assert all(url.startswith("/leases/new/?card_model=a100-test") for url in free["customdata"])


def test_a_picked_slot_fills_in_the_request_form(frozen, client, alice, a100, small_pool):
    client.force_login(alice)
    page = client.get(
        "/leases/new/?card_model=a100-test&start=later&start_at=2026-12-02T12:00"
    ).content.decode()
    assert 'value="2026-12-02T12:00"' in page
    assert re.search(r'value="later"[^>]*checked|checked[^>]*value="later"', page)
    bad = client.get("/leases/new/?start=later&start_at=soon").content.decode()
    assert 'value="now"' in bad and re.search(
        r'value="now"[^>]*checked|checked[^>]*value="now"', bad
    )


def test_a_big_pool_is_shown_a_few_nodes_at_a_time(
    frozen, client, alice, a100, django_assert_max_num_queries
):
    from tests.factories import make_node

    for i in range(pool_timeline.NODES_PER_PAGE + 3):
        make_node(a100, cards=2, domains=1, hostname=f"big{i:02d}")
    first = pool_timeline.pool_timeline(a100, user=alice, start=T0, end=T0 + timedelta(days=1))
    assert (first["pages"], first["nodes"], len(first["rows"])) == (2, 11, 16)
    last = pool_timeline.pool_timeline(
        a100, user=alice, start=T0, end=T0 + timedelta(days=1), page=9
    )
    assert last["page"] == 2 and last["rows"] == [
        "big08 #0",
        "big08 #1",
        "big09 #0",
        "big09 #1",
        "big10 #0",
        "big10 #1",
    ]
    client.force_login(alice)
    with django_assert_max_num_queries(16):
        page = client.get("/leases/timeline/a100-test/?page=2").content.decode()
    assert 'data-pages="2"' in page and "big10 #1" in page and "big00 #0" not in page
    assert client.get("/leases/timeline/a100-test/?page=x").status_code == 400


def test_calendar_and_timeline_open_on_the_model_of_ones_latest_lease(reservation, client, alice):
    from tests.factories import CardModelFactory, make_node

    first = CardModelFactory(slug="aaa-first", name="AAA first", vendor="amd")
    make_node(first, cards=1, domains=1, hostname="aaa-node")
    client.force_login(alice)
    for url in ("/leases/calendar/", "/leases/timeline/"):
        page = client.get(url).content.decode()
        assert '<option value="a100-test" selected>' in page, url
