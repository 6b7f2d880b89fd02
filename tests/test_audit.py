"""Changes to quotas, limits and the pool leave an audit entry with who and when."""

from datetime import timedelta
from decimal import Decimal

from django.utils import timezone

from leasing.lifecycle import maintenance
from leasing.teams import services as team_services
from portal.models import AuditEntry, Membership
from tests.factories import CardModelFactory, make_node


def test_quota_limit_and_pool_changes_are_audited(alice, lena, ops, vision):
    model = CardModelFactory(slug="audit-a100")
    node = make_node(model, cards=1, domains=1, hostname="audit")
    team_services.quota_set(
        user=ops,
        team=vision,
        card_model=model,
        max_concurrent_cards=4,
        card_hours_per_month=Decimal(100),
    )
    team_services.quota_replace(
        user=ops, team=vision, rules=[{"card_model": model, "max_concurrent_cards": 8}]
    )
    membership = Membership.objects.get(user=alice, team=vision)
    team_services.member_limit_set(
        user=lena, membership=membership, card_model=None, max_concurrent_cards=2
    )
    maintenance.node_drain(user=ops, node=node, drain_at=timezone.now() + timedelta(hours=1))
    maintenance.card_mark_faulty(user=ops, card=node.cards.get(), note="XID 48")
    entries = list(
        AuditEntry.objects.order_by("pk").values_list("actor__username", "action", "target")
    )
    assert [(actor, action) for actor, action, _ in entries] == [
        ("ops", "quota_set"),
        ("ops", "quota_replace"),
        ("lena", "member_limit_set"),
        ("ops", "node_drain"),
        ("ops", "card_faulty"),
    ]
    assert AuditEntry.objects.get(action="quota_set").data["card_hours_per_month"] == "100"
    assert AuditEntry.objects.get(action="card_faulty").data == {"note": "XID 48"}


def test_refused_changes_leave_no_entry(alice, vision):
    import pytest
    from django.core.exceptions import PermissionDenied

    with pytest.raises(PermissionDenied):
        team_services.quota_set(user=alice, team=vision, card_model=None, max_concurrent_cards=99)
    assert not AuditEntry.objects.exists()
