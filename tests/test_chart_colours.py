"""One colour per card model, the same on every chart and over every date range (the team
chart over two ranges with different models, the pool page's charts), and no two models of
the demo pool sharing one."""

from __future__ import annotations

import html
import json
import re
from datetime import timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from inventory.charts import model_colours, model_colours_by_name
from inventory.models import CardModel
from leasing.lifecycle import provisioning
from portal import charts
from portal.demo import seed_inventory
from tests.leasing.conftest import T0, ask, hours

SLUGS = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-", min_size=1, max_size=20)


@settings(deadline=None)  # a shared machine: time is not what this checks
@given(st.lists(SLUGS, unique=True, max_size=len(charts.PALETTE)), st.lists(SLUGS, max_size=8))
def test_colours_are_distinct_and_later_keys_never_move_earlier_ones(keys, more):
    first = charts.colours(keys)
    assert len(set(first.values())) == len(keys)  # no more keys than colours: none shared
    later = charts.colours(keys + [m for m in more if m not in keys])
    assert {k: later[k] for k in keys} == first


def test_no_two_models_of_the_demo_pool_share_a_colour(db):
    seed_inventory()
    colours = model_colours()
    in_pool = CardModel.objects.filter(cards__isnull=False).distinct()
    assert set(colours) == set(in_pool.values_list("pk", flat=True))
    assert len(colours) == 12
    assert len(set(colours.values())) == len(colours)
    ascend, t4 = (CardModel.objects.get(slug=s).pk for s in ("ascend-910b", "t4"))
    assert colours[ascend] != colours[t4]


def _figures(page: str) -> list[dict]:
    return [
        json.loads(html.unescape(m.group(1))) for m in re.finditer(r'data-figure="([^"]*)"', page)
    ]


def _trace_colours(figure: dict) -> dict[str, str]:
    out = {}
    for trace in figure["data"]:
        colour = (trace.get("marker") or {}).get("color") or (trace.get("line") or {}).get("color")
        out[trace["name"]] = colour
    return out


@pytest.mark.django_db
def test_a_model_keeps_its_colour_across_charts_and_ranges(client, lena, alice, vision):
    import time_machine

    seed_inventory()
    t4, ascend, a100 = (
        CardModel.objects.get(slug=s) for s in ("t4", "ascend-910b", "a100-80g-sxm")
    )
    with time_machine.travel(T0 - timedelta(days=20), tick=False) as clock:
        for model in (t4, ascend):  # the first range: T4 and Ascend
            provisioning.provision_step(lease_id=ask(alice, vision, model, duration=hours(2)).pk)
        clock.shift(timedelta(days=10))
        for model in (a100, t4):  # the second: A100 and T4, the T4 traced second now
            provisioning.provision_step(lease_id=ask(alice, vision, model, duration=hours(2)).pk)
        clock.move_to(T0)
        client.force_login(lena)
        client.cookies["django_language"] = "en"
        first_day = (T0 - timedelta(days=21)).date()
        second_day = (T0 - timedelta(days=11)).date()

        def team_chart(start, end) -> dict[str, str]:
            page = client.get(f"/teams/vision/?start={start}&end={end}").content.decode()
            (figure,) = _figures(page)
            return _trace_colours(figure)

        first = team_chart(first_day, first_day + timedelta(days=2))
        second = team_chart(second_day, second_day + timedelta(days=2))
        pool_page = client.get("/pool/").content.decode()
    assert set(first) == {t4.name, ascend.name} and set(second) == {a100.name, t4.name}
    expected = model_colours_by_name()
    assert first[t4.name] == second[t4.name] == expected[t4.name]
    assert first[ascend.name] != first[t4.name] and second[a100.name] != second[t4.name]
    utilisation = _trace_colours(_figures(pool_page)[0])
    assert utilisation[t4.name] == expected[t4.name]
    assert utilisation[ascend.name] == expected[ascend.name]
    assert utilisation[a100.name] == expected[a100.name]
