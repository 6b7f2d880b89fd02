"""A crawl over every page each persona reaches, in Simplified Chinese: no rendered text is a
raw key (a snake_case choice value such as ``needs_approval``) or an English catalogue string
left untranslated.

The world is the demo's (``seed_demo``: the pool, teams, leases and their history, warnings
and notifications), so the pages show what users see. Each persona (alice the member, lena
the lead, fin, ops) starts at the home page and follows every link inside the portal (not
the admin, the API, downloads, sign-out or the language switch), up to ``LIMIT`` pages. The
text checked is what a browser shows: the HTML with tags, scripts, styles and attributes
removed, and the text of each chart's figure (titles, axis titles, series names).
"""

from __future__ import annotations

import json
import re
from html import unescape
from html.parser import HTMLParser
from urllib.parse import urljoin, urlsplit

import polib
import pytest
from django.conf import settings
from django.core.management import call_command
from django.db import transaction
from django.test import Client
from django.utils import translation

from inventory.models import Node, Vendor
from leasing import choices

LIMIT = 140
PO = settings.BASE_DIR / "locale" / "zh_Hans" / "LC_MESSAGES" / "django.po"
SKIP = re.compile(
    r"^/(admin/|api/|static/|i18n/|metrics|accounts/(?!profile/$)|media/)"
    r"|[?&](format|download|sort)="
)
PER_SHAPE = 8  # pages of one shape (/leases/<id>/, /inventory/nodes/<host>/ …) per persona


class _Text(HTMLParser):
    """The visible text of a page, and its links and chart figures."""

    def __init__(self):
        super().__init__()
        self.text: list[str] = []
        self.links: list[str] = []
        self.figures: list[str] = []
        self._skip = 0

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag in ("script", "style", "template"):
            self._skip += 1
        if tag == "a" and attrs.get("href"):
            self.links.append(attrs["href"])
        if attrs.get("data-figure"):
            self.figures.append(attrs["data-figure"])
        for name in ("placeholder", "title", "aria-label", "data-confirm", "value"):
            if name in attrs and tag != "input" or (name == "placeholder" and tag == "input"):
                if attrs.get(name) and name != "value":
                    self.text.append(attrs[name])

    def handle_endtag(self, tag):
        if tag in ("script", "style", "template") and self._skip:
            self._skip -= 1

    def handle_data(self, data):
        if not self._skip:
            self.text.append(data)


def _figure_text(figure: str) -> list[str]:
    data = json.loads(unescape(figure))
    out = [trace.get("name", "") for trace in data.get("data", [])]
    layout = data.get("layout", {})
    for key in ("title", "xaxis", "yaxis"):
        part = layout.get(key, {})
        title = part.get("title", part) if isinstance(part, dict) else part
        if isinstance(title, dict):
            title = title.get("text", "")
        if isinstance(title, str):
            out.append(title)
    for trace in data.get("data", []):
        for axis in ("x", "y"):
            values = trace.get(axis)
            if trace.get("type") == "bar" and isinstance(values, list):
                out += [v for v in values if isinstance(v, str)]
    return out


# Keys a page must never show as they are: every choice value with an underscore, and the
# lease events' kinds.
RAW_KEYS = {
    value
    for enum in (
        choices.LeaseStatus,
        choices.EndReason,
        choices.Kind,
        choices.Priority,
        choices.WarningKind,
        choices.StallReason,
        Vendor,
        Node.Status,
    )
    for value in enum.values
    if "_" in value
} | {"needs_approval", "card_replaced", "resized", "requeued", "placed", "booked"}
SNAKE = re.compile(r"(?<![\w./:-])[a-z]+(?:_[a-z0-9]+)+(?![\w./-])")


def _catalogue_phrases() -> list[str]:
    """English phrases of the catalogue that a zh-hans page would show only if left
    untranslated: the static parts (between placeholders) of two words or more."""
    phrases = set()
    for entry in polib.pofile(str(PO)):
        if not entry.msgstr or entry.msgstr == entry.msgid:
            continue
        for part in re.split(r"%\(\w+\)[sd]|%[sd]|\{\w*\}|\n", entry.msgid):
            part = part.strip(" .:,;·()—-")
            if len(part) >= 12 and " " in part and re.search(r"[a-z]{3}", part):
                phrases.add(part)
    return sorted(phrases)


# Vendor names are also part of the card models' own names ("Huawei Ascend 910B"): data.
with translation.override("en"):
    VENDOR_NAMES = {str(label) for label in Vendor.labels}
PHRASES = [p for p in _catalogue_phrases() if p not in VENDOR_NAMES]
# Text that is data, not interface: names from the demo (regions are bilingual) and the
# card catalogue's own English (model names, software stacks), the footer's zone name.
ALLOWED = re.compile(r"North DC|Beijing|Shanghai|Shenzhen edge|Asia/Shanghai")


def crawl(client: Client, start: str = "/") -> dict[str, str]:
    """Each page reached from *start* (GET, HTML, 200) → its visible text."""
    seen: dict[str, str] = {}
    shapes: dict[str, int] = {}
    queue = [start]
    while queue and len(seen) < LIMIT:
        url = queue.pop(0)
        if url in seen:
            continue
        response = client.get(url)
        if response.status_code != 200 or "text/html" not in response.get("Content-Type", ""):
            seen[url] = ""
            continue
        parser = _Text()
        parser.feed(response.content.decode())
        text = [*parser.text]
        for figure in parser.figures:
            text += _figure_text(figure)
        seen[url] = " ".join(" ".join(text).split())
        for href in parser.links:
            target = urljoin(url, href.split("#", 1)[0])
            parts = urlsplit(target)
            if parts.scheme or parts.netloc or not target.startswith("/"):
                continue
            if SKIP.search(target) or target in seen or target in queue:
                continue
            shape = re.sub(r"/[^/?]*\d[^/?]*/", "/<x>/", parts.path) + ("?" if parts.query else "")
            if shapes.get(shape, 0) >= PER_SHAPE:
                continue
            shapes[shape] = shapes.get(shape, 0) + 1
            queue.append(target)
    return seen


def problems_in(url: str, text: str, *, chinese: bool = True) -> list[str]:
    """Raw keys on the page; and, on a Chinese page, English catalogue phrases."""
    found = []
    for key in sorted(set(SNAKE.findall(text))):
        if key in RAW_KEYS or key.split("_")[0] in ("needs", "card", "lease", "release"):
            found.append(f"{url}: raw key {key!r}")
    clean = ALLOWED.sub("", text) if chinese else ""
    for phrase in PHRASES:
        if phrase in clean:
            found.append(f"{url}: untranslated {phrase!r}")
    return found


def _more_to_read() -> None:
    """Beyond the demo: a request waiting for approval (its reasons), a card swapped, a node
    draining, last month's statements issued (and their notices)."""
    from datetime import timedelta

    from django.contrib.auth import get_user_model
    from django.utils import timezone

    from inventory.models import Card
    from leasing.billing import statements, usage
    from leasing.lifecycle import maintenance
    from leasing.lifecycle import requests as lease_requests
    from leasing.models import Allocation
    from leasing.teams import services as team_services
    from portal.models import Membership

    users = {u.username: u for u in get_user_model().objects.all()}
    membership = Membership.objects.get(user=users["alice"], team__slug="vision")
    team_services.member_limit_set(
        user=users["lena"], membership=membership, card_model=None, max_concurrent_cards=1
    )
    now = timezone.now()
    held = (
        Allocation.objects.filter(
            start_at__lte=now, end_at__gt=now, lease__status__in=("active", "provisioning")
        )
        .select_related("card__card_model")
        .first()
    )
    model = held.card.card_model if held else Card.objects.first().card_model
    lease_requests.lease_request(
        user=users["alice"], team=membership.team, card_model=model, count=2,
        duration=timedelta(hours=2),
    )  # fmt: skip
    faulty = held.card if held is not None else Card.objects.order_by("pk").first()
    maintenance.card_mark_faulty(user=users["ops"], card=faulty, note="ECC")
    node = Node.objects.order_by("hostname").last()
    maintenance.node_drain(
        user=users["ops"], node=node, drain_at=timezone.now() + timedelta(hours=3)
    )
    usage.usage_close_month()
    statements.statements_issue()


@pytest.fixture(scope="module")
def demo(django_db_setup, django_db_blocker):
    """The demo world, once for the module, inside a transaction rolled back at its end (each
    test's own transaction nests in it): later tests see the database as it was."""
    with django_db_blocker.unblock():
        outer = transaction.atomic()
        outer.__enter__()
        try:
            # Made in the site's language, as the demo is: text a page shows from what was
            # stored (not worded for the reader) is the next test's matter.
            with translation.override(settings.LANGUAGE_CODE):
                call_command("seed_demo")
                _more_to_read()
        except BaseException:
            transaction.set_rollback(True)
            outer.__exit__(None, None, None)
            raise
    yield
    with django_db_blocker.unblock():
        transaction.set_rollback(True)
        outer.__exit__(None, None, None)


@pytest.mark.parametrize("language", ["zh-hans", "en"])
@pytest.mark.parametrize("username", ["alice", "lena", "fin", "ops"])
def test_no_raw_keys_on_any_page_nor_english_on_a_chinese_one(demo, db, username, language):
    """zh-hans: no raw key, no English catalogue phrase; en: no raw key."""
    from django.contrib.auth import get_user_model

    client = Client(HTTP_ACCEPT_LANGUAGE=language)
    client.force_login(get_user_model().objects.get(username=username))
    client.cookies["django_language"] = language
    pages = crawl(client)
    reached = [url for url, text in pages.items() if text]
    assert len(reached) >= 10, reached
    chinese = language == "zh-hans"
    problems = [p for url, text in pages.items() for p in problems_in(url, text, chinese=chinese)]
    # One line per problem (the first page it is on), so the message stays short.
    first: dict[str, str] = {}
    for p in problems:
        first.setdefault(p.split(": ", 1)[1], p)
    assert problems == [], "\n".join(first.values())


def test_text_stored_in_another_language_is_worded_for_the_reader(db):
    """A request made in English, waiting for approval, read on its page in Chinese (people
    of its own: the module's demo world may still be there, with alice and lena)."""
    from datetime import timedelta

    from leasing.lifecycle import requests as lease_requests
    from leasing.teams import services as team_services
    from portal.models import Membership
    from tests.factories import (
        CardModelFactory,
        MembershipFactory,
        TeamFactory,
        UserFactory,
        make_node,
    )

    vision = TeamFactory(slug="text-team", name="Text team")
    alice, lena = UserFactory(username="text-member"), UserFactory(username="text-lead")
    MembershipFactory(user=alice, team=vision, role=Membership.Role.MEMBER)
    MembershipFactory(user=lena, team=vision, role=Membership.Role.LEAD)
    model = CardModelFactory(slug="text-a100", name="Text A100")
    make_node(model, cards=4, hostname="text-01")
    with translation.override("en"):
        team_services.member_limit_set(
            user=lena,
            membership=Membership.objects.get(user=alice, team=vision),
            card_model=None,
            max_concurrent_cards=1,
        )
        lease = lease_requests.lease_request(
            user=alice, team=vision, card_model=model, count=2, duration=timedelta(hours=1)
        )
    assert lease.status == "pending_approval"
    client = Client(HTTP_ACCEPT_LANGUAGE="zh-hans")
    client.force_login(lena)
    client.cookies["django_language"] = "zh-hans"
    pages = crawl(client, f"/leases/{lease.pk}/")
    text = pages[f"/leases/{lease.pk}/"]
    assert problems_in(f"/leases/{lease.pk}/", text) == []


def test_the_check_finds_what_it_looks_for():
    text = "状态 needs_approval · card_replaced · Nothing waits for a decision. · a_b.py"
    found = problems_in("/x/", text)
    assert "/x/: raw key 'needs_approval'" in found and "/x/: raw key 'card_replaced'" in found
    assert "/x/: untranslated 'Nothing waits for a decision'" in found
    assert problems_in("/x/", "Nothing waits for a decision.", chinese=False) == []
    assert problems_in("/x/", "bj-a100-01 · CUDA_VISIBLE_DEVICES=0,1 · 华北数据中心 North DC") == []
