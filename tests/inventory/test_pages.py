"""Inventory pages: catalogue, model spec sheet, node list and node topology, in both languages."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
import time_machine
from django.utils import translation

from inventory.models import Card, InterconnectKind, Node, Vendor
from inventory.views import COLUMNS
from leasing.choices import LeaseStatus
from leasing.models import Allocation, Lease
from tests.factories import CardModelFactory, RegionFactory, make_node

NOW = datetime(2026, 3, 2, 8, 0, tzinfo=UTC)
CATALOGUE = "/inventory/"
NODES = "/inventory/nodes/"


@pytest.fixture(autouse=True)
def frozen():
    with time_machine.travel(NOW, tick=False):
        yield


@pytest.fixture
def pool(db):
    """Two models on two nodes: an NVLink model in two islands and an HCCS one."""
    nv = CardModelFactory(
        slug="t-nv80",
        name="T-NV80",
        vendor=Vendor.NVIDIA,
        memory_gb=Decimal("80"),
        fp8_tflops=None,
        price_per_hour=Decimal("20.00"),
    )
    asc = CardModelFactory(
        slug="t-asc64",
        name="T-ASC64",
        vendor=Vendor.HUAWEI,
        memory_gb=Decimal("64"),
        fp8_tflops=Decimal("700"),
        interconnect_kind=InterconnectKind.HCCS,
        price_per_hour=Decimal("9.00"),
    )
    beijing = RegionFactory(slug="t-bj", name="Beijing")
    make_node(nv, cards=8, domains=2, hostname="gpu-01.bj.example.org", region=beijing)
    make_node(
        asc, cards=8, domains=2, hostname="npu-01.sh.example.org", status=Node.Status.MAINTENANCE
    )
    return nv, asc


def hold(card: Card, user, team, *, start: datetime, end: datetime) -> Allocation:
    lease = Lease.objects.create(
        user=user,
        team=team,
        card_model=card.card_model,
        count=1,
        duration=end - start,
        start_at=start,
        end_at=end,
        status=LeaseStatus.ACTIVE,
        submitted_at=start,
    )
    return Allocation.objects.create(card=card, lease=lease, start_at=start, end_at=end)


def text(response) -> str:
    """The page's visible text, tags stripped and whitespace collapsed."""
    html = response.content.decode()
    html = re.sub(r"<(script|style)\b.*?</\1>", " ", html, flags=re.S)
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html))


def header_labels(lang: str) -> list[str]:
    """The catalogue's column labels that are words (not FP64-style names) in *lang*."""
    with translation.override(lang):
        return [str(c.label) for c in COLUMNS if not c.group]


def row_order(response, *names: str) -> list[str]:
    body = response.content.decode()
    return sorted(names, key=body.index)


# --- Access -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "url",
    [CATALOGUE, "/inventory/models/t-nv80/", NODES, "/inventory/nodes/gpu-01.bj.example.org/"],
)
def test_anonymous_is_sent_to_login(client, pool, url):
    response = client.get(url)
    assert response.status_code == 302
    assert response["Location"].startswith("/accounts/login/?next=")


def test_unknown_model_and_node_are_404(client, alice):
    client.force_login(alice)
    assert client.get("/inventory/models/no-such-model/").status_code == 404
    assert client.get("/inventory/nodes/no-such-node.example.org/").status_code == 404


# --- Languages --------------------------------------------------------------------------


def test_catalogue_in_chinese_has_no_english_headers(client, alice, pool):
    client.cookies["django_language"] = "zh-hans"
    client.force_login(alice)
    page = text(client.get(CATALOGUE))
    assert "卡型目录" in page
    assert "当前空闲 / 总数" in page
    for english, chinese in zip(header_labels("en"), header_labels("zh-hans"), strict=True):
        assert english != chinese, f"column {english!r} has no translation"
        assert chinese in page
        if english not in chinese:  # "功耗 TDP (W)" keeps the acronym on purpose
            assert english not in page
    for english in [
        "Catalogue",
        "Nodes",
        "My leases",
        "Sign out",
        "Apply filters",
        "Peak throughput",
    ]:
        assert english not in page


def test_catalogue_in_english(client, alice, pool):
    client.cookies["django_language"] = "en"
    client.force_login(alice)
    page = text(client.get(CATALOGUE))
    assert "Card model catalogue" in page
    for english in header_labels("en"):
        assert english in page
    assert "卡型目录" not in page


@pytest.mark.parametrize(
    ("accept", "expected", "absent"),
    [
        (
            "zh-CN,zh;q=0.9",
            ["按互联域分组的卡", "互联域 0", "互联域 1", "空闲"],
            "Cards by interconnect domain",
        ),
        (
            "en-US,en;q=0.9",
            ["Cards by interconnect domain", "Domain 0", "Domain 1", "Free"],
            "按互联域",
        ),
    ],
)
def test_node_page_in_both_languages(client, alice, pool, accept, expected, absent):
    client.force_login(alice)
    response = client.get("/inventory/nodes/gpu-01.bj.example.org/", HTTP_ACCEPT_LANGUAGE=accept)
    assert response.status_code == 200
    page = text(response)
    for word in expected:
        assert word in page
    assert absent not in page


def test_language_switcher_posts_without_javascript(client, alice, pool):
    client.force_login(alice)
    response = client.post("/i18n/setlang/", {"language": "en", "next": CATALOGUE})
    assert response.status_code == 302
    assert "Card model catalogue" in text(client.get(CATALOGUE))


# --- Catalogue: counts, filters, sorting ------------------------------------------------


def test_catalogue_shows_free_now_and_dashes_for_missing_figures(client, alice, vision, pool):
    nv, _ = pool
    card = Card.objects.filter(card_model=nv).first()
    hold(card, alice, vision, start=NOW - timedelta(hours=1), end=NOW + timedelta(hours=1))
    client.force_login(alice)
    rows = {m.slug: m for m in client.get(CATALOGUE).context["models"]}
    assert (rows["t-nv80"].total, rows["t-nv80"].available) == (8, 7)
    # Maintenance: the node takes no leases, so nothing is free.
    assert (rows["t-asc64"].total, rows["t-asc64"].available) == (8, 0)
    row = re.search(
        r"<tr>\s*<th[^>]*>\s*<a [^>]*>T-NV80</a>.*?</tr>",
        client.get(CATALOGUE).content.decode(),
        re.S,
    )
    assert "—" in row.group(0)  # no FP8 figure on this spec sheet


@pytest.mark.parametrize(
    ("query", "kept", "dropped"),
    [
        ("vendor=huawei", "t-asc64", "t-nv80"),
        ("min_memory_gb=70", "t-nv80", "t-asc64"),
        ("min_memory=70", "t-nv80", "t-asc64"),  # the name the page used before
        ("precision=fp8", "t-asc64", "t-nv80"),
        ("interconnect=hccs", "t-asc64", "t-nv80"),
    ],
)
def test_catalogue_filters(client, alice, pool, query, kept, dropped):
    client.force_login(alice)
    slugs = {m.slug for m in client.get(f"{CATALOGUE}?{query}").context["models"]}
    assert kept in slugs
    assert dropped not in slugs


def test_catalogue_sorts_by_whitelisted_columns(client, alice, pool):
    client.force_login(alice)
    assert row_order(client.get(f"{CATALOGUE}?sort=memory"), "T-NV80", "T-ASC64") == [
        "T-ASC64",
        "T-NV80",
    ]
    assert row_order(client.get(f"{CATALOGUE}?sort=-memory"), "T-NV80", "T-ASC64") == [
        "T-NV80",
        "T-ASC64",
    ]
    assert row_order(client.get(f"{CATALOGUE}?sort=price"), "T-NV80", "T-ASC64") == [
        "T-ASC64",
        "T-NV80",
    ]
    response = client.get(f"{CATALOGUE}?sort=-price&vendor=nvidia")
    # Header links keep the filters and flip the direction of the active column.
    assert 'href="?sort=price&amp;vendor=nvidia"' in response.content.decode()


@pytest.mark.parametrize(
    "query",
    [
        "sort=drop%20table",
        "sort=-",
        "sort=memory_gb",
        "sort=__class__",
        "min_memory=lots",
        "min_memory=-5",
        "vendor=nobody",
        "precision=fp99",
        "interconnect=smoke-signals",
        "vendor=huawei&min_memory=abc&sort=%27",
    ],
)
def test_catalogue_bad_values_fall_back(client, alice, pool, query):
    client.force_login(alice)
    response = client.get(f"{CATALOGUE}?{query}")
    assert response.status_code == 200
    assert "t-asc64" in {m.slug for m in response.context["models"]}


def test_catalogue_reports_bad_filter_values(client, alice, pool):
    client.force_login(alice)
    client.cookies["django_language"] = "en"
    response = client.get(f"{CATALOGUE}?min_memory_gb=lots&vendor=huawei")
    assert response.context["form"].errors["min_memory_gb"]
    assert 'class="errorlist' in response.content.decode()
    # The valid filter still applies.
    assert {m.slug for m in response.context["models"]} >= {"t-asc64"}
    assert "t-nv80" not in {m.slug for m in response.context["models"]}


# --- Model page, node list and node page ------------------------------------------------


def test_card_model_page_lists_its_nodes(client, alice, pool):
    client.force_login(alice)
    response = client.get("/inventory/models/t-nv80/")
    assert response.status_code == 200
    page = text(response)
    assert "gpu-01.bj.example.org" in page
    assert "npu-01.sh.example.org" not in page
    assert "CUDA_VISIBLE_DEVICES" in page


@pytest.mark.parametrize(
    ("query", "shown", "hidden"),
    [
        ("region=t-bj", "gpu-01.bj.example.org", "npu-01.sh.example.org"),
        ("status=maintenance", "npu-01.sh.example.org", "gpu-01.bj.example.org"),
        ("model=t-nv80", "gpu-01.bj.example.org", "npu-01.sh.example.org"),
    ],
)
def test_node_list_filters(client, alice, pool, query, shown, hidden):
    client.force_login(alice)
    page = text(client.get(f"{NODES}?{query}"))
    assert shown in page
    assert hidden not in page


@pytest.mark.parametrize("query", ["region=atlantis", "status=on-fire", "page=abc", "page=999"])
def test_node_list_bad_values_fall_back(client, alice, pool, query):
    client.force_login(alice)
    assert client.get(f"{NODES}?{query}").status_code == 200


def test_node_list_nul_is_refused(client, alice, pool):
    """A NUL is refused before any page (portal.input.RefuseNulMiddleware, issue #15)."""
    client.force_login(alice)
    assert client.get(f"{NODES}?model=%00").status_code == 400


def test_node_page_shows_topology_and_busy_cards(client, alice, vision, pool):
    node = Node.objects.get(hostname="gpu-01.bj.example.org")
    busy = node.cards.get(index=5)
    hold(busy, alice, vision, start=NOW - timedelta(hours=1), end=NOW + timedelta(hours=3))
    Card.objects.filter(node=node, index=7).update(status=Card.Status.FAULTY)
    client.force_login(alice)
    client.cookies["django_language"] = "en"
    response = client.get(f"/inventory/nodes/{node.hostname}/")
    domains = response.context["domains"]
    assert [d["number"] for d in domains] == [0, 1]
    assert [c.index for c in domains[1]["cards"]] == [4, 5, 6, 7]
    assert (domains[0]["available"], domains[1]["available"]) == (4, 2)
    assert response.context["totals"] == {"cards": 8, "available": 6, "busy": 1}
    page = text(response)
    assert "In use until" in page
    assert "Faulty" in page


def test_the_node_table_on_the_node_list_and_on_a_model_page(client, alice):
    """One table (inventory/_node_table.html): the list names each node's model, a mixed node
    with a count of the others; a model's page leaves that column out."""
    a, b = CardModelFactory(slug="tbl-a", name="Tbl A"), CardModelFactory(slug="tbl-b")
    mixed = make_node(a, cards=2, hostname="tbl-mixed")
    Card.objects.create(node=mixed, card_model=b, index=2, uuid="tbl-mixed-2")
    CardModelFactory(slug="tbl-none", name="Tbl None")
    client.force_login(alice)
    listing = client.get(NODES, HTTP_ACCEPT_LANGUAGE="en").content.decode()
    row = listing[listing.index(">tbl-mixed<") :]
    row = row[: row.index("</tr>")]
    assert "Card model" in listing and "+1 other" in row
    page = client.get("/inventory/models/tbl-none/", HTTP_ACCEPT_LANGUAGE="en").content.decode()
    assert "No node holds this model yet." in page and 'colspan="6"' in page
    assert ">Card model<" not in page[page.index("Nodes holding this model") :]
    empty = client.get(NODES + "?status=offline", HTTP_ACCEPT_LANGUAGE="en").content.decode()
    assert "No node matches these filters." in empty and 'colspan="7"' in empty
