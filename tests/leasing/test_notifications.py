"""Who is told what, on which channel; deliveries sent once, retried with backoff, recorded.

No network: ``leasing.webhooks.OPENER`` is replaced by a fake that answers as told.
"""

from __future__ import annotations

import email.message
import io
import json
import urllib.error
from datetime import timedelta

import pytest
from celery.exceptions import Retry
from django.core import mail
from django.core.exceptions import PermissionDenied, ValidationError

from leasing.choices import Channel, Kind
from leasing.enqueue import task_named
from leasing.lifecycle import tasks as lease_tasks
from leasing.models import Delivery, Notification, Webhook
from leasing.notify import selectors as notify_selectors
from leasing.notify import sending, webhooks, wording
from leasing.notify import services as notify_services
from leasing.notify import tasks as notify_tasks
from leasing.teams import approvals
from leasing.teams import services as team_services
from portal.models import Membership
from tests.factories import MembershipFactory, UserFactory
from tests.leasing.conftest import T0, ask


@pytest.fixture(autouse=True)
def _site_in_english(settings):
    """Nobody here chose a language: notices are worded in the site's (one rule,
    ``notify.messages.person_language``), English for these assertions."""
    settings.LANGUAGE_CODE = "en"


SENT, FAILED, PENDING = Delivery.Status.SENT, Delivery.Status.FAILED, Delivery.Status.PENDING


class FakeResponse:
    def __init__(self, status: int, body: str):
        self.status, self._body = status, body.encode()

    def read(self, limit=-1):
        return self._body

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


class FakeOpener:
    """Answers each request with the next reply; the last one repeats."""

    def __init__(self, *replies):
        self.replies = list(replies)
        self.requests: list = []
        self.during_send = None

    def open(self, req, timeout=None):
        self.requests.append(req)
        assert timeout == webhooks.TIMEOUT_SECONDS
        if self.during_send:
            self.during_send()
        reply = self.replies.pop(0) if len(self.replies) > 1 else self.replies[0]
        if isinstance(reply, BaseException):
            raise reply
        status, body, *headers = reply
        if status >= 300:
            hdrs = email.message.Message()
            for name, value in headers[0].items() if headers else ():
                hdrs[name] = value
            raise urllib.error.HTTPError(
                req.full_url, status, "error", hdrs, io.BytesIO(body.encode())
            )
        return FakeResponse(status, body)


@pytest.fixture
def opener(monkeypatch):
    def install(*replies):
        fake = FakeOpener(*replies)
        monkeypatch.setattr(webhooks, "OPENER", fake)
        return fake

    return install


class Queued:
    """The delivery ids handed to the broker so far (the tests run tasks by calling them)."""

    def __init__(self, sent_tasks):
        self.sent = sent_tasks

    def _ids(self) -> list[int]:
        return [task.args[0] for task in self.sent if task.name == "leasing.tasks_notify.deliver"]

    def __iter__(self):
        return iter(self._ids())

    def __contains__(self, delivery_id) -> bool:
        return delivery_id in self._ids()

    def __eq__(self, other) -> bool:
        return self._ids() == list(other)

    def __repr__(self) -> str:
        return repr(self._ids())


@pytest.fixture
def queued(sent_tasks) -> Queued:
    return Queued(sent_tasks)


def hook(owner=None, *, team=None, fmt="generic", kinds=(), url="https://hooks.example/in", **kw):
    return Webhook.objects.create(
        user=owner, team=team, name=f"{fmt} hook", url=url, format=fmt, kinds=list(kinds), **kw
    )


def channels(notification) -> set[tuple[str, int | None]]:
    return set(notification.deliveries.values_list("channel", "webhook_id"))


# --- who gets what -----------------------------------------------------------------------


def test_defaults_inapp_always_email_for_warnings_webhooks_for_all(alice, frozen):
    mine = hook(alice)
    active = notify_services.notify(user=alice, kind=Kind.LEASE_ACTIVE, title="active")
    expiring = notify_services.notify(user=alice, kind=Kind.LEASE_EXPIRING, title="ends soon")
    assert Notification.objects.filter(user=alice).count() == 2  # in the portal, both
    assert channels(active) == {(Channel.WEBHOOK, mine.pk)}
    assert channels(expiring) == {(Channel.EMAIL, None), (Channel.WEBHOOK, mine.pk)}


def test_preferences_choose_the_channels_per_kind(alice, frozen):
    mine = hook(alice)
    notify_services.preferences_set(
        user=alice,
        choices={Kind.LEASE_ACTIVE: ["email"], Kind.LEASE_EXPIRING: []},
    )
    active = notify_services.notify(user=alice, kind=Kind.LEASE_ACTIVE, title="a")
    expiring = notify_services.notify(user=alice, kind=Kind.LEASE_EXPIRING, title="e")
    failed = notify_services.notify(user=alice, kind=Kind.LEASE_FAILED, title="f")  # untouched
    assert channels(active) == {(Channel.EMAIL, None)}
    assert channels(expiring) == set()  # in the portal only
    assert channels(failed) == {(Channel.EMAIL, None), (Channel.WEBHOOK, mine.pk)}
    prefs = notify_services.preferences_for(alice)
    assert prefs[Kind.LEASE_EXPIRING] == {"inapp"}
    assert prefs[Kind.LEASE_FAILED] == {"inapp", "email", "webhook"}


def test_preferences_equal_to_the_default_store_no_row(alice):
    notify_services.preferences_set(user=alice, choices={Kind.LEASE_FAILED: ["email", "webhook"]})
    assert not alice.notification_preferences.exists()
    with pytest.raises(ValidationError):
        notify_services.preferences_set(user=alice, choices={"nonsense": []})
    with pytest.raises(ValidationError):
        notify_services.preferences_set(user=alice, choices={Kind.LEASE_FAILED: ["sms"]})


def test_no_email_address_no_email_delivery(alice, frozen):
    alice.email = ""
    alice.save()
    note = notify_services.notify(user=alice, kind=Kind.LEASE_FAILED, title="f")
    assert channels(note) == set()


def test_webhooks_hear_only_their_events_and_only_when_active(alice, bob, frozen):
    only_failures = hook(alice, kinds=[Kind.LEASE_FAILED])
    hook(alice, active=False)
    hook(bob)  # someone else's
    active = notify_services.notify(user=alice, kind=Kind.LEASE_ACTIVE, title="a")
    failed = notify_services.notify(user=alice, kind=Kind.LEASE_FAILED, title="f")
    assert channels(active) == set()
    assert (Channel.WEBHOOK, only_failures.pk) in channels(failed)


def test_team_event_reaches_each_lead_and_the_team_robot_once(alice, lena, vision, frozen):
    second_lead = UserFactory(username="lars")
    MembershipFactory(user=second_lead, team=vision, role=Membership.Role.LEAD)
    robot = hook(team=vision, fmt="wecom")
    notes = notify_services.notify_team_leads(
        team=vision, kind=Kind.BUDGET_80, title="80% of the budget", url="/teams/vision/"
    )
    assert {n.user for n in notes} == {lena, second_lead}
    robot_deliveries = Delivery.objects.filter(webhook=robot)
    assert robot_deliveries.count() == 1
    assert Delivery.objects.filter(notification__in=notes, channel=Channel.EMAIL).count() == 2


def test_member_lease_events_reach_the_team_robot_only_when_it_asks(
    alice, lena, vision, a100, small_pool, frozen
):
    lease = ask(alice, vision, a100)
    quiet = hook(team=vision, fmt="feishu")
    listening = hook(team=vision, fmt="dingtalk", kinds=[Kind.PREEMPTION_WARNING])
    note = notify_services.notify(
        user=alice, kind=Kind.PREEMPTION_WARNING, title="preempted soon", lease=lease
    )
    other = notify_services.notify(user=alice, kind=Kind.LEASE_ACTIVE, title="active", lease=lease)
    assert (Channel.WEBHOOK, listening.pk) in channels(note)
    assert (Channel.WEBHOOK, quiet.pk) not in channels(note)
    assert not any(h in (quiet.pk, listening.pk) for _, h in channels(other))


def test_deliveries_are_queued_only_after_commit(
    alice, frozen, queued, django_capture_on_commit_callbacks
):
    hook(alice)
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        note = notify_services.notify(user=alice, kind=Kind.LEASE_FAILED, title="f")
        assert queued == []
    assert len(callbacks) == 1
    callbacks[0]()
    assert sorted(queued) == sorted(note.deliveries.values_list("pk", flat=True))


def test_a_key_makes_notify_idempotent(alice, frozen):
    first = notify_services.notify(user=alice, kind=Kind.LEASE_ENDED, title="ended", key="k1")
    again = notify_services.notify(user=alice, kind=Kind.LEASE_ENDED, title="ended", key="k1")
    assert first.pk == again.pk
    assert Notification.objects.filter(user=alice).count() == 1


def test_data_may_hold_datetimes(alice, frozen):
    from django.utils import timezone

    note = notify_services.notify(
        user=alice, kind=Kind.LEASE_QUEUED, title="q", data={"estimated_start": timezone.now()}
    )
    note.refresh_from_db()
    assert note.data["estimated_start"].startswith("2026-12-01T")


# --- sending: once, with backoff, recorded -----------------------------------------------


def make_delivery(user, webhook=None, kind=Kind.LEASE_FAILED):
    note = notify_services.notify(user=user, kind=kind, title="Lease 1 failed", body="why")
    channel = Channel.WEBHOOK if webhook else Channel.EMAIL
    return note.deliveries.get(channel=channel, webhook=webhook)


def test_deliver_twice_sends_once(alice, frozen, opener):
    fake = opener((200, "ok"))
    delivery = make_delivery(alice, hook(alice))
    notify_tasks.deliver(delivery.pk)
    notify_tasks.deliver(delivery.pk)
    delivery.refresh_from_db()
    assert len(fake.requests) == 1
    assert (delivery.status, delivery.attempts, delivery.response_code) == (SENT, 1, 200)
    assert Delivery.objects.filter(notification=delivery.notification).count() == 2  # + email


def test_a_second_worker_does_not_send_while_an_attempt_is_in_flight(alice, frozen, opener):
    fake = opener((200, "ok"))
    delivery = make_delivery(alice, hook(alice))
    inner: list = []
    fake.during_send = lambda: inner.append(sending.delivery_attempt(delivery_id=delivery.pk))
    sending.delivery_attempt(delivery_id=delivery.pk)
    assert inner == [None] and len(fake.requests) == 1


def test_retries_with_exponential_backoff_then_gives_up(alice, frozen, opener):
    fake = opener((503, "busy"))
    delivery = make_delivery(alice, hook(alice))
    waits = []
    for _ in range(notify_services.MAX_ATTEMPTS):
        waits.append(sending.delivery_attempt(delivery_id=delivery.pk))
        frozen.shift(timedelta(seconds=waits[-1] or 0))
    delivery.refresh_from_db()
    assert waits == [30, 60, 120, 240, 480, None]
    assert delivery.status == FAILED and delivery.attempts == notify_services.MAX_ATTEMPTS
    assert delivery.response_code == 503 and delivery.response_body == "busy"
    assert "503" in delivery.error
    assert delivery.last_attempt_at is not None
    assert len(fake.requests) == notify_services.MAX_ATTEMPTS
    assert sending.delivery_attempt(delivery_id=delivery.pk) is None  # failed stays failed
    assert len(fake.requests) == notify_services.MAX_ATTEMPTS


def test_network_error_is_retried_and_recorded(alice, frozen, opener):
    opener(urllib.error.URLError("connection refused"), (200, "ok"))
    delivery = make_delivery(alice, hook(alice))
    assert sending.delivery_attempt(delivery_id=delivery.pk) == 30
    delivery.refresh_from_db()
    assert delivery.status == PENDING and delivery.response_code is None
    assert "connection refused" in delivery.error
    frozen.shift(timedelta(seconds=30))
    assert sending.delivery_attempt(delivery_id=delivery.pk) is None
    delivery.refresh_from_db()
    assert (delivery.status, delivery.attempts, delivery.error) == (SENT, 2, "")


def test_timeout_is_retried(alice, frozen, opener):
    opener(TimeoutError("timed out"))
    delivery = make_delivery(alice, hook(alice))
    assert sending.delivery_attempt(delivery_id=delivery.pk) == 30
    delivery.refresh_from_db()
    assert "5 s" in delivery.error


def test_429_honours_retry_after(alice, frozen, opener):
    opener((429, "slow down", {"Retry-After": "120"}))
    delivery = make_delivery(alice, hook(alice))
    assert sending.delivery_attempt(delivery_id=delivery.pk) == 120


def test_client_error_fails_at_once(alice, frozen, opener):
    opener((404, "no such hook"))
    delivery = make_delivery(alice, hook(alice))
    assert sending.delivery_attempt(delivery_id=delivery.pk) is None
    delivery.refresh_from_db()
    assert (delivery.status, delivery.attempts, delivery.response_code) == (FAILED, 1, 404)


@pytest.mark.parametrize(
    ("fmt", "reply", "code"),
    [
        ("wecom", {"errcode": 93000, "errmsg": "invalid webhook url"}, "93000"),
        ("dingtalk", {"errcode": 310000, "errmsg": "keywords not in content"}, "310000"),
        ("feishu", {"code": 19021, "msg": "sign match fail"}, "19021"),
    ],
)
def test_robot_error_code_in_a_200_is_a_failure(alice, frozen, opener, fmt, reply, code):
    fake = opener((200, json.dumps(reply)))
    delivery = make_delivery(alice, hook(alice, fmt=fmt))
    assert sending.delivery_attempt(delivery_id=delivery.pk) is None
    delivery.refresh_from_db()
    assert delivery.status == FAILED and delivery.response_code == 200
    assert code in delivery.error and code in delivery.response_body
    assert len(fake.requests) == 1


def test_robot_rate_limit_is_retried(alice, frozen, opener):
    opener((200, '{"errcode":45009,"errmsg":"api freq out of limit"}'))
    delivery = make_delivery(alice, hook(alice, fmt="wecom"))
    assert sending.delivery_attempt(delivery_id=delivery.pk) == 30


def test_the_request_that_goes_out(alice, frozen, opener, settings):
    settings.SITE_URL = "https://cardpool.example"
    fake = opener((200, '{"errcode":0,"errmsg":"ok"}'))
    robot = hook(
        alice,
        fmt="dingtalk",
        url="https://oapi.dingtalk.com/robot/send?access_token=t",
        secret="SECx",
    )
    note = notify_services.notify(
        user=alice, kind=Kind.LEASE_FAILED, title="Lease 9 failed", url="/leases/9/"
    )
    delivery = note.deliveries.get(webhook=robot)
    sending.delivery_attempt(delivery_id=delivery.pk)
    (req,) = fake.requests
    assert req.get_method() == "POST"
    assert req.full_url.startswith("https://oapi.dingtalk.com/robot/send?access_token=t&timestamp=")
    assert "&sign=" in req.full_url
    assert req.get_header("X-cardpool-delivery") == str(delivery.pk)
    body = json.loads(req.data)
    assert body["msgtype"] == "markdown"
    assert "https://cardpool.example/leases/9/" in body["markdown"]["text"]


def test_generic_hook_gets_the_data_without_our_key(alice, frozen, opener):
    fake = opener((204, ""))
    robot = hook(alice, secret="s")
    note = notify_services.notify(
        user=alice,
        kind=Kind.LEASE_EXPIRING,
        title="ends in 10 min",
        data={"offset_minutes": 10},
        key="lease:1:expiring:10",
    )
    sending.delivery_attempt(delivery_id=note.deliveries.get(webhook=robot).pk)
    (req,) = fake.requests
    body = json.loads(req.data)
    assert body["data"] == {"offset_minutes": 10} and body["id"] == note.pk
    assert req.get_header("X-cardpool-signature") == webhooks.generic_signature("s", req.data)


def test_switched_off_webhook_fails_its_pending_delivery(alice, frozen, opener):
    fake = opener((200, "ok"))
    robot = hook(alice)
    delivery = make_delivery(alice, robot)
    Webhook.objects.filter(pk=robot.pk).update(active=False)
    assert sending.delivery_attempt(delivery_id=delivery.pk) is None
    delivery.refresh_from_db()
    assert delivery.status == FAILED and "switched off" in delivery.error
    assert fake.requests == []


def test_email_delivery(alice, frozen, settings):
    settings.SITE_URL = "https://cardpool.example"
    note = notify_services.notify(
        user=alice, kind=Kind.LEASE_FAILED, title="Lease 3 failed", body="disk", url="/leases/3/"
    )
    delivery = note.deliveries.get(channel=Channel.EMAIL)
    notify_tasks.deliver(delivery.pk)
    notify_tasks.deliver(delivery.pk)
    assert len(mail.outbox) == 1
    sent = mail.outbox[0]
    assert sent.to == [alice.email] and sent.subject == "[Cardpool] Lease 3 failed"
    assert "disk" in sent.body and "https://cardpool.example/leases/3/" in sent.body
    delivery.refresh_from_db()
    assert delivery.status == SENT and delivery.attempts == 1


def test_smtp_trouble_is_retried(alice, frozen, monkeypatch):
    import smtplib

    def refuse(self, *a, **kw):
        raise smtplib.SMTPServerDisconnected("gone")

    monkeypatch.setattr("django.core.mail.message.EmailMessage.send", refuse)
    delivery = make_delivery(alice)
    assert sending.delivery_attempt(delivery_id=delivery.pk) == 30
    delivery.refresh_from_db()
    assert delivery.status == PENDING and "gone" in delivery.error


def test_the_task_asks_celery_to_retry_after_the_backoff(alice, frozen, opener, monkeypatch):
    opener((502, "bad gateway"))
    delivery = make_delivery(alice, hook(alice))
    countdowns = []

    def retry(**kw):
        countdowns.append(kw["countdown"])
        return Retry()

    # On the task's class: an instance attribute would outlive the test.
    deliver_class = type(task_named("leasing.tasks_notify.deliver"))
    monkeypatch.setattr(deliver_class, "retry", lambda task, **kw: retry(**kw))
    with pytest.raises(Retry):
        notify_tasks.deliver(delivery.pk)
    assert countdowns == [30]


def test_sweep_requeues_only_stalled_deliveries(alice, frozen, queued):
    from django.utils import timezone

    note = Notification.objects.create(user=alice, kind="lease_failed", title="t", created_at=T0)

    def row(channel=Channel.EMAIL, webhook=None, **fields):
        return Delivery.objects.create(
            notification=note, channel=channel, webhook=webhook, created_at=timezone.now(), **fields
        )

    hooks = [hook(alice, url=f"https://h{i}.example/") for i in range(3)]
    sent = row(webhook=None, status=SENT)  # skipped, and first
    lost = row(channel=Channel.WEBHOOK, webhook=hooks[0])  # never tried
    lost_retry = row(
        channel=Channel.WEBHOOK, webhook=hooks[1], attempts=1, last_attempt_at=timezone.now()
    )
    frozen.shift(timedelta(minutes=16))
    waiting = row(
        channel=Channel.WEBHOOK, webhook=hooks[2], attempts=2, last_attempt_at=timezone.now()
    )
    assert notify_tasks.deliveries_sweep() == 2
    assert sorted(queued) == [lost.pk, lost_retry.pk]
    assert sent.pk not in queued and waiting.pk not in queued


# --- lease events through the existing task ----------------------------------------------


def test_lead_is_told_about_a_request_waiting_for_approval(
    alice, lena, vision, a100, small_pool, frozen, opener
):
    fake = opener((200, '{"errcode":0,"errmsg":"ok"}'))
    robot = hook(team=vision, fmt="wecom")
    membership = Membership.objects.get(user=alice, team=vision)
    team_services.member_limit_set(
        user=lena, membership=membership, card_model=None, max_concurrent_cards=0
    )
    lease = ask(alice, vision, a100)
    lease_tasks.notify_lease(lease.pk, "approval_requested")
    lease_tasks.notify_lease(lease.pk, "approval_requested")  # a redelivered task tells once
    (note,) = Notification.objects.filter(user=lena)
    assert note.kind == Kind.APPROVAL_REQUESTED and note.url == "/teams/vision/"
    assert "alice asks for approval" in note.title
    for delivery in note.deliveries.all():
        notify_tasks.deliver(delivery.pk)
    assert mail.outbox[-1].to == [lena.email]
    assert "approval" in mail.outbox[-1].subject
    assert Delivery.objects.get(webhook=robot).status == SENT
    assert "alice asks for approval" in json.loads(fake.requests[0].data)["markdown"]["content"]


def test_old_kinds_map_onto_the_new_ones(alice, lena, vision, a100, small_pool, frozen):
    membership = Membership.objects.get(user=alice, team=vision)
    team_services.member_limit_set(
        user=lena, membership=membership, card_model=None, max_concurrent_cards=0
    )
    lease = ask(alice, vision, a100)
    approvals.lease_reject(lease=lease, user=lena, reason="not this month")
    lease_tasks.notify_lease(lease.pk, "rejected")
    note = Notification.objects.get(user=alice)
    assert note.kind == Kind.APPROVAL_DECIDED and note.data["decision"] == "rejected"
    assert note.title == f"Lease {lease.pk} rejected" and note.body == "not this month"
    lease_tasks.notify_lease(lease.pk, "failed")
    assert Notification.objects.filter(user=alice, kind=Kind.LEASE_FAILED).count() == 1


def test_lease_event_wording(alice, vision, a100, small_pool, frozen):
    lease = ask(alice, vision, a100)
    (note,) = wording.notify_lease_event(lease_id=lease.pk, kind=Kind.LEASE_ACTIVE)
    assert note.title == f"Lease {lease.pk} is active"
    assert "1 × A100 test are yours until 2026-12-01 11:00 (Asia/Shanghai)" in note.body
    assert note.url == f"/leases/{lease.pk}/"
    assert wording.notify_lease_event(lease_id=999999, kind=Kind.LEASE_ACTIVE) == []


# --- managing webhooks -------------------------------------------------------------------


def test_only_a_lead_manages_team_webhooks(alice, lena, bob, vision):
    with pytest.raises(PermissionDenied):
        notify_services.webhook_create(
            user=alice, team=vision, name="group", url="https://x.example/", format="wecom"
        )
    robot = notify_services.webhook_create(
        user=lena, team=vision, name="group", url="https://x.example/", format="wecom"
    )
    assert robot.team == vision and robot.user is None
    assert robot in notify_selectors.webhooks_managed_by(lena)
    assert robot not in notify_selectors.webhooks_managed_by(alice)
    for outsider in (alice, bob):
        with pytest.raises(PermissionDenied):
            notify_services.webhook_delete(user=outsider, webhook=robot)
        with pytest.raises(PermissionDenied):
            notify_services.webhook_test(user=outsider, webhook=robot)
    notify_services.webhook_delete(user=lena, webhook=robot)
    assert not Webhook.objects.exists()


def test_webhook_input_is_checked(alice):
    with pytest.raises(ValidationError) as bad_url:
        notify_services.webhook_create(user=alice, name="x", url="ftp://x.example/")
    assert "url" in bad_url.value.message_dict
    with pytest.raises(ValidationError) as wecom_secret:
        notify_services.webhook_create(
            user=alice, name="x", url="https://x.example/", format="wecom", secret="s"
        )
    assert "secret" in wecom_secret.value.message_dict
    with pytest.raises(ValidationError):
        notify_services.webhook_create(
            user=alice, name="x", url="https://x.example/", kinds=["nonsense"]
        )


def test_webhook_test_sends_to_that_hook_only(alice, frozen, queued):
    robot = notify_services.webhook_create(user=alice, name="mine", url="https://x.example/")
    hook(alice, url="https://another.example/")
    delivery = notify_services.webhook_test(user=alice, webhook=robot)
    assert delivery.webhook == robot
    assert delivery.notification.deliveries.count() == 1
    assert delivery.notification.read_at is not None  # does not light the bell


def test_an_activation_notice_that_fails_in_the_worker_is_queued_instead(
    frozen,
    alice,
    vision,
    a100,
    small_pool,
    monkeypatch,
    sent_tasks,
    django_capture_on_commit_callbacks,
):
    from leasing.lifecycle import provisioning
    from leasing.notify import wording

    lease = ask(alice, vision, a100)

    def broken(**kwargs):
        raise RuntimeError("template missing")

    monkeypatch.setattr(wording, "notify_lease_event", broken)  # the failure, where it is defined
    with django_capture_on_commit_callbacks(execute=True):
        assert provisioning.provision_step(lease_id=lease.pk)
    assert ("leasing.tasks.notify_lease", (lease.pk, "lease_active")) in [
        (task.name, task.args) for task in sent_tasks
    ]
    assert not Notification.objects.filter(lease=lease, kind="lease_active").exists()


@pytest.mark.parametrize(
    "value", ["²", "1e9", "99999999999999999999", "Wed, 21 Oct 2015 07:28:00 GMT"]
)
def test_a_retry_after_that_is_no_plain_number_is_ignored(alice, frozen, opener, value):
    """The sender never raises: "²" passes str.isdigit() and int() refuses it (issue #15)."""
    opener((503, "busy", {"Retry-After": value}))
    delivery = make_delivery(alice, hook(alice))
    assert sending.delivery_attempt(delivery_id=delivery.pk) == 30
