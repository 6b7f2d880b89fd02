"""The database moves a card model's PlanVersion on every change the queue planner reads
(triggers, migration leasing/0025), and not on changes it does not read."""

from datetime import timedelta

import pytest

from inventory.models import Card, Node
from leasing.choices import LeaseStatus
from leasing.models import Allocation, Lease, PlanVersion, QueueMark
from tests.factories import CardModelFactory, make_node
from tests.leasing.conftest import T0


def version(model):
    row = PlanVersion.objects.filter(card_model_id=model.pk).first()
    return 0 if row is None else row.version


@pytest.fixture
def other(db):
    return CardModelFactory(slug="other-model", name="Other")


def lease(user, team, model, status=LeaseStatus.QUEUED, **kw):
    return Lease.objects.create(
        user=user, team=team, card_model=model, count=1, duration=timedelta(hours=1),
        start_at=T0, end_at=T0 + timedelta(hours=1), status=status, status_changed_at=T0,
        submitted_at=T0, **kw,
    )  # fmt: skip


def test_each_change_the_planner_reads_moves_the_version(alice, vision, a100, other, small_pool):
    card = Card.objects.filter(card_model=a100).first()
    seen = [version(a100)]

    def moved():
        seen.append(version(a100))
        return seen[-1] > seen[-2]

    waiting = lease(alice, vision, a100)
    assert moved()  # a lease joins the queue
    Lease.objects.filter(pk=waiting.pk).update(estimated_start=T0 + timedelta(hours=1))
    assert moved()  # a waiting lease's plan
    held = lease(alice, vision, a100, status=LeaseStatus.PROVISIONING)
    assert not moved()  # a lease placed at once: its allocations count, not the row
    allocation = Allocation.objects.create(
        card=card, lease=held, start_at=T0, end_at=T0 + timedelta(hours=1)
    )
    assert moved()
    Allocation.objects.filter(pk=allocation.pk).update(end_at=T0 + timedelta(hours=2))
    assert moved()
    Lease.objects.filter(pk=held.pk).update(status=LeaseStatus.ACTIVE)
    assert moved()  # any change of state (a failed release keeps cards out)
    Lease.objects.filter(pk=held.pk).update(description="renamed")
    assert not moved()  # a holder's description is not the planner's business
    Lease.objects.filter(pk=held.pk).update(preempt_at=T0 + timedelta(minutes=5))
    assert moved()
    Allocation.objects.filter(pk=allocation.pk).delete()
    assert moved()
    Card.objects.filter(pk=card.pk).update(health=Card.Health.HOT)
    assert moved()
    Card.objects.filter(pk=card.pk).update(health_note="warm")
    assert not moved()
    Node.objects.filter(pk=card.node_id).update(status=Node.Status.DRAINING, drain_at=T0)
    assert moved()
    Node.objects.filter(pk=card.node_id).update(telemetry_seen_at=T0)
    assert not moved()  # a heartbeat
    make_node(a100, cards=2, hostname="more")
    assert moved()
    QueueMark.objects.create(
        card_model=a100, rank=0, virtual_at=T0, lease_id_after=waiting.pk, since=T0
    )
    assert moved()
    QueueMark.objects.filter(card_model=a100).delete()
    assert moved()
    Lease.objects.filter(pk=waiting.pk).update(card_model=other)
    assert moved() and version(other) > 0  # both models count
    before_other = version(other)
    make_node(other, cards=1, hostname="elsewhere")
    assert version(other) > before_other and not moved()  # another model's change
