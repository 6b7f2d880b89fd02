"""A stateful property test of the lease lifecycle: random sequences of everything people,
operators, the clock and the backends do, with the pool's invariants checked after every step.

Steps: request, extend, resize, approve / reject (requests and changes), release, cancel, the
clock moving (expiries, reservation starts, preemption, drains; a frozen clock moved by the
machine), a node drain, a faulty card, a preemptible lease preempted by a higher class, and a
backend that fails to provision or to release.

Invariants, after every step:
- no card is in two overlapping holdings;
- every held lease holds exactly its count of cards, now;
- no team is over its concurrent quota or its month budget (card-hours, money) — the machine
  never overrides;
- ``end_reason`` is set exactly when the lease has ended;
- every held lease's visible end (page, list, API) is its effective end, never before its start;
- what a lease is billed is Σ held card-minutes × the price book (to the cent per record).

CI runs a bounded number of sequences (``CARDPOOL_STATEFUL_EXAMPLES``, default 40); the longer
run's figure is in docs/reliability.md.
"""

from __future__ import annotations

import os
from datetime import timedelta
from decimal import Decimal
from unittest import mock

import pytest
import time_machine
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.utils.dateparse import parse_datetime
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    rule,
    run_state_machine_as_test,
)

from inventory.models import Card, Node
from leasing.backends.base import PermanentBackendError
from leasing.backends.local import LocalBackend
from leasing.billing import usage
from leasing.billing.prices import PriceBook, discount_for, record_cost
from leasing.choices import (
    BOOKED_STATES,
    HOLDING_STATES,
    REASONED_STATES,
    RECORDED_STATES,
    RUNNING_STATES,
    LeaseStatus,
    Priority,
)
from leasing.lifecycle import (
    change_decisions,
    changes,
    endings,
    maintenance,
    provisioning,
    releases,
    resize,
)
from leasing.lifecycle import requests as lease_requests
from leasing.lifecycle.serializers import LeaseSerializer
from leasing.lifecycle.tasks import _expire_and_start_due
from leasing.models import Allocation, Lease, LeaseChange, Quota, TeamPrice, UsageRecord
from leasing.periods import floor_minute, month_of
from leasing.teams import approvals, quotas
from leasing.teams import services as team_services
from portal.models import Membership
from tests.factories import CardModelFactory, MembershipFactory, TeamFactory, UserFactory, make_node
from tests.leasing.conftest import T0

EXAMPLES = int(os.environ.get("CARDPOOL_STATEFUL_EXAMPLES", "40"))
STEPS = int(os.environ.get("CARDPOOL_STATEFUL_STEPS", "30"))
MINUTE = timedelta(minutes=1)
REFUSED = (ValidationError, PermissionDenied)


PICK = st.integers(0, 50)  # the n-th lease (mod how many there are): every rule finds one


class LeaseLifecycle(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.atomic = transaction.atomic()
        self.atomic.__enter__()
        self.clock = time_machine.travel(T0, tick=False)
        self.traveller = self.clock.start()
        self.now = T0

    def teardown(self):
        if os.environ.get("CARDPOOL_STATEFUL_DEBUG"):
            from collections import Counter

            print(
                dict(Counter(Lease.objects.values_list("status", flat=True))),
                dict(Counter(e for e in LeaseChange.objects.values_list("status", flat=True))),
                sorted({k for k in Lease.objects.values_list("events__kind", flat=True) if k}),
            )
        self.clock.stop()
        transaction.set_rollback(True)
        self.atomic.__exit__(None, None, None)

    # --- the world ------------------------------------------------------------------------

    @initialize()
    def world(self):
        self.model = CardModelFactory(slug="sm-a100", name="SM A100", price_per_hour=Decimal(10))
        self.nodes = [
            make_node(self.model, cards=4, domains=2, hostname=f"sm{i}") for i in range(3)
        ]
        self.vision = TeamFactory(slug="sm-vision", name="SM Vision")
        self.nlp = TeamFactory(slug="sm-nlp", name="SM NLP")
        self.alice, self.bob, self.lena = (
            UserFactory(username=n) for n in ("sm-alice", "sm-bob", "sm-lena")
        )
        self.ops = UserFactory(username="sm-ops", profile__is_operator=True)
        MembershipFactory(user=self.alice, team=self.vision, role=Membership.Role.MEMBER)
        MembershipFactory(user=self.lena, team=self.vision, role=Membership.Role.LEAD)
        MembershipFactory(user=self.bob, team=self.nlp, role=Membership.Role.MEMBER)
        # The team price differs from the list price: bills and budgets must both use it.
        TeamPrice.objects.create(
            team=self.vision,
            card_model=self.model,
            price_per_hour=Decimal(40),
            effective_from=T0 - timedelta(days=1),
        )
        team_services.quota_set(
            user=self.ops,
            team=self.vision,
            card_model=None,
            max_concurrent_cards=6,
            card_hours_per_month=Decimal(80),
            money_per_month=Decimal(5000),
            max_lease_hours=24,
        )
        team_services.member_limit_set(
            user=self.lena,
            membership=Membership.objects.get(user=self.alice, team=self.vision),
            card_model=None,
            max_concurrent_cards=3,
            max_lease_hours=8,
        )
        self.who = {
            "alice": (self.alice, self.vision),
            "bob": (self.bob, self.nlp),
            "lena": (self.lena, self.vision),
        }

    # --- people ---------------------------------------------------------------------------

    @rule(
        who=st.sampled_from(["alice", "bob", "lena"]),
        count=st.integers(1, 5),
        hours_=st.integers(1, 12),
        later=st.sampled_from([0, 0, 0, 30, 180]),
        priority=st.sampled_from(
            [Priority.NORMAL, Priority.NORMAL, Priority.PREEMPTIBLE, Priority.HIGH]
        ),
        same_node=st.booleans(),
    )
    def request(self, who, count, hours_, later, priority, same_node):
        user, team = self.who[who]
        try:
            lease_requests.lease_request(
                user=user,
                team=team,
                card_model=self.model,
                count=count,
                duration=timedelta(hours=hours_),
                start_at=self.now + timedelta(minutes=later) if later else None,
                priority=priority,
                same_node=same_node,
                now=self.now,
            )
        except REFUSED:
            pass

    # Asking is what people do most: two more rules of the same kind weigh it up.
    @rule(who=st.sampled_from(["alice", "bob"]), count=st.integers(1, 4), hours_=st.integers(1, 6))
    def request_now(self, who, count, hours_):
        self.request(who, count, hours_, 0, Priority.NORMAL, False)

    @rule(who=st.sampled_from(["alice", "lena"]), count=st.integers(2, 4))
    def request_preemptible(self, who, count):
        self.request(who, count, 4, 0, Priority.PREEMPTIBLE, False)

    def _lease(self, pick):
        leases = list(
            Lease.objects.order_by("pk").select_related("team", "user", "card_model")[:60]
        )
        return leases[pick % len(leases)] if leases else None

    @rule(pk=PICK, minutes=st.sampled_from([15, 60, 240, 900]), by_lead=st.booleans())
    def extend(self, pk, minutes, by_lead):
        lease = self._lease(pk)
        if lease is None:
            return
        user = self.lena if by_lead and lease.team_id == self.vision.pk else lease.user
        try:
            changes.lease_extend(lease=lease, user=user, minutes=minutes, now=self.now)
        except REFUSED:
            pass

    @rule(pk=PICK, count=st.integers(1, 6))
    def resize(self, pk, count):
        lease = self._lease(pk)
        if lease is None:
            return
        try:
            resize.lease_resize(lease=lease, user=lease.user, count=count, now=self.now)
        except REFUSED:
            pass

    @rule(pk=PICK)
    def release(self, pk):
        lease = self._lease(pk)
        if lease is None:
            return
        try:
            changes.lease_release(lease=lease, user=lease.user, now=self.now)
        except REFUSED:
            pass

    @rule(pk=PICK)
    def cancel(self, pk):
        lease = self._lease(pk)
        if lease is None:
            return
        try:
            changes.lease_cancel(lease=lease, user=lease.user, now=self.now)
        except REFUSED:
            pass

    @rule(approve=st.booleans())
    def decide(self, approve):
        """The lead decides the oldest request or change waiting for her."""
        pending = Lease.objects.filter(status=LeaseStatus.PENDING_APPROVAL).order_by("pk").first()
        change = (
            LeaseChange.objects.filter(status=LeaseChange.Status.PENDING).order_by("pk").first()
        )
        try:
            if pending is not None:
                if approve:
                    approvals.lease_approve(lease=pending, user=self.lena, now=self.now)
                else:
                    approvals.lease_reject(lease=pending, user=self.lena, reason="no", now=self.now)
            elif change is not None:
                if approve:
                    change_decisions.change_approve(change=change, user=self.lena, now=self.now)
                else:
                    change_decisions.change_reject(
                        change=change, user=self.lena, reason="no", now=self.now
                    )
        except REFUSED:
            pass

    # --- the backends, the clock, operators ------------------------------------------------

    @rule()
    def backends_work(self):
        """What the worker does after commit: provision, release, record usage."""
        for pk in Lease.objects.filter(status=LeaseStatus.PROVISIONING).values_list(
            "pk", flat=True
        ):
            provisioning.provision_step(lease_id=pk)
        self._finish_releases()

    def _finish_releases(self):
        for pk in Lease.objects.filter(status=LeaseStatus.RELEASING).values_list("pk", flat=True):
            provisioning.release_step(lease_id=pk)
        for pk in Lease.objects.filter(status__in=RECORDED_STATES).values_list("pk", flat=True):
            usage.usage_record_lease(pk)

    @rule(pk=PICK)
    def provisioning_fails(self, pk):
        """The backend gives up on a lease it was provisioning."""
        lease = self._lease(pk)
        if lease is not None and lease.status == LeaseStatus.PROVISIONING:
            provisioning.lease_fail(lease_id=lease.pk, reason="backend down", now=self.now)

    @rule(pk=PICK, resolve=st.booleans())
    def release_fails_for_good(self, pk, resolve):
        """The backend cannot take a lease's cards back; an operator retries or resolves it."""
        lease = self._lease(pk)
        if lease is None or lease.status != LeaseStatus.RELEASING:
            return

        def refuse(backend, holding):
            raise PermanentBackendError("node unreachable")

        with mock.patch.object(LocalBackend, "release", refuse):
            provisioning.release_step(lease_id=lease.pk)
        lease.refresh_from_db()
        assert lease.status == LeaseStatus.RELEASE_FAILED
        if resolve:
            releases.lease_release_resolve(lease=lease, user=self.ops, now=self.now)
        else:
            releases.lease_release_retry(lease=lease, user=self.ops, now=self.now)

    @rule(minutes=st.sampled_from([5, 30, 90, 240, 600]))
    def time_passes(self, minutes):
        self.now += timedelta(minutes=minutes)
        self.traveller.move_to(self.now)
        _expire_and_start_due(self.now)
        endings.preemptions_due(now=self.now)
        maintenance.drains_due(now=self.now)
        self.backends_work()

    @rule(node=st.integers(0, 2), minutes=st.sampled_from([0, 30, 120]))
    def drain(self, node, minutes):
        try:
            maintenance.node_drain(
                user=self.ops,
                node=self.nodes[node],
                drain_at=self.now + timedelta(minutes=minutes),
                now=self.now,
            )
        except REFUSED:
            pass

    @rule(node=st.integers(0, 2), index=st.integers(0, 3))
    def faulty_card(self, node, index):
        card = Card.objects.get(node=self.nodes[node], index=index)
        if card.status == Card.Status.FAULTY:
            return
        maintenance.card_mark_faulty(user=self.ops, card=card, note="ECC", now=self.now)

    # --- invariants -----------------------------------------------------------------------

    @invariant()
    def no_card_twice(self):
        rows = sorted(
            Allocation.objects.filter(lease__status__in=HOLDING_STATES).values_list(
                "card_id", "start_at", "end_at", "lease_id"
            )
        )
        for (card, _s, end, lease), (card2, start2, _e, lease2) in zip(
            rows, rows[1:], strict=False
        ):
            if card == card2:
                assert start2 >= end, f"card {card} in leases {lease} and {lease2} at once"

    @invariant()
    def held_leases_hold_their_count(self):
        for lease in Lease.objects.filter(status__in=RUNNING_STATES):
            held = Allocation.objects.filter(
                lease=lease, start_at__lte=self.now, end_at__gt=self.now
            ).count()
            if lease.start_at <= self.now < lease.end_at:
                assert held == lease.count, f"lease {lease.pk} holds {held} of {lease.count}"

    @invariant()
    def teams_within_quota(self):
        for rule_ in Quota.objects.all():
            used, _frees = quotas.concurrent_use(rule_.team_id, self.now, self.now + MINUTE)
            held_now = sum(
                Lease.objects.filter(
                    team_id=rule_.team_id,
                    status__in=RUNNING_STATES,
                    borrowed=False,
                    start_at__lte=self.now,
                    end_at__gt=self.now,
                ).values_list("count", flat=True)
            )
            if rule_.max_concurrent_cards is not None:
                assert held_now <= rule_.max_concurrent_cards, (
                    f"team {rule_.team_id} holds {held_now} > {rule_.max_concurrent_cards}"
                )
            hours_, money = quotas.month_usage(rule_.team_id, month_of(self.now))
            if rule_.card_hours_per_month is not None:
                assert hours_ <= rule_.card_hours_per_month + Decimal("0.001"), hours_
            if rule_.money_per_month is not None:
                assert money <= rule_.money_per_month + Decimal("0.01"), money

    @invariant()
    def leases_within_the_longest_lease(self):
        """The team's 24 h for everyone in it; alice's own 8 h unless her lead approved more."""
        for lease in Lease.objects.filter(team=self.vision).exclude(
            status__in=[LeaseStatus.PENDING_APPROVAL, LeaseStatus.REJECTED]
        ):
            asked = {k for k in lease.events.values_list("kind", flat=True)}
            if "needs_approval" in asked and "approved" not in asked:
                continue  # withdrawn while it waited for the lead: never admitted
            length = lease.end_at - lease.start_at
            assert length <= timedelta(hours=24), (lease.pk, length)
            approved = (
                lease.events.filter(kind="approved").exists()
                or lease.changes.filter(status=LeaseChange.Status.APPROVED).exists()
                # the lead (or an operator) changed it herself: that is her approval
                or lease.events.filter(actor__in=[self.lena, self.ops], kind="extended").exists()
            )
            if lease.user_id == self.alice.pk and not approved:
                assert length <= timedelta(hours=8), (lease.pk, length)

    @invariant()
    def end_reason_iff_ended(self):
        """Set exactly when the lease has ended or is ending (releasing, release failed)."""
        for status, reason in Lease.objects.values_list("status", "end_reason"):
            assert (status in REASONED_STATES) == bool(reason), (status, reason)

    @invariant()
    def visible_end_is_the_effective_end(self):
        """What the API (and so the page and list, one rule) shows as the end is when the
        lease will really end: the booked end, or earlier a drain of a node it holds cards on,
        or a preemption of the whole lease."""
        for lease in Lease.objects.filter(status__in=BOOKED_STATES).select_related(
            "card_model", "team", "user"
        ):
            expected = lease.end_at
            # Cards held past the drain time of a node being drained end then (cards whose
            # period ends before it, e.g. taken back by a partial preemption, do not count).
            for end, drain_at in Allocation.objects.filter(
                lease=lease,
                card__node__status=Node.Status.DRAINING,
                card__node__drain_at__isnull=False,
            ).values_list("end_at", "card__node__drain_at"):
                if end > drain_at:
                    expected = min(expected, max(drain_at, lease.start_at))
            if lease.preempt_at is not None and lease.preempt_cards is None:
                expected = min(expected, lease.preempt_at)
            shown = parse_datetime(LeaseSerializer(lease).data["effective_end"])
            assert shown == expected, (lease.pk, lease.status, shown, expected)

    @invariant()
    def no_end_before_start(self):
        for lease in Lease.objects.all():
            assert lease.end_at > lease.start_at
            if lease.status == LeaseStatus.QUEUED and lease.estimated_start:
                assert lease.estimated_start + lease.duration > lease.estimated_start

    @invariant()
    def bills_are_held_minutes_times_the_price_book(self):
        for lease in Lease.objects.filter(status__in=RECORDED_STATES).select_related("card_model"):
            records = list(UsageRecord.objects.filter(lease=lease))
            if not records:
                continue
            pieces = [
                (floor_minute(s), floor_minute(e))
                for s, e in Allocation.objects.filter(lease=lease).values_list("start_at", "end_at")
            ]
            minutes = sum(max((e - s) // MINUTE, 0) for s, e in pieces)
            assert sum(r.card_minutes for r in records) == minutes, lease.pk
            book = PriceBook.load(
                card_model=lease.card_model, team_id=lease.team_id, until=self.now + MINUTE
            )
            discount = discount_for(lease.priority)
            expected = sum(
                (book.cost(count=1, start=s, end=e, discount=discount) for s, e in pieces if e > s),
                Decimal(0),
            )
            billed = sum((r.cost for r in records), Decimal(0))
            assert abs(billed - expected) <= Decimal("0.01") * len(records), (billed, expected)
            for r in records:
                assert r.cost == record_cost(r.card_minutes, r.price)


def test_lease_lifecycle_holds_its_invariants(db):
    run_state_machine_as_test(
        LeaseLifecycle,
        settings=settings(
            max_examples=EXAMPLES,
            stateful_step_count=STEPS,
            deadline=None,
            suppress_health_check=list(HealthCheck),
            derandomize=os.environ.get("CARDPOOL_STATEFUL_RANDOM") != "1",
            database=None,
        ),
    )


pytestmark = pytest.mark.filterwarnings("ignore::hypothesis.errors.NonInteractiveExampleWarning")
