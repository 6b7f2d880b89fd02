"""Requirements choose the cards: a stack never given up, a region kept, a version met.

The node requirements (region, network, stack version) are one rule,
``inventory.requirements.nodes_meeting``, read by the fast path, the queue pass, the
preview and the advisor; these tests hold every path to it.
"""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.core.exceptions import ValidationError
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from inventory.models import Card, StackFamily, Vendor
from inventory.requirements import nodes_meeting, version_at_least
from leasing.advisor.estimator import TaskProfile
from leasing.choices import LeaseStatus
from leasing.lifecycle.requests import lease_request_by_profile
from leasing.models import Allocation, Lease
from tests.factories import CardModelFactory, RegionFactory, make_node
from tests.leasing.conftest import T0, ask, hours


@pytest.fixture
def regions(db):
    north = RegionFactory(slug="north", name="North")
    beijing = RegionFactory(slug="beijing", name="Beijing", parent=north)
    shenzhen = RegionFactory(slug="shenzhen-edge", name="Shenzhen edge")
    return north, beijing, shenzhen


def cards_of(lease: Lease) -> list[Card]:
    return [a.card for a in Allocation.objects.filter(lease=lease).select_related("card__node")]


def test_versions_compare_as_people_read_them():
    assert version_at_least("12.4", "12.2")
    assert not version_at_least("12.1", "12.2")
    assert version_at_least("8.0.0", "8.0") and version_at_least("8.0", "8.0.0")
    assert not version_at_least("8.0.RC2", "8.0")  # a release candidate comes before
    assert version_at_least("8.0.RC3", "8.0.RC2")
    assert version_at_least("24.04", "23.10")
    assert not version_at_least(None, "1")


def test_a_region_request_lands_only_in_that_region(frozen, alice, vision, a100, regions):
    north, beijing, shenzhen = regions
    make_node(a100, cards=2, hostname="bj", region=beijing)
    make_node(a100, cards=8, hostname="sz", region=shenzhen)
    # Best fit alone would choose the 2-card node in Beijing.
    lease = ask(alice, vision, a100, count=2, requirements={"region": "shenzhen-edge"})
    assert lease.status == LeaseStatus.PROVISIONING
    assert {c.node.hostname for c in cards_of(lease)} == {"sz"}
    assert lease.requirements == {"region": "shenzhen-edge"}
    # A parent region takes the regions inside it.
    inside = ask(alice, vision, a100, count=2, requirements={"region": "north"})
    assert {c.node.hostname for c in cards_of(inside)} == {"bj"}


def test_a_region_request_waits_for_its_region_not_for_others(frozen, alice, vision, a100, regions):
    north, beijing, shenzhen = regions
    make_node(a100, cards=2, hostname="bj", region=beijing)
    make_node(a100, cards=2, hostname="sz", region=shenzhen)
    ask(alice, vision, a100, count=2, duration=hours(3), requirements={"region": "shenzhen-edge"})
    waiting = ask(alice, vision, a100, count=2, requirements={"region": "shenzhen-edge"})
    # Beijing is free, but the lease asked for Shenzhen: it queues with an honest estimate.
    assert waiting.status == LeaseStatus.QUEUED
    assert waiting.estimated_start == T0 + hours(3)
    other = ask(alice, vision, a100, count=2)  # no region: Beijing, now
    assert other.status == LeaseStatus.PROVISIONING
    assert {c.node.hostname for c in cards_of(other)} == {"bj"}


def test_a_region_the_model_is_not_in_is_refused_with_the_reason(
    frozen, alice, vision, a100, regions
):
    north, beijing, shenzhen = regions
    make_node(a100, cards=4, hostname="bj", region=beijing)
    with pytest.raises(ValidationError) as exc:
        ask(alice, vision, a100, count=1, requirements={"region": "shenzhen-edge"})
    assert "No A100 test cards are on nodes meeting region=shenzhen-edge" in str(exc.value)
    with pytest.raises(ValidationError) as exc:
        ask(alice, vision, a100, count=6, requirements={"region": "north"})
    assert "Only 4 A100 test cards" in str(exc.value)
    assert not Lease.objects.exists()


def test_a_stack_version_keeps_older_nodes_out(frozen, alice, vision, a100, regions):
    make_node(a100, cards=2, hostname="old", software_versions={"cuda": "11.8"})
    new = make_node(a100, cards=8, hostname="new", software_versions={"CUDA": "12.4"})
    make_node(a100, cards=2, hostname="silent")
    wanted = {"stack": "cuda", "min_stack_version": "12.2"}
    assert nodes_meeting(wanted) == {new.pk}
    lease = ask(alice, vision, a100, count=1, requirements=wanted)
    assert {c.node.hostname for c in cards_of(lease)} == {"new"}
    with pytest.raises(ValidationError, match="Name the software stack"):
        ask(alice, vision, a100, count=1, requirements={"min_stack_version": "12.2"})


def test_a_named_model_must_meet_the_stack(frozen, alice, vision, regions):
    ascend = CardModelFactory(
        slug="npu", name="NPU", vendor=Vendor.HUAWEI, stack_family=StackFamily.CANN
    )
    make_node(ascend, cards=2, hostname="npu")
    with pytest.raises(ValidationError, match="does not meet the requirement"):
        ask(alice, vision, ascend, requirements={"stack": "cuda"})
    assert not Lease.objects.exists()


STACKS = [StackFamily.CUDA, StackFamily.CANN, StackFamily.MACA, StackFamily.NEUWARE]


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    pool=st.lists(
        st.tuples(
            st.sampled_from(STACKS),
            st.sampled_from([Decimal("24"), Decimal("64"), Decimal("80")]),
            st.sampled_from([Decimal("2"), Decimal("8"), Decimal("30")]),
            st.integers(1, 8),
        ),
        min_size=1,
        max_size=6,
    ),
    asks=st.lists(
        st.tuples(st.integers(1, 8), st.sampled_from([None, Decimal("40"), Decimal("70")])),
        min_size=1,
        max_size=6,
    ),
)
def test_a_cuda_only_request_never_lands_on_a_non_cuda_card(
    django_db_blocker, alice, vision, frozen, pool, asks
):
    """Over random pools (stacks, memory, prices, node sizes), requests by requirements or
    by task with ``stack: cuda`` get CUDA cards or nothing — placed now, queued, or refused."""
    from django.db import transaction

    sid = transaction.savepoint()
    try:
        for i, (stack, memory, price, cards) in enumerate(pool):
            model = CardModelFactory(
                slug=f"p{i}", stack_family=stack, memory_gb=memory, price_per_hour=price
            )
            make_node(model, cards=cards, hostname=f"h{i}")
        for count, memory in asks:
            wanted = {"stack": "cuda"} | ({"min_memory_gb": memory} if memory else {})
            try:
                lease = ask(alice, vision, None, count=count, requirements=wanted)
            except ValidationError:
                continue
            assert lease.card_model.stack_family == StackFamily.CUDA
            assert all(c.card_model.stack_family == StackFamily.CUDA for c in cards_of(lease))
        # and by task: the advisor's top option, asked for through the same request
        for params in (1, 13, 70):
            try:
                lease = lease_request_by_profile(
                    user=alice,
                    team=vision,
                    profile=TaskProfile(task="inference", params_b=params),
                    duration=hours(1),
                    requirements={"stack": "cuda"},
                )
            except ValidationError:
                continue
            assert all(c.card_model.stack_family == StackFamily.CUDA for c in cards_of(lease))
        assert (
            not Allocation.objects.exclude(card__card_model__stack_family="cuda")
            .filter(lease__requirements__stack="cuda")
            .exists()
        )
    finally:
        transaction.savepoint_rollback(sid)


def test_a_waiting_region_lease_says_when_its_region_can_never_hold_it(
    frozen, alice, vision, a100, regions
):
    from django.db import transaction

    from leasing.lifecycle.selectors import lease_truth
    from leasing.scheduler.run import replan

    north, beijing, shenzhen = regions
    sz = make_node(a100, cards=2, hostname="sz", region=shenzhen)
    make_node(a100, cards=8, hostname="bj", region=beijing)
    ask(alice, vision, a100, count=2, duration=hours(3), requirements={"region": "shenzhen-edge"})
    waiting = ask(alice, vision, a100, count=2, requirements={"region": "shenzhen-edge"})
    assert waiting.status == LeaseStatus.QUEUED
    Card.objects.filter(node=sz, index=1).update(status=Card.Status.RETIRED)
    with transaction.atomic():
        replan(a100.pk, now=T0)
    waiting.refresh_from_db()
    assert waiting.stall_reason == "requirements"
    truth = lease_truth(waiting)
    assert "requirements (region" in truth.stall_why and "another region" in truth.stall_todo
