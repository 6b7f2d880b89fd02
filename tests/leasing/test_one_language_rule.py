"""One language rule for whatever is sent to a person (issue #32): their chosen language, else
the language of their last signed-in session, else the site's — never the language of
whoever's request sends it. Held for every notice path (holder, lead, operator, finance) and
for the email and webhook channels, which send the stored wording."""

from __future__ import annotations

import re
from datetime import timedelta
from decimal import Decimal

import pytest
from django.contrib.auth.signals import user_logged_in
from django.core import mail
from django.test import RequestFactory
from django.utils import translation

from leasing.billing import statements
from leasing.choices import Channel, Kind
from leasing.lifecycle import changes, endings, provisioning
from leasing.lifecycle import tasks as lease_tasks
from leasing.models import Delivery, Notification, Webhook
from leasing.notify import sending
from leasing.notify.messages import person_language
from leasing.teams import approvals, quotas
from leasing.teams import services as team_services
from portal.models import Membership, Profile
from tests.leasing.conftest import T0, ask, hours


def _profile(user, *, chosen="", session=""):
    Profile.objects.filter(user=user).update(language=chosen, session_language=session)
    user.profile.refresh_from_db()


@pytest.fixture(autouse=True)
def _site_and_sender_in_chinese(settings):
    """The site speaks Chinese and so does whoever's request sends each notice (the active
    language while the code runs): neither may leak into a notice for an English reader."""
    settings.LANGUAGE_CODE = "zh-hans"
    with translation.override("zh-hans"):
        yield


@pytest.mark.parametrize(
    ("chosen", "session", "expected"),
    [
        ("en", "zh-hans", "en"),  # chosen wins
        ("", "en", "en"),  # else the last session's
        ("", "", "zh-hans"),  # else the site's
        ("", "klingon", "zh-hans"),  # an unknown code is no language
    ],
)
def test_the_rule(alice, chosen, session, expected):
    _profile(alice, chosen=chosen, session=session)
    with translation.override("en" if expected == "zh-hans" else "zh-hans"):  # never the active
        assert person_language(alice) == expected


def test_a_sign_in_keeps_the_language_read_then(alice):
    request = RequestFactory().get("/")
    request.LANGUAGE_CODE = "en"
    user_logged_in.send(sender=type(alice), request=request, user=alice)
    alice.profile.refresh_from_db()
    assert alice.profile.session_language == "en"
    assert person_language(alice) == "en"


def test_a_real_sign_in_records_the_page_language(client, alice):
    alice.set_password("a-long-test-password-1")
    alice.save()
    client.post(
        "/accounts/login/",
        {"login": alice.username, "password": "a-long-test-password-1"},
        HTTP_ACCEPT_LANGUAGE="en",
    )
    alice.profile.refresh_from_db()
    assert alice.profile.session_language == "en"


CHINESE = re.compile("[\u3000-\u303f\u4e00-\u9fff\uff00-\uffef]")


def _english(note: Notification) -> None:
    assert not CHINESE.search(note.title + note.body), (note.kind, note.title, note.body)


def test_the_holders_lease_events_and_warnings(frozen, alice, vision, a100, small_pool):
    _profile(alice, session="en")  # never chose: read the portal in English last time
    lease = ask(alice, vision, a100, duration=hours(1))
    provisioning.provision_step(lease_id=lease.pk)
    lease_tasks.notify_lease(lease.pk, Kind.LEASE_ACTIVE)
    frozen.move_to(T0 + timedelta(minutes=50))
    endings.warnings_send_due()
    frozen.move_to(T0 + hours(1) + timedelta(seconds=1))
    lease_tasks.tick()
    lease_tasks.notify_lease(lease.pk, Kind.LEASE_ENDED)
    notes = list(Notification.objects.filter(user=alice))
    assert {n.kind for n in notes} >= {Kind.LEASE_ACTIVE, Kind.LEASE_EXPIRING}
    for note in notes:
        _english(note)


def test_the_lead_reads_requests_and_changes_in_her_language(
    frozen, alice, lena, vision, a100, small_pool, django_capture_on_commit_callbacks
):
    _profile(alice, chosen="zh-hans")
    _profile(lena, session="en")
    team_services.member_limit_set(
        user=lena,
        membership=Membership.objects.get(user=alice, team=vision),
        card_model=None,
        max_concurrent_cards=1,
    )
    waiting = ask(alice, vision, a100, count=2)
    lease_tasks.notify_lease(waiting.pk, Kind.APPROVAL_REQUESTED)
    held = ask(alice, vision, a100, count=1, duration=hours(2))
    provisioning.provision_step(lease_id=held.pk)
    team_services.member_limit_set(
        user=lena,
        membership=Membership.objects.get(user=alice, team=vision),
        card_model=None,
        max_concurrent_cards=1,
        max_lease_hours=3,
    )
    with django_capture_on_commit_callbacks(execute=True):
        changes.lease_extend(lease=held, user=alice, minutes=180)
    notes = list(Notification.objects.filter(user=lena, kind=Kind.APPROVAL_REQUESTED))
    assert len(notes) == 2
    for note in notes:
        _english(note)
    # The holder hears the decision in hers (Chinese, chosen), whatever lena reads.
    with translation.override("en"):
        approvals.lease_reject(lease=waiting, user=lena, reason="no")
        lease_tasks.notify_lease(waiting.pk, "rejected")
    decided = Notification.objects.get(user=alice, kind=Kind.APPROVAL_DECIDED)
    assert CHINESE.search(decided.title)


def test_budget_alerts_and_statements(frozen, alice, lena, fin, ops, vision, a100, small_pool):
    _profile(lena, session="en")
    _profile(fin, session="en")
    team_services.quota_set(
        user=ops, team=vision, card_model=a100, card_hours_per_month=Decimal(10)
    )
    ask(alice, vision, a100, count=4, duration=hours(2))
    assert quotas.budget_alerts(team=vision, card_model_id=a100.pk, now=T0) == 1
    _english(Notification.objects.get(user=lena, kind="budget_80"))
    frozen.move_to(T0 + timedelta(days=40))
    lease_tasks.tick()
    from leasing.billing import usage

    usage.usage_close_month()
    statements.statements_issue()
    for note in Notification.objects.filter(user__in=[fin, lena], data__message="statement"):
        _english(note)


def test_email_and_webhook_carry_the_readers_wording(
    frozen, alice, vision, a100, small_pool, settings
):
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    _profile(alice, session="en")
    alice.email = "alice@example.org"
    alice.save()
    Webhook.objects.create(
        user=alice, name="mine", url="https://hooks.example/in", format="generic", kinds=[]
    )
    lease = ask(alice, vision, a100, duration=hours(1))
    provisioning.provision_step(lease_id=lease.pk)
    frozen.move_to(T0 + timedelta(minutes=50))
    endings.warnings_send_due()
    note = Notification.objects.get(user=alice, kind=Kind.LEASE_EXPIRING)
    _english(note)
    email = Delivery.objects.get(notification=note, channel=Channel.EMAIL)
    sending.delivery_attempt(delivery_id=email.pk)
    assert mail.outbox and not CHINESE.search(mail.outbox[-1].subject + mail.outbox[-1].body)
    hook = Delivery.objects.get(notification=note, channel=Channel.WEBHOOK)
    message = sending.message_for(hook.notification)
    assert not CHINESE.search(message.title + message.body)
