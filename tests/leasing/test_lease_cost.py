"""The lease page's cost so far and to the end come from the bill's own rule: after the lease
ends, the records written add up to what the page said."""

from decimal import Decimal

from django.db.models import Sum

from leasing.billing.accrued import lease_cost
from leasing.lifecycle import changes, provisioning
from leasing.models import UsageRecord
from tests.leasing.conftest import T0, ask, hours


def test_cost_so_far_and_to_the_end(
    frozen, client, alice, vision, a100, small_pool, django_capture_on_commit_callbacks
):
    lease = ask(alice, vision, a100, count=2, duration=hours(4))  # 2 × 4 h × ¥10
    provisioning.provision_step(lease_id=lease.pk)
    frozen.move_to(T0 + hours(1))
    lease.refresh_from_db()
    cost = lease_cost(lease, now=T0 + hours(1))
    assert cost == {"so_far": Decimal("20.00"), "to_end": Decimal("80.00"), "estimated": False}
    client.force_login(alice)
    page = client.get(f"/leases/{lease.pk}/").content.decode()
    assert 'data-cost="so-far">CNY 20.00' in page and 'data-cost="to-end">CNY 80.00' in page
    frozen.move_to(T0 + hours(1.5))
    with django_capture_on_commit_callbacks(execute=True):
        changes.lease_release(lease=lease, user=alice)
        provisioning.release_step(lease_id=lease.pk)
    lease.refresh_from_db()
    ended = lease_cost(lease, now=T0 + hours(3))
    assert ended["so_far"] == ended["to_end"] == Decimal("30.00")  # 2 × 1.5 h
    recorded = UsageRecord.objects.filter(lease=lease).aggregate(total=Sum("cost"))["total"]
    assert recorded == Decimal("30.00")  # what the page said is what was billed


def test_a_waiting_lease_shows_the_estimate(frozen, client, alice, vision, a100, small_pool):
    ask(alice, vision, a100, count=4, duration=hours(2))
    ask(alice, vision, a100, count=4, duration=hours(2))
    waiting = ask(alice, vision, a100, count=1, duration=hours(3))
    cost = lease_cost(waiting, now=T0)
    assert cost["estimated"] and cost["to_end"] == Decimal("30.00") and cost["so_far"] == 0
    client.force_login(alice)
    page = client.get(f"/leases/{waiting.pk}/").content.decode()
    assert 'data-cost="so-far"' not in page and 'data-cost="to-end">CNY 30.00' in page
