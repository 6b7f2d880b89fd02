"""Leavers and teams from groups without a directory server: an operator's deactivation makes
a leaver, the rule is safe to run twice, team maps fail loudly, and (property) the directory's
memberships follow the groups while the ones made by hand never move."""

from __future__ import annotations

import pytest
from django.core.exceptions import ImproperlyConfigured
from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from leasing.directory.services import account_leave, teams_apply
from leasing.models import Notification
from portal.directory_map import leaver_rule, parse_team_map
from portal.models import AuditEntry, Membership
from portal.tokens.models import ApiToken
from portal.tokens.services import token_create
from tests.factories import MembershipFactory, TeamFactory, UserFactory


def test_an_operator_deactivating_an_account_makes_a_leaver(
    alice, lena, django_capture_on_commit_callbacks
):
    token_create(user=alice, name="ci")
    with django_capture_on_commit_callbacks(execute=True):
        alice.is_active = False
        alice.save()
    assert not ApiToken.objects.filter(user=alice).exists()
    entry = AuditEntry.objects.get(action="account_leave", target="alice")
    assert entry.data["why"] == "deactivated" and entry.data["tokens"] == 1
    notice = Notification.objects.get(user=lena, kind="directory")
    assert "alice" in notice.title


def test_saving_an_active_account_changes_nothing(alice, django_capture_on_commit_callbacks):
    token_create(user=alice, name="ci")
    with django_capture_on_commit_callbacks(execute=True):
        alice.first_name = "Alice"
        alice.save()
    assert ApiToken.objects.filter(user=alice).exists()
    assert not AuditEntry.objects.filter(action="account_leave").exists()


def test_a_team_whose_last_lead_leaves_is_flagged_to_operators(lena, vision, ops):
    account_leave(user=lena, why="disabled")
    assert AuditEntry.objects.filter(action="directory_last_lead_kept", target="vision").exists()
    assert Notification.objects.filter(user=ops, kind="directory").count() == 1


def test_leaving_twice_is_safe(alice, lena):
    token_create(user=alice, name="ci")
    first = account_leave(user=alice, why="removed")
    second = account_leave(user=alice, why="removed")
    assert (first["tokens"], second["tokens"]) == (1, 0)
    alice.refresh_from_db()
    assert not alice.is_active


@pytest.mark.parametrize(
    "raw",
    ["gpu-vision", "gpu-vision=", "=vision", "gpu-vision=vision:owner"],
)
def test_a_bad_team_map_fails_loudly(raw):
    with pytest.raises(ImproperlyConfigured, match="CARDPOOL_DIRECTORY_TEAMS"):
        parse_team_map(raw)


def test_the_team_map_and_the_leaver_rule():
    assert parse_team_map(" a=vision, b=vision:lead,a=nlp ") == {
        "a": [("vision", "member"), ("nlp", "member")],
        "b": [("vision", "lead")],
    }
    assert parse_team_map("") == {}
    with pytest.raises(ImproperlyConfigured, match="CARDPOOL_LEAVER_LEASES"):
        leaver_rule("keep")


GROUPS = ["g-a", "g-a-lead", "g-b", "g-c"]
MAP = "g-a=ta,g-a-lead=ta:lead,g-b=tb,g-c=tc"


@given(
    steps=st.lists(st.sets(st.sampled_from(GROUPS)), min_size=1, max_size=5),
    manual=st.sets(st.sampled_from(["ta", "tb", "tc"])),
)
@hsettings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
def test_directory_memberships_follow_the_groups_and_manual_ones_stay(db, settings, steps, manual):
    settings.CARDPOOL_DIRECTORY = {**settings.CARDPOOL_DIRECTORY, "TEAMS": parse_team_map(MAP)}
    Membership.objects.all().delete()
    teams = {slug: TeamFactory(slug=slug, name=slug) for slug in ("ta", "tb", "tc")}
    keeper = UserFactory(username="keeper")  # every team keeps another lead
    for team in teams.values():
        MembershipFactory(user=keeper, team=team, role=Membership.Role.LEAD)
    person = UserFactory(username="person")
    for slug in manual:
        MembershipFactory(user=person, team=teams[slug])
    for groups in steps:
        teams_apply(user=person, groups=sorted(groups))
        rows = {
            m.team.slug: m for m in Membership.objects.filter(user=person).select_related("team")
        }
        wanted = {}
        for group in groups:
            for slug, role in parse_team_map(MAP)[group]:
                wanted[slug] = "lead" if "lead" in (role, wanted.get(slug)) else role
        for slug in manual:
            assert (rows[slug].source, rows[slug].role) == ("manual", "member")
        directory = {slug: m.role for slug, m in rows.items() if m.source == "directory"}
        assert directory == {slug: role for slug, role in wanted.items() if slug not in manual}


def test_a_lead_cannot_remove_what_the_directory_gave(client, lena, vision):
    """The directory's memberships are the directory's: the lead is told where to change it,
    and the team page marks them and offers no "Remove"."""
    from django.core.exceptions import ValidationError
    from django.utils import translation

    from leasing.teams.services import membership_remove

    dana = UserFactory(username="dana")
    from_group = MembershipFactory(user=dana, team=vision, source=Membership.Source.DIRECTORY)
    with translation.override("en"), pytest.raises(ValidationError, match="directory group"):
        membership_remove(user=lena, membership=from_group)
    assert Membership.objects.filter(pk=from_group.pk).exists()
    client.force_login(lena)
    page = client.get(f"/teams/{vision.slug}/", HTTP_ACCEPT_LANGUAGE="en").content.decode()
    row = page[page.index('data-member="dana"') :].split("</tr>")[0]
    assert 'data-source="directory"' in row and 'name="remove"' not in row


def test_the_periodic_task_skips_a_directory_it_cannot_read(monkeypatch, caplog):
    from leasing.directory import sync, tasks
    from leasing.enqueue import task_named

    assert task_named("leasing.tasks.directory_sync").name == "leasing.tasks.directory_sync"

    def unreadable():
        raise ConnectionError("cannot bind")

    monkeypatch.setattr(sync, "read_people", unreadable)
    assert tasks.directory_sync() is None
    assert "directory sync skipped" in caplog.text


def test_the_admin_shows_the_directory_account_and_membership_sources(client, vision):
    from django.utils import timezone

    from portal.models import DirectoryAccount

    dana = UserFactory(username="dana")
    MembershipFactory(user=dana, team=vision, source=Membership.Source.DIRECTORY)
    DirectoryAccount.objects.create(
        user=dana,
        source="ldap",
        uid="dana",
        uid_number=20001,
        home="/home/dana",
        seen_at=timezone.now(),
    )
    client.force_login(UserFactory(username="root", is_staff=True, is_superuser=True))
    user_page = client.get(f"/admin/auth/user/{dana.pk}/change/", HTTP_ACCEPT_LANGUAGE="en")
    assert user_page.status_code == 200 and b"/home/dana" in user_page.content
    team_page = client.get(f"/admin/portal/team/{vision.pk}/change/", HTTP_ACCEPT_LANGUAGE="en")
    assert team_page.status_code == 200 and b"From the directory" in team_page.content
