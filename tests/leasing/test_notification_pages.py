"""The notification centre, its settings page, the header bell and /api/v1/notifications/."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.urls import include, path
from rest_framework.routers import SimpleRouter

import portal.urls
from leasing.choices import Kind
from leasing.models import Delivery, Notification, Webhook
from leasing.notify import api as notify_api
from leasing.notify import selectors as notify_selectors
from leasing.notify import services as notify_services

# Until portal/urls.py, portal/api_urls.py and settings wire the notification pages in,
# these tests wire them themselves (harmless once they are).
_router = SimpleRouter()
notify_api.register(_router)
urlpatterns = [
    path("notifications/", include("leasing.notify.urls")),
    path("api/v1/", include(_router.urls)),
    *portal.urls.urlpatterns,
]
pytestmark = pytest.mark.urls(__name__)
BELL = "leasing.context_processors.notifications_unread"


@pytest.fixture(autouse=True)
def bell(settings):
    engine = settings.TEMPLATES[0]
    processors = engine["OPTIONS"]["context_processors"]
    if BELL not in processors:
        settings.TEMPLATES = [
            {**engine, "OPTIONS": {**engine["OPTIONS"], "context_processors": [*processors, BELL]}}
        ]


@pytest.fixture
def as_alice(client, alice):
    client.force_login(alice)
    client.cookies["django_language"] = "en"
    return client


@pytest.fixture
def api(api):
    api.credentials(HTTP_ACCEPT_LANGUAGE="en")
    return api


def tell(user, title="Lease 1 is active", kind=Kind.LEASE_ACTIVE, **kw):
    return notify_services.notify(user=user, kind=kind, title=title, **kw)


# --- pages -------------------------------------------------------------------------------


def test_centre_lists_only_my_notifications_with_the_unread_count(
    as_alice, alice, bob, frozen, django_assert_max_num_queries
):
    for i in range(3):
        tell(alice, title=f"mine {i}", url="/leases/1/")
    tell(bob, title="bob's secret")
    with django_assert_max_num_queries(8):
        page = as_alice.get("/notifications/").content.decode()
    assert "mine 0" in page and "mine 2" in page
    assert "bob&#x27;s secret" not in page and "bob's secret" not in page
    assert 'data-unread="3"' in page  # the bell in the header
    assert page.count("data-notification=") == 3


def test_bell_shows_nothing_to_visitors_and_no_badge_when_all_read(client, as_alice, alice, frozen):
    assert "notification-bell" not in client.get("/accounts/login/").content.decode()
    page = as_alice.get("/leases/").content.decode()
    assert 'data-unread="0"' in page and "badge badge--queued" not in page


def test_mark_one_read_and_open_it(as_alice, alice, frozen):
    note = tell(alice, url="/leases/1/")
    response = as_alice.post(f"/notifications/{note.pk}/read/", {"open": "1"})
    assert response.status_code == 302 and response["Location"] == "/leases/1/"
    note.refresh_from_db()
    assert note.read_at is not None


def test_open_never_redirects_off_site(as_alice, alice, frozen):
    note = tell(alice, url="https://evil.example/")
    response = as_alice.post(f"/notifications/{note.pk}/read/", {"open": "1"})
    assert response["Location"] == "/notifications/"


def test_mark_all_read_and_unread_filter(as_alice, alice, bob, frozen):
    tell(alice, title="first")
    tell(alice, title="second")
    theirs = tell(bob)
    assert "first" in as_alice.get("/notifications/?unread=1").content.decode()
    as_alice.post("/notifications/read-all/")
    assert notify_selectors.unread_count(alice) == 0
    assert "first" not in as_alice.get("/notifications/?unread=1").content.decode()
    theirs.refresh_from_db()
    assert theirs.read_at is None


def test_someone_elses_notification_is_404(as_alice, bob, frozen):
    theirs = tell(bob)
    assert as_alice.post(f"/notifications/{theirs.pk}/read/").status_code == 404
    theirs.refresh_from_db()
    assert theirs.read_at is None


def test_pages_need_sign_in(client, db):
    response = client.get("/notifications/")
    assert response.status_code == 302 and "/accounts/login/" in response["Location"]


def test_settings_page_saves_channels_per_kind(as_alice, alice):
    page = as_alice.get("/notifications/settings/").content.decode()
    assert 'data-kind="lease_expiring"' in page and 'data-kind="budget_100"' in page
    data = {kind: ["email", "webhook"] for kind in Kind.values}
    data[Kind.LEASE_EXPIRING] = ["webhook"]  # no email for this one
    as_alice.post("/notifications/settings/", data)
    prefs = notify_services.preferences_for(alice)
    assert prefs[Kind.LEASE_EXPIRING] == {"inapp", "webhook"}
    assert prefs[Kind.LEASE_ACTIVE] == {"inapp", "email", "webhook"}


def test_add_test_and_delete_my_webhook(as_alice, alice, frozen):
    response = as_alice.post(
        "/notifications/settings/webhooks/",
        {
            "name": "my robot",
            "url": "https://oapi.dingtalk.com/robot/send?access_token=SECRET-TOKEN",
            "format": "dingtalk",
            "secret": "SECabc",
            "kinds": [Kind.LEASE_EXPIRING, Kind.PREEMPTION_WARNING],
        },
    )
    assert response.status_code == 302
    robot = Webhook.objects.get(user=alice)
    assert robot.kinds == sorted([Kind.LEASE_EXPIRING, Kind.PREEMPTION_WARNING])
    as_alice.post(f"/notifications/settings/webhooks/{robot.pk}/test/")
    assert Delivery.objects.filter(webhook=robot).count() == 1
    page = as_alice.get("/notifications/settings/").content.decode()
    assert "my robot" in page and "SECRET-TOKEN" not in page and "SECabc" not in page
    assert f'data-hook="{robot.pk}"' in page and "Pending" in page
    as_alice.post(f"/notifications/settings/webhooks/{robot.pk}/delete/")
    assert not Webhook.objects.exists()


def test_bad_webhook_is_refused_with_a_message(as_alice, alice):
    response = as_alice.post(
        "/notifications/settings/webhooks/",
        {"name": "x", "url": "https://qyapi.weixin.qq.com/x", "format": "wecom", "secret": "s"},
    )
    assert response.status_code == 400
    assert "not signed" in response.content.decode()
    assert not Webhook.objects.exists()


def test_member_cannot_touch_the_team_webhooks(as_alice, client, alice, lena, vision):
    robot = notify_services.webhook_create(
        user=lena, team=vision, name="team robot", url="https://x.example/", format="feishu"
    )
    page = as_alice.get("/notifications/settings/").content.decode()
    assert "team robot" not in page and 'name="team"' not in page  # no team to pick
    assert as_alice.post(f"/notifications/settings/webhooks/{robot.pk}/delete/").status_code == 404
    assert as_alice.post(f"/notifications/settings/webhooks/{robot.pk}/test/").status_code == 404
    as_alice.post(
        "/notifications/settings/webhooks/",
        {"name": "sneaky", "url": "https://y.example/", "format": "generic", "team": vision.pk},
    )
    assert not Webhook.objects.filter(name="sneaky").exists()
    assert Webhook.objects.filter(pk=robot.pk).exists()


def test_lead_manages_the_team_webhooks_on_the_same_page(client, lena, vision):
    client.force_login(lena)
    client.cookies["django_language"] = "en"
    page = client.get("/notifications/settings/").content.decode()
    assert 'name="team"' in page and "Vision" in page
    client.post(
        "/notifications/settings/webhooks/",
        {"name": "team robot", "url": "https://x.example/", "format": "wecom", "team": vision.pk},
    )
    robot = Webhook.objects.get(team=vision)
    assert "team robot" in client.get("/notifications/settings/").content.decode()
    client.post(f"/notifications/settings/webhooks/{robot.pk}/delete/")
    assert not Webhook.objects.exists()


def test_pages_in_chinese(client, alice, frozen):
    client.force_login(alice)
    tell(alice)
    page = client.get("/notifications/").content.decode()
    assert "通知" in page
    assert "通知设置" in client.get("/notifications/settings/").content.decode()


# --- API ---------------------------------------------------------------------------------


def test_api_lists_only_mine_and_filters_unread(api, alice, bob, frozen):
    read = tell(alice, title="old", url="/leases/1/")
    notify_services.notification_read(user=alice, notification_id=read.pk)
    tell(alice, title="new")
    tell(bob, title="bob's")
    api.force_authenticate(alice)
    body = api.get("/api/v1/notifications/").json()
    assert [n["title"] for n in body["results"]] == ["new", "old"]
    old = body["results"][1]
    assert old["url"] == "http://testserver/leases/1/" and old["unread"] is False
    assert old["kind"] == "lease_active" and old["kind_label"] == "Lease active"
    unread = api.get("/api/v1/notifications/?unread=1").json()
    assert [n["title"] for n in unread["results"]] == ["new"]


def test_api_read_and_read_all(api, alice, bob, frozen):
    first, second = tell(alice), tell(alice)
    theirs = tell(bob)
    api.force_authenticate(alice)
    response = api.post(f"/api/v1/notifications/{first.pk}/read/")
    assert response.status_code == 200 and response.json()["unread"] is False
    assert api.post(f"/api/v1/notifications/{theirs.pk}/read/").status_code == 404
    assert api.get(f"/api/v1/notifications/{theirs.pk}/").status_code == 404
    assert api.post("/api/v1/notifications/read-all/").json() == {"marked": 1}
    second.refresh_from_db()
    theirs.refresh_from_db()
    assert second.read_at is not None and theirs.read_at is None
    assert Notification.objects.filter(user=alice, read_at__isnull=True).count() == 0


def test_api_needs_authentication(api, db):
    assert api.get("/api/v1/notifications/").status_code in (401, 403)


def test_the_bell_is_polled_and_counts_new_notices(client, alice):
    """The header's bell asks for itself again (htmx, every 20 s): a notice that arrives while
    a page is open shows in its count without a reload."""
    from leasing.notify.services import notify

    client.force_login(alice)
    page = client.get("/leases/").content.decode()
    assert 'hx-get="/notifications/bell/"' in page and 'data-unread="0"' in page
    notify(user=alice, kind="lease_active", title="t")
    bell = client.get("/notifications/bell/", HTTP_HX_REQUEST="true").content.decode()
    assert 'data-unread="1"' in bell and "<html" not in bell
    client.logout()  # signed out meanwhile: htmx is told to stop polling, nothing to swap in
    gone = client.get("/notifications/bell/", HTTP_HX_REQUEST="true")
    assert gone.status_code == 286 and gone.content == b""


def test_the_settings_page_lists_every_attempt_of_a_delivery(as_alice, alice, frozen, monkeypatch):
    from leasing.notify import sending, webhooks

    replies = iter([webhooks.HttpResponse(503, "busy"), webhooks.HttpResponse(200, "ok")])
    monkeypatch.setattr(webhooks, "http_post", lambda request: next(replies))
    robot = Webhook.objects.create(user=alice, name="robot", url="https://hooks.example/in")
    as_alice.post(f"/notifications/settings/webhooks/{robot.pk}/test/")
    delivery = Delivery.objects.get(webhook=robot)
    for _ in range(2):
        frozen.shift(timedelta(seconds=sending.delivery_attempt(delivery_id=delivery.pk) or 0))
    page = as_alice.get("/notifications/settings/").content.decode()
    assert 'data-attempt="1"' in page and 'data-attempt="2"' in page
    assert "HTTP 503" in page and "HTTP 200" in page


def test_the_admin_shows_a_delivery_s_attempts(client, alice, frozen, monkeypatch):
    from django.contrib.auth import get_user_model

    from leasing.notify import sending, webhooks

    monkeypatch.setattr(webhooks, "http_post", lambda request: webhooks.HttpResponse(502, "gw"))
    robot = Webhook.objects.create(user=alice, name="robot", url="https://hooks.example/in")
    note = notify_services.notify(user=alice, kind=Kind.LEASE_FAILED, title="t")
    delivery = note.deliveries.get(webhook=robot)
    sending.delivery_attempt(delivery_id=delivery.pk)
    admin = get_user_model().objects.create_superuser("root", "root@example.org", "pw")
    client.force_login(admin)
    page = client.get(f"/admin/leasing/delivery/{delivery.pk}/change/").content.decode()
    assert "502" in page and "gw" in page
