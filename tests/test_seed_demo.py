"""seed_demo: the demo pool, teams and users; running it twice changes nothing."""

from django.contrib.auth import get_user_model
from django.core.management import call_command

from inventory.models import Card, CardModel, Node, Region
from leasing.models import Lease
from portal.models import Membership


def snapshot():
    return (
        Region.objects.count(),
        Node.objects.count(),
        Card.objects.count(),
        Lease.objects.count(),
        get_user_model().objects.count(),
        Membership.objects.count(),
    )


def test_seed_demo_is_idempotent_and_complete(db, settings):
    settings.CARDPOOL = {**settings.CARDPOOL, "DEMO_PASSWORD": "pw-demo"}
    call_command("seed_demo")
    first = snapshot()
    call_command("seed_demo")
    assert snapshot() == first
    vendors = set(CardModel.objects.filter(cards__isnull=False).values_list("vendor", flat=True))
    assert len(vendors) >= 6
    assert Region.objects.filter(parent__isnull=False).exists()
    roles = {
        (m.user.username, m.team.slug, m.role)
        for m in Membership.objects.select_related("user", "team")
    }
    assert roles == {
        ("alice", "vision", "member"),
        ("lena", "vision", "lead"),
        ("bob", "nlp", "member"),
        ("chen", "vision", "member"),
    }
    users = {u.username: u for u in get_user_model().objects.select_related("profile")}
    assert users["fin"].profile.is_finance and users["ops"].profile.is_operator
    assert all(
        users[name].check_password("pw-demo")
        for name in ("alice", "lena", "bob", "chen", "fin", "ops")
    )
    assert Lease.objects.exists()
    from leasing.models import MemberLimit, Quota

    assert Quota.objects.filter(team__slug="vision").count() == 2
    assert MemberLimit.objects.filter(membership__user__username="alice").exists()
    from leasing.choices import LeaseStatus
    from leasing.models import UsageRecord

    assert Lease.objects.filter(status=LeaseStatus.ENDED).count() >= 30  # history for the reports
    assert UsageRecord.objects.exists()
    assert Lease.objects.filter(status=LeaseStatus.PROVISIONING).exists()  # and some running now


def test_demo_users_sign_in_with_username_or_email(client, db):
    call_command("seed_demo")
    for login in ("alice", "alice@example.com"):
        response = client.post("/accounts/login/", {"login": login, "password": "cardpool-demo"})
        assert response.status_code == 302, login
        assert client.get("/").status_code == 200
        client.logout()
    wrong = client.post("/accounts/login/", {"login": "alice", "password": "nope"})
    assert wrong.status_code == 200
