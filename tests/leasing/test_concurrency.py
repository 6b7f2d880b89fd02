"""Many people asking at once, on real PostgreSQL: never a double booking."""

import threading
from collections import Counter
from datetime import timedelta

import pytest
from django.core.exceptions import ValidationError
from django.db import IntegrityError, connection, connections, transaction
from django.utils import timezone, translation

from leasing.choices import LeaseStatus
from leasing.lifecycle import requests as lease_requests
from leasing.models import Allocation, Lease
from leasing.teams import services as team_services
from tests.factories import CardModelFactory, MembershipFactory, UserFactory, make_node

pytestmark = pytest.mark.postgres

REQUESTERS = 60


def test_simultaneous_requests_never_double_book(transactional_db, vision):
    model = CardModelFactory(slug="race-h100")
    for i in range(3):
        make_node(model, cards=8, domains=2, hostname=f"race{i}")
    users = [UserFactory(username=f"racer{i}") for i in range(REQUESTERS)]
    for user in users:
        MembershipFactory(user=user, team=vision)
    barrier = threading.Barrier(REQUESTERS)
    errors: list[BaseException] = []

    def request(i: int) -> None:
        try:
            barrier.wait()
            with translation.override("en"):  # threads do not inherit the test's language
                lease_requests.lease_request(
                    user=users[i],
                    team=vision,
                    card_model=model,
                    count=1 + i % 3,
                    duration=timedelta(hours=1 + i % 4),
                )
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=request, args=(i,)) for i in range(REQUESTERS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors, errors

    leases = list(Lease.objects.all())
    asked = sum(lease.count for lease in leases)
    assert len(leases) == REQUESTERS and asked > 24  # more asked than the pool has
    statuses = Counter(lease.status for lease in leases)
    assert set(statuses) <= {LeaseStatus.PROVISIONING, LeaseStatus.QUEUED}
    placed = [lease for lease in leases if lease.status == LeaseStatus.PROVISIONING]
    assert statuses[LeaseStatus.QUEUED] > 0
    # Totals add up: each placed lease holds exactly its count, nobody else holds anything.
    per_lease = Counter(Allocation.objects.values_list("lease_id", flat=True))
    assert per_lease == Counter({lease.pk: lease.count for lease in placed})
    assert sum(per_lease.values()) <= 24
    # No card in two overlapping allocations (checked in SQL, independent of the code).
    with connection.cursor() as cursor:
        cursor.execute(
            """SELECT count(*) FROM leasing_allocation a JOIN leasing_allocation b
               ON a.card_id = b.card_id AND a.id < b.id
               AND tstzrange(a.start_at, a.end_at) && tstzrange(b.start_at, b.end_at)"""
        )
        assert cursor.fetchone()[0] == 0
    # Every waiting lease knows when it will start.
    assert all(
        lease.estimated_start is not None for lease in leases if lease.status == LeaseStatus.QUEUED
    )


def test_exclusion_constraint_refuses_overlap_whatever_the_code_does(db, alice, vision):
    model = CardModelFactory(slug="excl-a100")
    node = make_node(model, cards=1, domains=1, hostname="excl")
    card = node.cards.get()
    now = timezone.now()
    lease = Lease.objects.create(
        user=alice,
        team=vision,
        card_model=model,
        count=1,
        duration=timedelta(hours=2),
        start_at=now,
        end_at=now + timedelta(hours=2),
        status=LeaseStatus.ACTIVE,
        submitted_at=now,
    )
    other = Lease.objects.create(
        user=alice,
        team=vision,
        card_model=model,
        count=1,
        duration=timedelta(hours=2),
        start_at=now,
        end_at=now + timedelta(hours=2),
        status=LeaseStatus.ACTIVE,
        submitted_at=now,
    )
    Allocation.objects.create(card=card, lease=lease, start_at=now, end_at=now + timedelta(hours=2))
    # Touching periods are fine ([a, b) then [b, c)).
    Allocation.objects.create(
        card=card, lease=other, start_at=now + timedelta(hours=2), end_at=now + timedelta(hours=3)
    )
    with pytest.raises(IntegrityError, match="allocation_no_overlap"), transaction.atomic():
        Allocation.objects.filter(lease=other).update(start_at=now + timedelta(hours=1))


def test_concurrent_quota_holds_under_simultaneous_requests(transactional_db, vision, ops):
    model = CardModelFactory(slug="quota-race")
    for i in range(4):
        make_node(model, cards=8, domains=1, hostname=f"qrace{i}")
    team_services.quota_set(user=ops, team=vision, card_model=model, max_concurrent_cards=10)
    users = [UserFactory(username=f"qracer{i}") for i in range(50)]
    for user in users:
        MembershipFactory(user=user, team=vision)
    barrier = threading.Barrier(len(users))
    refused: list[str] = []
    errors: list[BaseException] = []

    def request(i: int) -> None:
        try:
            barrier.wait()
            with translation.override("en"):  # threads do not inherit the test's language
                lease_requests.lease_request(
                    user=users[i],
                    team=vision,
                    card_model=model,
                    count=1 + i % 2,
                    duration=timedelta(hours=1),
                )
        except ValidationError as exc:
            refused.append(" ".join(exc.messages))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=request, args=(i,)) for i in range(len(users))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors, errors
    held = sum(Lease.objects.values_list("count", flat=True))
    assert 9 <= held <= 10  # filled up to the quota, never past it
    assert len(refused) >= 40 and all("at most 10 cards" in r for r in refused)


def test_copies_of_one_request_sent_at_once_book_once(transactional_db, alice, vision):
    """A client that retries before its first try answered: the unique request key makes the
    late copies wait for the first and return its lease."""
    model = CardModelFactory(slug="retry-h100")
    make_node(model, cards=8, domains=1, hostname="retry0")
    copies = 8
    barrier = threading.Barrier(copies)
    got: list[int] = []
    errors: list[BaseException] = []

    def request() -> None:
        try:
            barrier.wait()
            lease = lease_requests.lease_request(
                user=alice,
                team=vision,
                card_model=model,
                count=2,
                duration=timedelta(hours=1),
                request_key="retry-1",
            )
            got.append(lease.pk)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=request) for _ in range(copies)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors, errors
    assert len(got) == copies and len(set(got)) == 1
    assert Lease.objects.count() == 1 and Allocation.objects.count() == 2


def test_simultaneous_extensions_and_requests_never_overrun_the_team_budget(
    transactional_db, vision, ops
):
    """Extensions go through admission under the team's lock like requests: eight members
    extending and asking at once against a 40 card-hour month never book more than 40."""
    from decimal import Decimal

    from leasing.lifecycle import changes
    from leasing.periods import month_of
    from leasing.teams import quotas

    # Two models, so only the team's lock (not a card model's) can serialize the two paths.
    model = CardModelFactory(slug="race-budget")
    other = CardModelFactory(slug="race-budget-b")
    make_node(model, cards=8, domains=2, hostname="budget0")
    make_node(other, cards=8, domains=2, hostname="budget1")
    team_services.quota_set(
        user=ops, team=vision, card_model=None, card_hours_per_month=Decimal(40)
    )
    users = [UserFactory(username=f"budget{i}") for i in range(8)]
    for user in users:
        MembershipFactory(user=user, team=vision)
    with translation.override("en"):
        leases = [
            lease_requests.lease_request(
                user=user, team=vision, card_model=model, count=1, duration=timedelta(hours=2)
            )
            for user in users[:4]
        ]  # 8 of 40 card-hours
    barrier = threading.Barrier(8)
    outcomes: list[str] = []
    errors: list[BaseException] = []

    def act(i: int) -> None:
        try:
            barrier.wait()
            with translation.override("en"):
                if i < 4:
                    changes.lease_extend(lease=leases[i], user=users[i], minutes=8 * 60)
                else:
                    lease_requests.lease_request(
                        user=users[i], team=vision, card_model=other, count=1,
                        duration=timedelta(hours=8),
                    )  # fmt: skip
            outcomes.append("ok")
        except ValidationError:
            outcomes.append("refused")
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=act, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors, errors
    hours, _money = quotas.month_usage(vision.pk, month_of(timezone.now()))
    # 8 booked + 8 asks of 8 card-hours each: exactly 4 fit in the 32 left.
    assert Counter(outcomes) == Counter({"ok": 4, "refused": 4})
    assert hours == Decimal(40)
