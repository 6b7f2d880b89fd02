"""The webhook "send a test" button is rate-limited per user (CARDPOOL_WEBHOOK_TEST_RATE, 5/h by
default), counted in the shared cache: 30 posts make 5 deliveries, not 30."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError

from leasing.models import Delivery
from leasing.notify import services as notify_services


@pytest.fixture
def robot(alice):
    return notify_services.webhook_create(
        user=alice, name="robot", url="https://hooks.example.org/x", format="generic"
    )


def test_the_default_is_five_an_hour():
    from django.conf import settings

    assert settings.CARDPOOL_WEBHOOK_TEST_RATE == "5/h"


def test_thirty_posts_make_five_deliveries(client, alice, robot):
    client.force_login(alice)
    client.defaults["HTTP_ACCEPT_LANGUAGE"] = "en"
    for _ in range(30):
        assert client.post(f"/notifications/settings/webhooks/{robot.pk}/test/").status_code == 302
    assert Delivery.objects.filter(webhook=robot).count() == 5
    page = client.get("/notifications/settings/").content.decode()
    assert "Too many test messages in a short time" in page


def test_the_limit_is_per_user(alice, lena, robot, vision):
    team_robot = notify_services.webhook_create(
        user=lena, team=vision, name="team", url="https://hooks.example.org/t", format="generic"
    )
    for _ in range(5):
        notify_services.webhook_test(user=alice, webhook=robot)
    with pytest.raises(ValidationError, match="Too many test messages"):
        notify_services.webhook_test(user=alice, webhook=robot)
    assert notify_services.webhook_test(user=lena, webhook=team_robot)


def test_the_limit_follows_the_setting(alice, robot, settings):
    settings.CARDPOOL_WEBHOOK_TEST_RATE = "1/m"
    notify_services.webhook_test(user=alice, webhook=robot)
    with pytest.raises(ValidationError):
        notify_services.webhook_test(user=alice, webhook=robot)
