"""Rules kept in one place (issue: the house, second pass): each has its definition, and the
places that used to write it again now ask it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from django.conf import settings

from inventory.models import Card
from leasing.choices import (
    CANCELLABLE_STATES,
    EXTENDABLE_STATES,
    RELEASABLE_STATES,
    RESIZABLE_STATES,
    LeaseStatus,
)
from leasing.lifecycle import changes
from leasing.models import Lease
from portal import permissions
from portal.models import Membership
from tests.factories import CardFactory, MembershipFactory, TeamFactory, UserFactory

ROOT = Path(settings.BASE_DIR)
CODE = [p for d in ("portal", "inventory", "leasing") for p in (ROOT / d).rglob("*.py")]


def _code(path: Path) -> str:
    return path.read_text() if "migrations" not in path.parts else ""


def test_teams_led_by_is_the_one_query_of_a_user_s_led_teams(db):
    lead, member = UserFactory(), UserFactory()
    led, other = TeamFactory(), TeamFactory()
    MembershipFactory(user=lead, team=led, role=Membership.Role.LEAD)
    MembershipFactory(user=lead, team=other, role=Membership.Role.MEMBER)
    MembershipFactory(user=member, team=led, role=Membership.Role.MEMBER)
    assert list(permissions.teams_led_by(lead).values_list("team_id", flat=True)) == [led.pk]
    assert not permissions.teams_led_by(member).exists()
    assert permissions.leads_of(led) == [lead]
    written_again = [
        str(p.relative_to(ROOT))
        for p in CODE
        if p.name != "permissions.py"
        and re.search(r"filter\(\s*user=[\w.]+,\s*role=Membership\.Role\.LEAD", _code(p))
    ]
    assert written_again == []


def test_operators_is_the_one_query_of_the_operators(db):
    op, root, plain = UserFactory(profile__is_operator=True), UserFactory(), UserFactory()
    root.is_superuser = True
    root.save()
    UserFactory(profile__is_operator=True, is_active=False)
    assert set(permissions.operators()) == {op, root}
    assert plain not in permissions.operators()
    copies = [
        str(p.relative_to(ROOT))
        for p in CODE
        if p.name != "permissions.py" and "profile__is_operator=True" in _code(p)
    ]
    assert copies == []


def test_one_rule_of_who_sees_a_lease_and_who_works_inside_it(db):
    from datetime import timedelta

    from django.utils import timezone

    from tests.factories import CardModelFactory

    lead, holder, finance = UserFactory(), UserFactory(), UserFactory(profile__is_finance=True)
    team = TeamFactory()
    MembershipFactory(user=lead, team=team, role=Membership.Role.LEAD)
    MembershipFactory(user=holder, team=team, role=Membership.Role.MEMBER)
    now = timezone.now()
    lease = Lease.objects.create(
        user=holder,
        team=team,
        card_model=CardModelFactory(),
        count=1,
        duration=timedelta(hours=1),
        start_at=now,
        end_at=now + timedelta(hours=1),
        status=LeaseStatus.QUEUED,
        submitted_at=now,
        status_changed_at=now,
    )
    for who, sees, works in [(holder, True, True), (lead, True, False), (finance, True, False)]:
        assert Lease.objects.visible_to(who).filter(pk=lease.pk).exists() == sees
        assert Lease.objects.visible_to(who, to_work_on=True).filter(pk=lease.pk).exists() == works
    assert not Lease.objects.visible_to(UserFactory()).filter(pk=lease.pk).exists()


@pytest.mark.parametrize("status", LeaseStatus.values)
def test_lease_actions_are_the_states_the_services_accept(status):
    actions = Lease(status=status).actions
    assert actions.release == (status in RELEASABLE_STATES)
    assert actions.cancel == (status in CANCELLABLE_STATES)
    assert actions.extend == (status in EXTENDABLE_STATES)
    assert actions.resize == (status in RESIZABLE_STATES)


def test_the_services_refuse_what_lease_actions_do_not_offer(db):
    """The cancel and extend services read the same groups (and refuse the rest)."""
    source = Path(changes.__file__).read_text()
    assert "frm=list(CANCELLABLE_STATES)" in source
    assert "not in EXTENDABLE_STATES" in source


def test_no_template_compares_a_lease_s_status():
    literal = re.compile(r"lease\.status\s*(==|!=|in)\s")
    found = [
        str(p.relative_to(ROOT))
        for p in (ROOT / "templates").rglob("*.html")
        if literal.search(p.read_text())
    ]
    assert found == []


def test_one_rule_of_an_unhealthy_card(db):
    ok = CardFactory()
    hot = CardFactory(health=Card.Health.HOT)
    faulty = CardFactory(status=Card.Status.FAULTY, health=Card.Health.HOT)
    assert set(Card.objects.unhealthy()) == {hot}
    assert ok not in Card.objects.unhealthy() and faulty not in Card.objects.unhealthy()
    copies = [
        str(p.relative_to(ROOT))
        for p in CODE
        if "filter(status=Card.Status.OK).exclude(health=Card.Health.OK)" in _code(p)
        and p.name != "models.py"
    ]
    assert copies == []


def test_settings_defaults_live_in_settings_only():
    defaulted = re.compile(
        r"settings\.CARDPOOL\w*\.get\(\"[A-Z_]+\",|getattr\(settings, \"CARDPOOL"
    )
    found = [str(p.relative_to(ROOT)) for p in CODE if defaulted.search(_code(p))]
    assert found == []
    for key in ("PREEMPTIBLE_DISCOUNT", "TELEMETRY_RETENTION_HOURS", "PURPOSE_PRIORITY"):
        assert key in settings.CARDPOOL
