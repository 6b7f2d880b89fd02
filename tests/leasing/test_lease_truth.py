"""What a lease shows is what it has (issue #14): the effective end after a drain or a
preemption, the end of a waiting lease, why a queued lease cannot start — on the page, the
list and the API — and the holder told once, in their language and time zone."""

from datetime import timedelta

import pytest
from django.conf import settings
from django.utils import translation

from inventory.models import Card
from leasing.choices import LeaseStatus, Priority, StallReason, WarningKind
from leasing.lifecycle import maintenance, provisioning
from leasing.lifecycle import tasks as lease_tasks
from leasing.models import LeaseWarning, Notification
from leasing.notify.messages import notice_text
from portal.models import Profile
from tests.factories import make_node
from tests.leasing.conftest import T0, ask, hours
from tests.leasing.passes import queue_advance


def active(lease):
    provisioning.provision_step(lease_id=lease.pk)
    lease.refresh_from_db()
    return lease


def api_lease(api, user, lease) -> dict:
    api.force_authenticate(user)
    response = api.get(f"/api/v1/leases/{lease.pk}/", HTTP_ACCEPT_LANGUAGE="en")
    assert response.status_code == 200
    return response.json()


def api_time(api, value):
    """A time as the API writes it (to compare with a parsed datetime)."""
    from django.utils.dateparse import parse_datetime

    return parse_datetime(value)


# --- a drain changes what the lease shows ------------------------------------------------------


def test_drain_shows_the_effective_end_with_a_banner_on_page_list_and_api(
    frozen, alice, ops, vision, a100, client, api
):
    node = make_node(a100, cards=2, domains=1, hostname="d1")
    lease = active(ask(alice, vision, a100, duration=hours(5)))
    maintenance.node_drain(user=ops, node=node, drain_at=T0 + hours(2))

    data = api_lease(api, alice, lease)
    assert api_time(api, data["effective_end"]) == T0 + hours(2)
    assert data["ends_early"]["why"] == "drain" and data["ends_early"]["node"] == "d1"
    assert api_time(api, data["end_at"]) == T0 + hours(5)  # the booked end is kept

    client.force_login(alice)
    page = client.get(f"/leases/{lease.pk}/", HTTP_ACCEPT_LANGUAGE="en").content.decode()
    assert 'data-banner="drain"' in page
    assert "goes into maintenance at 2026-12-01 11:00" in page  # the site zone: alice has none
    listing = client.get("/leases/").content.decode()
    assert "12-01 11:00" in listing and 'data-cut="drain"' in listing


def test_banner_times_are_in_the_readers_time_zone(frozen, alice, ops, vision, a100, client):
    node = make_node(a100, cards=1, domains=1, hostname="d2")
    lease = active(ask(alice, vision, a100, duration=hours(5)))
    maintenance.node_drain(user=ops, node=node, drain_at=T0 + hours(2))
    Profile.objects.filter(user=alice).update(timezone="Europe/Berlin")
    client.force_login(alice)
    page = client.get(f"/leases/{lease.pk}/").content.decode()
    assert "2026-12-01 04:00" in page  # 11:00 in Shanghai is 04:00 in Berlin


# --- a waiting lease never ends before it starts ----------------------------------------------


def test_a_queued_lease_ends_its_duration_after_its_estimated_start(
    frozen, alice, bob, vision, nlp, a100, client, api
):
    make_node(a100, cards=1, domains=1, hostname="q1")
    active(ask(bob, nlp, a100, duration=hours(8)))
    waiting = ask(alice, vision, a100, duration=hours(2))
    assert waiting.status == LeaseStatus.QUEUED and waiting.estimated_start == T0 + hours(8)

    # Told: the plan's start plus room for smaller work that may pass within its slack
    # (scheduler.eta: 2 x the 30 min of slack 1 card x 2 h gets, all of it still ahead,
    # under the 2 h cap, and 1 % of the 8 h wait: 4.8 min, 4 in whole minutes rounded down).
    data = api_lease(api, alice, waiting)
    assert api_time(api, data["effective_start"]) == T0 + hours(9) + timedelta(minutes=4)
    assert api_time(api, data["effective_end"]) == T0 + hours(11) + timedelta(minutes=4)

    client.force_login(alice)
    listing = client.get("/leases/").content.decode()
    assert "12-01 18:04" in listing and "12-01 20:04" in listing
    assert "12-01 11:00" not in listing  # the wanted window's end, before the start
    page = client.get(f"/leases/{waiting.pk}/").content.decode()
    assert "2026-12-01 20:04" in page

    # Once nobody can pass it any more (its virtual submit time has come), the plan's start.
    frozen.shift(timedelta(minutes=30))
    data = api_lease(api, alice, waiting)
    assert api_time(api, data["effective_start"]) == T0 + hours(8)


# --- a queued lease that can never start says why, once ----------------------------------------


def test_a_faulty_card_that_makes_a_queued_lease_unplaceable_is_explained_and_told_once(
    frozen, alice, bob, ops, vision, nlp, a100, client, api
):
    node = make_node(a100, cards=2, domains=1, hostname="s1")
    holder = active(ask(bob, nlp, a100, duration=hours(1)))
    waiting = ask(alice, vision, a100, count=2, duration=hours(2))
    assert waiting.status == LeaseStatus.QUEUED
    spare = node.cards.exclude(allocations__lease=holder).get()
    maintenance.card_mark_faulty(user=ops, card=spare, note="XID 79")
    for _ in range(3):  # the sweep's passes: one notice, not one per pass
        queue_advance(card_model_ids=[a100.pk])
    waiting.refresh_from_db()
    assert waiting.stall_reason == StallReason.CARDS_OUT_OF_SERVICE
    notes = Notification.objects.filter(user=alice, kind="lease_stalled", lease=waiting)
    assert notes.count() == 1
    # Written for email and webhooks in the holder's language (no choice: the site's, Chinese);
    # read in the portal in the reader's (English here).
    assert "无法按所申请的方式开始" in notes.get().title
    title, body = notice_text(notes.get())
    assert "cannot start" in title and "faulty" in body and "cancel it" in body

    data = api_lease(api, alice, waiting)
    assert data["waiting_reason"]["code"] == "out_of_service"
    assert "spread across nodes" in data["waiting_reason"]["what_you_can_do"]
    assert data["effective_start"] is None and data["effective_end"] is None

    client.force_login(alice)
    page = client.get(f"/leases/{waiting.pk}/", HTTP_ACCEPT_LANGUAGE="en").content.decode()
    assert 'data-banner="stalled"' in page and "cannot start as asked" in page
    assert 'data-stall="out_of_service"' in client.get("/leases/").content.decode()

    # The card is repaired: the reason goes away, and the lease starts when cards free up.
    Card.objects.filter(pk=spare.pk).update(status=Card.Status.OK)
    queue_advance(card_model_ids=[a100.pk])
    waiting.refresh_from_db()
    assert waiting.stall_reason == "" and waiting.estimated_start == T0 + hours(1)


def test_the_reason_names_what_is_missing_and_what_to_do(frozen, alice, bob, vision, nlp, a100):
    big = make_node(a100, cards=4, domains=1, hostname="big")
    make_node(a100, cards=2, domains=1, hostname="small")
    active(ask(bob, nlp, a100, count=1, duration=hours(3)))  # on "small": best fit
    active(ask(bob, nlp, a100, count=1, duration=hours(3)))
    active(ask(bob, nlp, a100, count=1, duration=hours(3)))  # now on "big"
    waiting = ask(alice, vision, a100, count=4, duration=hours(1))
    assert waiting.status == LeaseStatus.QUEUED and waiting.stall_reason == ""

    # A card of the big node is retired: no node has 4 cards any more, the pool has 5.
    spare = big.cards.filter(allocations__isnull=True).order_by("index").first()
    Card.objects.filter(pk=spare.pk).update(status=Card.Status.RETIRED)
    queue_advance(card_model_ids=[a100.pk])
    waiting.refresh_from_db()
    assert waiting.stall_reason == StallReason.NO_NODE_BIG_ENOUGH
    from leasing.lifecycle.selectors import lease_truth

    truth = lease_truth(waiting)
    assert "spread across nodes" in truth.stall_todo and truth.end is None

    # Two more go: fewer cards of the model exist than it asks for.
    Card.objects.filter(node=big, status=Card.Status.OK, allocations__isnull=True).update(
        status=Card.Status.RETIRED
    )
    queue_advance(card_model_ids=[a100.pk])
    waiting.refresh_from_db()
    assert waiting.stall_reason == StallReason.TOO_FEW_CARDS
    kinds = Notification.objects.filter(lease=waiting, kind="lease_stalled")
    assert kinds.count() == 2  # once per reason, not once per pass


# --- warnings: recorded with their notice, once, in the holder's zone ----------------------------


def test_a_drain_warning_whose_notice_fails_is_not_recorded_and_the_sweep_retries(
    frozen, alice, ops, vision, a100, monkeypatch
):
    node = make_node(a100, cards=1, domains=1, hostname="w1")
    lease = active(ask(alice, vision, a100, duration=hours(5)))
    Profile.objects.filter(user=alice).update(timezone="Europe/Berlin")

    def broken(*args, **kwargs):
        raise RuntimeError("mail queue down")

    monkeypatch.setattr(maintenance, "notice_send", broken)
    assert maintenance.node_drain(user=ops, node=node, drain_at=T0 + hours(2)) == 0
    assert not LeaseWarning.objects.filter(lease=lease).exists()
    monkeypatch.undo()

    lease_tasks.sweep()
    lease_tasks.sweep()
    assert LeaseWarning.objects.filter(lease=lease, kind=WarningKind.DRAIN).count() == 1
    notes = Notification.objects.filter(user=alice, kind="drain_warning", lease=lease)
    assert notes.count() == 1
    # Rendered for the holder: 11:00 Shanghai is 04:00 in Berlin.
    assert "04:00 (Europe/Berlin)" in notes.get().title


def test_the_notice_centre_words_a_notice_for_its_reader(frozen, alice, ops, vision, a100, client):
    node = make_node(a100, cards=1, domains=1, hostname="w2")
    active(ask(alice, vision, a100, duration=hours(5)))
    maintenance.node_drain(user=ops, node=node, drain_at=T0 + hours(2))
    client.force_login(alice)
    english = client.get("/notifications/", HTTP_ACCEPT_LANGUAGE="en").content.decode()
    assert "goes into maintenance" in english
    with translation.override("zh-hans"):
        client.cookies["django_language"] = "zh-hans"
        chinese = client.get("/notifications/").content.decode()
    assert "goes into maintenance" not in chinese and "维护" in chinese


def test_a_preemption_warning_is_written_with_its_notice(
    frozen, alice, lena, bob, vision, nlp, a100, monkeypatch
):
    from leasing.scheduler import preemption

    make_node(a100, cards=1, domains=1, hostname="p1")
    cheap = active(ask(bob, nlp, a100, duration=hours(8), priority=Priority.PREEMPTIBLE))
    monkeypatch.setattr(
        preemption, "notice_send", lambda *a, **k: (_ for _ in ()).throw(RuntimeError("down"))
    )
    ask(lena, vision, a100, duration=hours(1), priority=Priority.HIGH)
    cheap.refresh_from_db()
    assert cheap.preempt_at == T0 + timedelta(minutes=settings.CARDPOOL["PREEMPT_GRACE_MINUTES"])
    assert not LeaseWarning.objects.filter(lease=cheap).exists()
    monkeypatch.undo()
    lease_tasks.sweep()
    lease_tasks.sweep()
    assert LeaseWarning.objects.filter(lease=cheap, kind=WarningKind.PREEMPTION).count() == 1
    assert Notification.objects.filter(lease=cheap, kind="preemption_warning").count() == 1


def test_ended_by_a_drain_is_told_once_with_the_reason(frozen, alice, ops, vision, a100):
    node = make_node(a100, cards=1, domains=1, hostname="e1")
    lease = active(ask(alice, vision, a100, duration=hours(5)))
    maintenance.node_drain(user=ops, node=node, drain_at=T0 + hours(2))
    frozen.move_to(T0 + hours(2))
    lease_tasks.sweep()
    lease_tasks.sweep()
    ended = Notification.objects.filter(lease=lease, kind="lease_ended")
    assert ended.count() == 1 and ended.get().data["params"]["why"] == "drain"
    assert "node e1 went into maintenance" in notice_text(ended.get())[0]  # read in English


def test_the_holders_notice_is_worded_in_the_language_they_chose(
    frozen, alice, ops, vision, a100, client
):
    client.force_login(alice)
    response = client.post("/accounts/profile/", {"timezone": "Europe/Berlin", "language": "en"})
    assert response.status_code == 302
    assert Profile.objects.get(user=alice).language == "en"
    node = make_node(a100, cards=1, domains=1, hostname="l1")
    lease = active(ask(alice, vision, a100, duration=hours(5)))
    with translation.override("zh-hans"):  # the operator's request is in Chinese
        maintenance.node_drain(user=ops, node=node, drain_at=T0 + hours(2))
    note = Notification.objects.get(lease=lease, kind="drain_warning")
    # Email and webhooks carry this text: English, in Berlin time.
    assert note.title.startswith("Lease") and "04:00 (Europe/Berlin)" in note.title


@pytest.mark.postgres
def test_two_sweeps_at_once_warn_of_a_drain_once(transactional_db, alice, ops, vision, a100):
    import threading

    import time_machine
    from django.db import connections

    from inventory.models import Node

    node = make_node(a100, cards=2, domains=1, hostname="c1")
    leases = [active(ask(alice, vision, a100, duration=hours(5))) for _ in range(2)]
    # Drained without the service (as if its notices had failed): the sweeps must tell.
    now = leases[0].start_at
    Node.objects.filter(pk=node.pk).update(status=Node.Status.DRAINING, drain_at=now + hours(1))
    with time_machine.travel(now, tick=False):
        barrier = threading.Barrier(2)

        def run():
            barrier.wait()
            maintenance.drain_warnings_send()
            connections.close_all()

        threads = [threading.Thread(target=run) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert LeaseWarning.objects.filter(kind=WarningKind.DRAIN).count() == 2
    assert Notification.objects.filter(kind="drain_warning").count() == 2


def test_a_drain_replans_the_queue_at_once(frozen, alice, bob, ops, vision, nlp, a100):
    node = make_node(a100, cards=2, domains=1, hostname="r1")
    active(ask(bob, nlp, a100, duration=hours(1)))
    waiting = ask(alice, vision, a100, count=2, duration=hours(2))
    assert waiting.estimated_start == T0 + hours(1)
    maintenance.node_drain(user=ops, node=node, drain_at=T0 + hours(2))
    waiting.refresh_from_db()
    # 2 cards for 2 hours no longer fit before the drain: it says so without waiting a sweep.
    assert waiting.estimated_start is None
    assert waiting.stall_reason == StallReason.CARDS_OUT_OF_SERVICE
    assert Notification.objects.filter(lease=waiting, kind="lease_stalled").count() == 1


def test_a_reservation_on_a_node_that_goes_into_maintenance_is_booked_elsewhere(
    frozen, alice, ops, vision, a100
):
    """A reservation booked on a draining node does not start there after the drain: at the
    drain time it goes back to the queue and is booked on another node."""
    first = make_node(a100, cards=2, domains=1, hostname="rq-a")
    later = ask(alice, vision, a100, count=2, start_at=T0 + hours(3), duration=hours(2))
    assert later.status == LeaseStatus.SCHEDULED
    assert set(later.allocations.values_list("card__node", flat=True)) == {first.pk}
    maintenance.node_drain(user=ops, node=first, drain_at=T0 + hours(1))
    second = make_node(a100, cards=2, domains=1, hostname="rq-b")
    frozen.move_to(T0 + hours(1))
    maintenance.drains_due()
    later.refresh_from_db()
    assert later.status == LeaseStatus.SCHEDULED  # booked again, on the node in service
    assert set(later.allocations.values_list("card__node", flat=True)) == {second.pk}
    assert later.events.filter(kind="requeued").exists()
