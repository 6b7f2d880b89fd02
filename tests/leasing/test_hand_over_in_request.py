"""A request placed at once on nodes whose backend only keeps books (local) is handed over by
the request itself, right after the placement commits: answered `active`, with the same
records a worker leaves (the BackendCall row, the provisioning → active event, the holder's
notice). Every other hand-over still goes through the workers."""

from __future__ import annotations

import pytest
from django.db import connection

from leasing import statements
from leasing.backends.local import LocalBackend
from leasing.choices import LeaseStatus
from leasing.lifecycle import provisioning
from leasing.lifecycle.selectors import DRAIN_ANNOTATIONS, lease_truth
from leasing.models import Allocation, BackendCall, Lease, Notification
from leasing.scheduler import fastpath
from leasing.workbench.access import access_for
from tests.factories import make_node
from tests.leasing.conftest import T0, ask, hours

PROVISION = "leasing.tasks.provision_lease"


@pytest.fixture
def in_request(settings):
    """The production default (tests/settings.py turns it off for the rest of the suite)."""
    settings.CARDPOOL = {**settings.CARDPOOL, "HAND_OVER_IN_REQUEST": True}


@pytest.fixture
def api(api):
    api.credentials(HTTP_ACCEPT_LANGUAGE="en")
    return api


def _post(api, user, model, count=1):
    api.force_authenticate(user)
    return api.post(
        "/api/v1/leases/",
        {"card_model": model.slug, "count": count, "duration_minutes": 90, "team": "vision"},
        format="json",
    )


@pytest.mark.django_db(transaction=True)  # the hand-over runs at the real commit
def test_the_api_answers_active_with_the_access_details(
    in_request,
    api,
    frozen,
    alice,
    vision,
    a100,
    small_pool,
    sent_tasks,
    django_capture_on_commit_callbacks,
):
    with django_capture_on_commit_callbacks(execute=True):
        response = _post(api, alice, a100, count=2)
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["status"] == "active" and body["activated_at"].startswith("2026-12-01T09:00")
    assert body["access"]["backend"] == "local"
    [node] = body["access"]["nodes"]
    assert node["devices"] == sorted(a["card_index"] for a in body["allocations"])
    lease = Lease.objects.get(pk=body["id"])
    assert (lease.status, lease.activated_at, access_for(lease)) == (
        LeaseStatus.ACTIVE,
        T0,
        body["access"],
    )
    # The same records as a worker's hand-over, in the same order.
    assert list(lease.events.order_by("pk").values_list("kind", "from_status", "to_status")) == [
        ("requested", "", ""),
        ("placed", LeaseStatus.QUEUED, LeaseStatus.PROVISIONING),
        ("active", LeaseStatus.PROVISIONING, LeaseStatus.ACTIVE),
    ]
    [call] = BackendCall.objects.filter(lease=lease)
    assert (call.backend, call.action, call.attempt, call.ok) == ("local", "provision", 1, True)
    assert call.finished_at is not None
    assert Notification.objects.filter(user=alice, lease=lease, kind="lease_active").count() == 1
    assert PROVISION not in [t.name for t in sent_tasks]  # no worker involved


@pytest.mark.django_db(transaction=True)  # the hand-over runs at the real commit
def test_the_answer_and_the_lease_page_agree(
    in_request, api, frozen, alice, vision, a100, small_pool
):
    body = _post(api, alice, a100).json()
    again = api.get(f"/api/v1/leases/{body['id']}/").json()
    assert body == again


def test_a_second_run_of_the_worker_changes_nothing(
    in_request, frozen, alice, vision, a100, small_pool, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        lease = ask(alice, vision, a100)
    assert lease.status == LeaseStatus.ACTIVE
    # A sweep's resend, or a message from before an upgrade: the compare-and-set says no.
    assert provisioning.provision_step(lease_id=lease.pk) is False
    assert BackendCall.objects.filter(lease=lease).count() == 1


def test_a_node_of_another_backend_is_handed_over_by_a_worker(
    in_request, frozen, alice, vision, a100, sent_tasks, django_capture_on_commit_callbacks
):
    make_node(a100, cards=4, hostname="slurm1", labels={"backend": "slurm"})
    with django_capture_on_commit_callbacks(execute=True):
        lease = ask(alice, vision, a100)
    assert lease.status == LeaseStatus.PROVISIONING
    assert not BackendCall.objects.filter(lease=lease).exists()
    assert [t.args for t in sent_tasks if t.name == PROVISION] == [(lease.pk,)]


def test_a_failing_call_is_recorded_and_left_to_a_worker(
    in_request,
    frozen,
    alice,
    vision,
    a100,
    small_pool,
    sent_tasks,
    monkeypatch,
    django_capture_on_commit_callbacks,
):
    def broken(self, holding):
        raise RuntimeError("no such device")

    monkeypatch.setattr(LocalBackend, "provision", broken)
    with django_capture_on_commit_callbacks(execute=True):
        lease = ask(alice, vision, a100)
    lease.refresh_from_db()
    assert lease.status == LeaseStatus.PROVISIONING and lease.allocations.count() == 1
    [call] = BackendCall.objects.filter(lease=lease)
    assert (call.ok, call.detail) == (False, "no such device")
    assert [t.args for t in sent_tasks if t.name == PROVISION] == [(lease.pk,)]


def test_turned_off_every_hand_over_goes_to_the_workers(
    settings,
    frozen,
    alice,
    vision,
    a100,
    small_pool,
    sent_tasks,
    django_capture_on_commit_callbacks,
):
    settings.CARDPOOL = {**settings.CARDPOOL, "HAND_OVER_IN_REQUEST": False}
    with django_capture_on_commit_callbacks(execute=True):
        lease = ask(alice, vision, a100)
    assert lease.status == LeaseStatus.PROVISIONING
    assert [t.args for t in sent_tasks if t.name == PROVISION] == [(lease.pk,)]


def test_reservations_and_queued_requests_are_not_handed_over_here(
    in_request, frozen, alice, vision, a100, small_pool
):
    later = ask(alice, vision, a100, start_at=T0 + hours(3))
    assert later.status == LeaseStatus.SCHEDULED
    for _ in range(2):
        ask(alice, vision, a100, count=4)  # the whole pool (2 × 4), active at once
    waiting = ask(alice, vision, a100)
    assert waiting.status == LeaseStatus.QUEUED
    assert not BackendCall.objects.filter(lease__in=[later, waiting]).exists()


@pytest.mark.django_db(transaction=True)  # the hand-over runs at the real commit
def test_one_post_stays_within_its_statements(
    in_request,
    api,
    frozen,
    alice,
    vision,
    a100,
    small_pool,
    django_assert_max_num_queries,
    django_capture_on_commit_callbacks,
):
    _post(api, alice, a100)  # the free-card statement is built once per process
    # Token/session, membership, model, team, admission, lock, placement, shares, lease,
    # events, allocations with their nodes, backend call, active, the notice and the answer.
    with django_assert_max_num_queries(22), django_capture_on_commit_callbacks(execute=True):
        assert _post(api, alice, a100).status_code == 201


# --- the pieces it relies on ---------------------------------------------------------


def test_holding_from_prefetched_allocations_is_the_holding_read(
    frozen, alice, vision, a100, small_pool
):
    lease = ask(alice, vision, a100, count=2)
    read = provisioning.holding_of(Lease.objects.get(pk=lease.pk))
    fetched = Lease.objects.prefetch_related("allocations__card__node").get(pk=lease.pk)
    assert provisioning.holding_of(fetched) == read and read.nodes


def test_drain_from_loaded_allocations_is_the_annotated_drain(frozen, alice, vision, a100):
    make_node(a100, cards=2, hostname="d1", status="draining", drain_at=T0 + hours(1))
    lease = ask(alice, vision, a100, duration=hours(1))  # fits before the drain
    Lease.objects.filter(pk=lease.pk).update(end_at=T0 + hours(4))
    Allocation.objects.filter(lease=lease).update(end_at=T0 + hours(4))  # now outlives it
    annotated = Lease.objects.annotate(**DRAIN_ANNOTATIONS).get(pk=lease.pk)
    loaded = Lease.objects.prefetch_related("allocations__card__node").get(pk=lease.pk)
    assert not hasattr(loaded, "node_drain_at")
    assert lease_truth(loaded) == lease_truth(annotated)
    assert lease_truth(loaded).cut == "drain"


def test_the_fast_path_finds_no_cards_while_someone_waits(frozen, alice, vision, a100, small_pool):
    for _ in range(2):
        ask(alice, vision, a100, count=4)
    waiting = ask(alice, vision, a100, count=1)
    assert waiting.status == LeaseStatus.QUEUED
    make_node(a100, cards=4, hostname="late")  # free cards, but the queue comes first
    kwargs = {"count": 1, "start": T0, "end": T0 + hours(1)}
    assert fastpath.place_now(a100.pk, **kwargs, unless_queued=True) is None
    assert fastpath.place_now(a100.pk, **kwargs)


def test_the_free_card_statement_built_once_gives_what_building_it_gives(
    frozen, alice, vision, a100, small_pool, monkeypatch
):
    ask(alice, vision, a100, count=3)
    windows = [(T0, T0 + hours(1)), (T0 + hours(2), T0 + hours(9))]
    cached = [fastpath._free_sql(a100.pk, start=s, end=e, nodes=None) for s, e in windows]
    key = ("fastpath.free", connection.vendor)
    assert statements._templates[key]  # the template was built: the parameters are all known
    monkeypatch.setitem(statements._templates, key, None)
    built = [fastpath._free_sql(a100.pk, start=s, end=e, nodes=None) for s, e in windows]
    assert cached == built


def test_the_hand_over_waits_for_the_placement_to_commit_and_the_sweep_covers_a_crash(
    in_request,
    frozen,
    alice,
    vision,
    a100,
    small_pool,
    sent_tasks,
    settings,
    django_capture_on_commit_callbacks,
):
    from leasing.lifecycle import tasks

    with django_capture_on_commit_callbacks(execute=False) as after_commit:
        lease = ask(alice, vision, a100)
    # Committed as placed (the model's lock is not held for the hand-over), nothing sent yet.
    assert Lease.objects.get(pk=lease.pk).status == LeaseStatus.PROVISIONING
    assert after_commit and PROVISION not in [t.name for t in sent_tasks]
    # The process died before running it: the sweep re-finds the lease like a lost task.
    frozen.shift(settings.CARDPOOL["STUCK_SECONDS"] + 1)
    tasks.sweep()
    assert [t.args for t in sent_tasks if t.name == PROVISION] == [(lease.pk,)]
    provisioning.provision_step(lease_id=lease.pk)
    assert Lease.objects.get(pk=lease.pk).status == LeaseStatus.ACTIVE


def test_a_card_swapped_between_the_commits_keeps_its_change_pending(
    in_request,
    frozen,
    alice,
    vision,
    a100,
    small_pool,
    sent_tasks,
    django_capture_on_commit_callbacks,
):
    with django_capture_on_commit_callbacks(execute=False) as after_commit:
        lease = ask(alice, vision, a100)
    # A swap commits before the hand-over runs: it marks the access, as for a worker's.
    Lease.objects.filter(pk=lease.pk).update(access={provisioning.PENDING_CHANGE: T0.isoformat()})
    with django_capture_on_commit_callbacks(execute=True):
        for callback in after_commit:
            callback()
    lease.refresh_from_db()
    assert lease.status == LeaseStatus.ACTIVE
    assert provisioning.PENDING_CHANGE in lease.access and lease.access["backend"] == "local"
    assert "leasing.tasks.change_lease" in [t.name for t in sent_tasks]
    assert lease.events.filter(kind="active").count() == 1
