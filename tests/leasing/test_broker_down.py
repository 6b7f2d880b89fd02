"""The broker is down: requests are still recorded and answered, pages say work is delayed,
and the sweep hands the recorded work over once the broker is back."""

from datetime import timedelta

import pytest
from celery import Task

from leasing import enqueue
from leasing.choices import LeaseStatus
from leasing.lifecycle import provisioning
from leasing.lifecycle import tasks as lease_tasks
from leasing.models import Lease, Notification
from portal.celery import app
from tests.factories import make_node
from tests.leasing.conftest import ask

CLOSED_PORT = "redis://127.0.0.1:1/0"  # nothing listens there: connection refused at once


def _reset_pools() -> None:
    app._pool = None
    app.amqp._producer_pool = None


@pytest.fixture
def broker_down(monkeypatch):
    """Point the Celery app at a closed port, and forget the last broker check."""
    before = app.conf.broker_url, app.conf.broker_transport
    app.conf.broker_url = CLOSED_PORT
    app.conf.broker_transport = None  # the embedded default names its own (portal/settings.py)
    monkeypatch.setenv("CELERY_BROKER_URL", CLOSED_PORT)  # Celery reads it before the conf
    monkeypatch.setattr(enqueue, "_state", {"checked": 0.0, "up": True})
    _reset_pools()
    yield
    app.conf.broker_url, app.conf.broker_transport = before
    _reset_pools()


@pytest.fixture
def api(api):
    api.credentials(HTTP_ACCEPT_LANGUAGE="en")
    return api


def test_a_request_is_recorded_and_answered_while_the_broker_is_down(
    broker_down,
    api,
    frozen,
    alice,
    vision,
    a100,
    small_pool,
    django_capture_on_commit_callbacks,
    monkeypatch,
):
    api.force_authenticate(alice)
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        response = api.post(
            "/api/v1/leases/",
            {"card_model": a100.slug, "count": 1, "duration_minutes": 60},
            format="json",
        )
    assert response.status_code == 201, response.content
    assert callbacks  # the provisioning (and notice) were due after commit, and failed quietly
    lease = Lease.objects.get(pk=response.json()["id"])
    assert lease.status == LeaseStatus.PROVISIONING

    # Later the beat's sweep re-sends the stuck hand-over (broker back: sending recorded).
    sent: list[tuple] = []
    app.conf.broker_url = "memory://"
    monkeypatch.setenv("CELERY_BROKER_URL", "memory://")
    _reset_pools()
    frozen.shift(timedelta(seconds=61))
    with monkeypatch.context() as patch:
        patch.setattr(
            Task,
            "apply_async",
            lambda task, args, kwargs=None, **o: sent.append((task.name, tuple(args))),
        )
        assert lease_tasks.sweep()["reprovisioned"] == 1
    assert sent == [("leasing.tasks.provision_lease", (lease.pk,))]
    provisioning.provision_step(lease_id=lease.pk)
    lease.refresh_from_db()
    assert lease.status == LeaseStatus.ACTIVE


def test_the_sweep_survives_a_broker_that_is_still_down(broker_down, frozen, alice, vision, a100):
    make_node(a100, cards=2, domains=1, hostname="gpu-sweep")
    first, second = ask(alice, vision, a100), ask(alice, vision, a100)
    frozen.shift(timedelta(seconds=61))
    # Each send fails and is logged; the sweep still visits both and the rest of its steps.
    assert lease_tasks.sweep()["reprovisioned"] == 2
    assert set(Lease.objects.values_list("status", flat=True)) == {LeaseStatus.PROVISIONING}
    assert first.pk != second.pk


def test_pages_say_background_work_is_delayed(broker_down, client, alice):
    client.force_login(alice)
    page = client.get("/", HTTP_ACCEPT_LANGUAGE="en").content.decode()
    assert "Background processing is delayed" in page


def test_no_notice_while_the_broker_answers(client, alice, monkeypatch):
    monkeypatch.setattr(enqueue, "_state", {"checked": 0.0, "up": False})
    client.force_login(alice)
    page = client.get("/", HTTP_ACCEPT_LANGUAGE="en").content.decode()
    assert "Background processing is delayed" not in page  # filesystem broker: always up


def test_the_broker_is_checked_at_most_every_ten_seconds(broker_down, monkeypatch):
    pings = []
    monkeypatch.setattr(enqueue, "_ping", lambda: pings.append(1) or False)
    assert enqueue.broker_up() is False
    assert enqueue.broker_up() is False
    assert len(pings) == 1


def test_a_notice_that_cannot_be_queued_is_written_inline(
    broker_down, frozen, alice, vision, a100, small_pool
):
    lease = ask(alice, vision, a100)
    Notification.objects.all().delete()
    assert (
        enqueue.enqueue("leasing.tasks.notify_lease", lease.pk, "lease_queued", inline_if_down=True)
        is False
    )
    assert enqueue.enqueue("leasing.tasks.expire_lease", lease.pk) is False  # the sweep re-finds it
    assert list(Notification.objects.values_list("lease_id", "kind")) == [
        (lease.pk, "lease_queued")
    ]
    lease.refresh_from_db()
    assert lease.status == LeaseStatus.PROVISIONING  # the expiry was not run inline
    assert enqueue.broker_up() is False  # the failed send counts as a check
