"""Notices and reasons are kept as a message and its parameters and worded for whoever reads
them: a lead reading in English sees a Chinese member's request in English; the timeline's
reasons, the lease events, idle and budget notices too; a 10-minute warning says 10 minutes."""

from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import translation

from leasing.lifecycle import endings, provisioning
from leasing.lifecycle import tasks as lease_tasks
from leasing.models import Notification
from leasing.notify.messages import notice_text
from leasing.teams import quotas
from leasing.teams import services as team_services
from portal.models import Membership
from tests.leasing.conftest import T0, ask, hours


def _speaks(user, language):
    user.profile.language = language
    user.profile.save(update_fields=["language"])


@pytest.fixture
def waits_for_lena(frozen, alice, lena, vision, a100, small_pool):
    _speaks(alice, "zh-hans")
    _speaks(lena, "en")
    team_services.member_limit_set(
        user=lena,
        membership=Membership.objects.get(user=alice, team=vision),
        card_model=None,
        max_concurrent_cards=1,
    )
    lease = ask(alice, vision, a100, count=2)
    lease_tasks.notify_lease(lease.pk, "approval_requested")
    return lease


def test_the_lead_reads_the_request_in_her_language(waits_for_lena, lena):
    (note,) = Notification.objects.filter(user=lena)
    assert note.title == f"alice asks for approval: lease {waits_for_lena.pk}"  # her email
    assert "may hold at most 1 cards" in note.body
    with translation.override("zh-hans"):  # the same notice read on a Chinese page
        title, body = notice_text(note)
    assert "申请审批" in title and "alice" in title and "may hold" not in body


def test_the_timeline_words_the_reason_for_each_reader(waits_for_lena, client, lena):
    client.force_login(lena)
    url = f"/leases/{waits_for_lena.pk}/"
    en = client.get(url, HTTP_ACCEPT_LANGUAGE="en").content.decode()
    assert "Waiting for the lead" in en and "may hold at most 1 cards" in en
    client.cookies["django_language"] = "zh-hans"
    zh = client.get(url).content.decode()
    assert "may hold at most 1 cards" not in zh and ">needs_approval<" not in zh
    assert "等待组长审批" in zh and "同时最多持有 1 张卡" in zh
    note = zh[zh.index('data-kind="needs_approval"') :]
    assert '<p class="timeline__note">' in note[: note.index("</li>")]


def test_lease_events_are_kept_as_parameters(frozen, alice, vision, a100, small_pool):
    _speaks(alice, "zh-hans")
    lease = ask(alice, vision, a100)
    provisioning.provision_step(lease_id=lease.pk)
    lease_tasks.notify_lease(lease.pk, "lease_active")
    note = Notification.objects.get(user=alice, kind="lease_active")
    assert note.data["message"] == "lease" and note.data["params"]["event"] == "lease_active"
    assert "租约" in note.title  # her email, in her language
    with translation.override("en"):
        title, body = notice_text(note)
    assert title == f"Lease {lease.pk} is active" and "2026-12-01 11:00" in body


@pytest.mark.parametrize(
    ("late", "language", "says"), [(5, "en", "10 minutes"), (5, "zh-hans", "10 分钟")]
)
def test_a_ten_minute_warning_says_ten_minutes(
    frozen, alice, vision, a100, small_pool, late, language, says
):
    lease = ask(alice, vision, a100, duration=hours(1))
    provisioning.provision_step(lease_id=lease.pk)
    frozen.move_to(T0 + timedelta(minutes=50, seconds=late))  # the sweep, a few seconds late
    endings.warnings_send_due()
    note = Notification.objects.get(user=alice, kind="lease_expiring")
    assert note.data["params"]["minutes"] == 10
    with translation.override(language):
        assert says in notice_text(note)[0]


def test_idle_and_budget_notices_are_worded_for_the_reader(
    frozen, alice, lena, ops, vision, a100, small_pool
):
    _speaks(lena, "en")
    team_services.quota_set(
        user=ops, team=vision, card_model=a100, card_hours_per_month=Decimal(10)
    )
    ask(alice, vision, a100, count=4, duration=hours(2))  # 8 of 10 card-hours: 80%
    assert quotas.budget_alerts(team=vision, card_model_id=a100.pk, now=T0) == 1
    note = Notification.objects.get(user=lena, kind="budget_80")
    assert "80% of the 2026-12 budget" in note.title and note.data["message"] == "budget"
    with translation.override("zh-hans"):
        assert "80%" in notice_text(note)[0] and "budget" not in notice_text(note)[0]


def test_every_event_kind_written_has_a_label():
    """The timeline never shows a raw event key: every kind the code writes (and the end
    reasons, which lease_end_now writes as kinds) has a label in _event_kind.html."""
    import re
    from pathlib import Path

    from leasing.choices import EndReason
    from leasing.workbench.sessions import FAILURES

    root = Path(__file__).resolve().parents[2]
    written = set()
    for path in (root / "leasing").rglob("*.py"):
        written |= set(re.findall(r'kind="([a-z_]+)"', path.read_text()))
    written -= {"resize", "extend", "approve"}  # admission's Ask.kind, not events
    written -= set(FAILURES)  # a session's failure kind (session_failed), worded by FAILURES
    written |= set(EndReason.values) | {
        f"change_{s}" for s in ("approved", "rejected", "withdrawn", "lapsed")
    }
    template = (root / "templates/leasing/_event_kind.html").read_text()
    labelled = set(re.findall(r'kind == "([a-z_]+)"', template))
    assert written - labelled <= {"expired", "released"}  # those end as "expire" / "release"


def test_timeline_notes_are_worded_from_parameters(db):
    from leasing.models import LeaseEvent
    from leasing.templatetags.leasing_text import event_note

    by_hand = LeaseEvent(kind="ended", data={"by_hand": True}, message="scancel'd")
    resized = LeaseEvent(kind="resized", data={"from": 6, "to": 4, "reason": "preempted"})
    with translation.override("en"):
        assert event_note(by_hand) == "Released by hand by an operator.\nscancel'd"
        assert event_note(resized).startswith("6 → 4 cards · taken back")
    with translation.override("zh-hans"):
        assert "Released" not in event_note(by_hand) and "scancel'd" in event_note(by_hand)
        assert event_note(resized).startswith("6 → 4 张卡")
