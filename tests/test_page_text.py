"""A crawl over every page each persona reaches, in Simplified Chinese: no rendered text is a
raw key (a snake_case choice value such as ``needs_approval``) or an English catalogue string
left untranslated.

The world is the demo's (``seed_demo``: the pool, teams, leases and their history, warnings
and notifications), so the pages show what users see. Each persona (alice the member, lena
the lead, fin, ops) starts at the home page and follows every link inside the portal and
every part htmx loads into a page (not the admin, the API, downloads, sign-out or the
language switch), up to ``LIMIT`` pages. The
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
        if attrs.get("hx-get"):  # the parts htmx loads into the page are read too
            self.links.append(attrs["hx-get"])
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
    for key in ("title", *sorted(k for k in layout if AXIS.match(k))):
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


AXIS = re.compile(r"^[xy]axis\d*$")
CJK = re.compile(r"[\u3000-\u303f\u4e00-\u9fff\uff00-\uffef]")
TIME_VALUE = re.compile(r"^\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}")
WORDY_TICKS = re.compile(r"%[bBaA]")


def chart_problems(figure: str, *, chinese: bool) -> list[str]:
    """A chart on a Chinese page: axis titles in Chinese, time ticks in numbers (plotly's
    own would be "Dec 1" or "十二 1, 2026"); on an English page, no Chinese axis title."""
    data = json.loads(unescape(figure))
    layout = data.get("layout", {})
    found = []
    for key in sorted(k for k in layout if AXIS.match(k)):
        title = layout[key].get("title")
        text = title.get("text", "") if isinstance(title, dict) else (title or "")
        if chinese and re.search("[A-Za-z]{3}", text) and not CJK.search(text):
            found.append(f"English axis title {text!r}")
        if not chinese and CJK.search(text):
            found.append(f"Chinese axis title {text!r}")
    for trace in data.get("data", []):
        values = [v for v in trace.get("x") or () if v is not None]
        if values and isinstance(values[0], str) and TIME_VALUE.match(values[0]):
            axis = layout.get("xaxis" + (trace.get("xaxis") or "x")[1:], {})
            ticks = axis.get("tickformat") or ""
            if axis.get("type") not in (None, "-", "date"):
                continue
            if not ticks or WORDY_TICKS.search(ticks):
                found.append(f"time axis without numeric ticks ({ticks!r})")
    return found


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
# On an English page, the Chinese that is data or a proper name: the language switch's own
# name, the demo's bilingual names (regions, department, teams), the chat products' names.
ALLOWED_ZH = re.compile(
    r"简体中文|华北数据中心|北京|上海|深圳边缘|研究院 Research|视觉组 Vision|NLP 组 NLP"
    r"|\((企业微信|钉钉|飞书)\)"
)


def crawl(client: Client, start: str = "/", *, charts: list | None = None) -> dict[str, str]:
    """Each page reached from *start* (GET, HTML, 200) → its visible text. With *charts*, the
    (url, figure) of each chart drawn is added to it."""
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
            if charts is not None:
                charts.append((url, figure))
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
    if not chinese:
        for run in sorted(
            set(re.findall(r"[\u3000-\u303f\u4e00-\u9fff\uff00-\uffef]+", ALLOWED_ZH.sub("", text)))
        ):
            found.append(f"{url}: Chinese on an English page {run!r}")
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
    """zh-hans: no raw key, no English catalogue phrase, charts in Chinese with numeric time
    ticks; en: no raw key, no Chinese outside proper names and data, charts too."""
    from django.contrib.auth import get_user_model

    client = Client(HTTP_ACCEPT_LANGUAGE=language)
    client.force_login(get_user_model().objects.get(username=username))
    client.cookies["django_language"] = language
    drawn: list = []
    pages = crawl(client, charts=drawn)
    reached = [url for url, text in pages.items() if text]
    assert len(reached) >= 10, reached
    assert "/notifications/bell/" in reached, "the parts htmx loads were not read"
    chinese = language == "zh-hans"
    problems = [p for url, text in pages.items() for p in problems_in(url, text, chinese=chinese)]
    problems += [f"{url}: {p}" for url, fig in drawn for p in chart_problems(fig, chinese=chinese)]
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


class _Errors(HTMLParser):
    """The text of a page's error answers: messages, form errors, refusals."""

    def __init__(self):
        super().__init__()
        self.text: list[str] = []
        self._depth = 0

    VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source"}

    def handle_starttag(self, tag, attrs):
        if tag in self.VOID:  # no end tag follows: it neither opens nor closes anything
            return
        classes = set((dict(attrs).get("class") or "").split())
        if self._depth or classes & {"message", "errorlist", "error", "preview__verdict"}:
            self._depth += 1

    def handle_endtag(self, tag):
        if self._depth:
            self._depth -= 1

    def handle_data(self, data):
        if self._depth:
            self.text.append(data)


ENGLISH_SENTENCE = re.compile(r"[A-Za-z][A-Za-z_'’]*(?:[ ,;:()]+[A-Za-z][A-Za-z_'’]*){3,}")


def error_problems(where: str, text: str, *, chinese: bool, keys: bool = True) -> list[str]:
    """An error answer in the page's language: on a Chinese page no English sentence (four
    words or more), on an English page no Chinese (data names aside: card models' names)."""
    from inventory.models import CardModel

    for name in sorted(CardModel.objects.values_list("name", flat=True), key=len, reverse=True):
        text = text.replace(name, "")
    keys = [f"{where}: raw key {key!r}" for key in sorted(set(SNAKE.findall(text)))] if keys else []
    if chinese:
        return keys + [
            f"{where}: English {m!r}" for m in ENGLISH_SENTENCE.findall(ALLOWED.sub("", text))
        ]
    return keys + [f"{where}: Chinese {m!r}" for m in CJK.findall(ALLOWED_ZH.sub("", text))]


def _bad_posts(users: dict) -> list[tuple[str, str, dict]]:
    """(who, where, what) for the forms people post, each with input they must refuse: every
    one of them answers with an error (the test checks it shows one)."""
    from inventory.models import Card
    from leasing.lifecycle import provisioning
    from leasing.models import Alert, Lease
    from portal.models import Membership

    placed = Lease.objects.filter(status__in=("active", "provisioning")).order_by("pk").first()
    assert placed is not None, "the demo has no lease holding cards to post to"
    if placed.status == "provisioning":  # the demo leaves handing over to the worker
        provisioning.provision_step(lease_id=placed.pk)
    active = Lease.objects.select_related("user").get(pk=placed.pk)
    node = Node.objects.order_by("hostname").first()
    alice_in_vision = Membership.objects.get(user=users["alice"], team__slug="vision")
    limit = {"limit-member": alice_in_vision.pk, "limit-max_concurrent_cards": "-4"}
    model = Card.objects.order_by("pk").first().card_model
    asked = {"card_model": model.slug, "team": "vision", "count": "1"}
    posts = [
        ("alice", "/leases/new/", {"card_model": "no-such-model", "count": "x", "duration": "-1"}),
        ("alice", "/leases/preview/", {**asked, "duration": "9999", "unit": "days"}),
        ("ops", f"/inventory/nodes/{node.hostname}/drain/", {"drain_at": "not a time"}),
        ("ops", f"/inventory/nodes/{node.hostname}/drain/", {"drain_at": "2001-01-01T10:00"}),
        ("ops", "/teams/vision/quotas/", {"quota-max_concurrent_cards": "-1"}),
        ("lena", "/teams/vision/limits/", limit),
        (
            "lena",
            "/teams/vision/idle/",
            {"idle-idle_threshold_pct": "500", "idle-idle_minutes": "1"},
        ),
        ("lena", "/teams/vision/members/", {"member-username": "nobody-of-that-name"}),
        ("lena", "/teams/vision/invite/", {"username": "", "email": "not-an-address"}),
        ("alice", "/accounts/profile/", {"language": "xx", "timezone": "Mars/Base"}),
        ("alice", "/accounts/profile/tokens/", {"name": "", "expires_in_days": "-1"}),
        ("alice", "/accounts/profile/ssh-keys/", {"public_key": "not a key", "name": "k"}),
        (
            "alice",
            "/notifications/settings/webhooks/",
            {"name": "", "url": "ftp://x", "format": "?"},
        ),
    ]
    alert = Alert.objects.order_by("pk").first()
    if alert is not None:
        posts.append(("ops", f"/alerts/{alert.pk}/silence/", {"minutes": "-7"}))
    assert active.status == "active", active.status
    holder = active.user.username
    posts += [
        (holder, f"/leases/{active.pk}/extend/", {"minutes": "-5"}),
        (holder, f"/leases/{active.pk}/resize/", {"count": "0"}),
        (holder, f"/leases/{active.pk}/cancel/", {}),  # it runs: nothing to cancel
    ]
    return posts


@pytest.mark.parametrize("language", ["zh-hans", "en"])
def test_error_answers_of_form_posts_speak_the_page_language(demo, db, language):
    """Form posts with input the portal refuses, and a bad API request: every reason given
    is in the language of the page (and of the API's Accept-Language)."""
    from django.contrib.auth import get_user_model

    users = {u.username: u for u in get_user_model().objects.all()}
    chinese = language == "zh-hans"
    problems = []
    for who, url, data in _bad_posts(users):
        client = Client(HTTP_ACCEPT_LANGUAGE=language)
        client.force_login(users[who])
        client.cookies["django_language"] = language
        with transaction.atomic():
            response = client.post(url, data, follow=True)
            transaction.set_rollback(True)
        assert response.status_code < 500, (url, response.status_code)
        parser = _Errors()
        parser.feed(response.content.decode())
        said = " ".join(" ".join(parser.text).split())
        if not said:  # a post the check cannot read proves nothing
            problems.append(f"{who} {url} {data}: no error shown ({response.status_code})")
        problems += error_problems(url, said, chinese=chinese)
    client = Client(HTTP_ACCEPT_LANGUAGE=language)
    client.force_login(users["alice"])
    for body in (
        {"card_model": "no-such-model", "count": 0, "duration_hours": -1},
        {"count": 1, "duration_hours": 1},  # no team named, alice in one: no model either
        {"card_model": "x", "count": 1, "duration_hours": 1, "surprise": 1},
        {"count": 1, "duration_minutes": 60},  # neither a model nor requirements
        {"card_model": "no-such-model", "count": 1, "duration_minutes": 60},
    ):
        with transaction.atomic():
            answer = client.post("/api/v1/leases/", body, content_type="application/json")
            transaction.set_rollback(True)
        assert 400 <= answer.status_code < 500, answer.content
        # The API names its fields by their keys (the contract); the reasons are worded.
        body = answer.content.decode()
        problems += error_problems("/api/v1/leases/", body, chinese=chinese, keys=False)
    assert problems == [], "\n".join(problems)


def test_every_reason_raised_is_worded_through_the_catalogue():
    """A reason a person reads (a ValidationError, PermissionDenied, NotFound …) is a
    catalogue string, never a literal sentence: a literal is English on a Chinese page."""
    import ast
    from pathlib import Path

    raised = {"ValidationError", "PermissionDenied", "NotFound", "ParseError", "Http404"}
    wrappers = {"_", "gettext", "gettext_lazy", "ngettext", "pgettext", "pgettext_lazy"}

    def literals(node, wrapped=False):
        if isinstance(node, ast.Call):
            name = getattr(node.func, "id", getattr(node.func, "attr", ""))
            for arg in [*node.args, *(k.value for k in node.keywords)]:
                yield from literals(arg, wrapped or name in wrappers)
            return
        if isinstance(node, ast.JoinedStr) and not wrapped:
            yield ast.unparse(node)
            return
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and not wrapped:
            if " " in node.value and not node.value.startswith("%"):
                yield node.value
            return
        for child in ast.iter_child_nodes(node):
            yield from literals(child, wrapped)

    found = []
    root = Path(settings.BASE_DIR)
    for app in ("leasing", "portal", "inventory"):
        for path in (root / app).rglob("*.py"):
            if "migrations" in path.parts or path.name in ("agent.py", "agent_sessions.py"):
                continue  # the node agent runs on the nodes, in the operator's shell
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call):
                    name = getattr(node.exc.func, "id", getattr(node.exc.func, "attr", ""))
                    if name in raised:
                        found += [
                            f"{path.relative_to(root)}:{node.lineno}: {text!r}"
                            for text in literals(node.exc)
                        ]
    assert found == [], "\n".join(found)
