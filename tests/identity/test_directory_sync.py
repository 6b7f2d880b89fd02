"""The periodic directory sync against the real slapd: a group change becomes a team change
after one sync, a lead's manual memberships are left alone, the last lead is kept and
flagged, and a person disabled or removed in the directory loses access at the next sync."""

from __future__ import annotations

from urllib.parse import urlsplit

import ldap3
import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.test import Client

from leasing.choices import LeaseStatus
from leasing.directory import sync
from leasing.lifecycle import provisioning
from leasing.models import LeaseEvent, Notification, SshKey
from leasing.workbench import keys, sessions
from leasing.workbench.views import proxy_secret
from portal.models import AuditEntry, DirectoryAccount, Membership
from tests.factories import CardModelFactory, MembershipFactory, UserFactory, make_node
from tests.identity.conftest import dn, group
from tests.leasing.conftest import ask

ED25519 = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGyQ0wKOm9WJ0ctIqAavyfmTfNOl6lEs0YgxRoYpOtOS"
pytestmark = pytest.mark.django_db


def sign_in(login: str, password: str) -> Client:
    browser = Client(HTTP_ACCEPT_LANGUAGE="en")
    response = browser.post("/accounts/login/", {"login": login, "password": password})
    assert response.status_code == 302, response.content[-500:]
    return browser


def memberships(username: str) -> set[tuple[str, str, str]]:
    return {
        (m.team.slug, m.role, m.source)
        for m in Membership.objects.filter(user__username=username).select_related("team")
    }


def test_a_group_change_is_a_team_change_after_one_sync(directory, vision, nlp):
    sign_in("dana", "dana-pw")
    assert memberships("dana") == {("vision", "member", "directory")}
    directory.modify(group("gpu-vision"), {"member": [(ldap3.MODIFY_DELETE, [dn("dana")])]})
    directory.modify(group("gpu-nlp"), {"member": [(ldap3.MODIFY_ADD, [dn("dana")])]})
    assert memberships("dana") == {("vision", "member", "directory")}  # not before the sync

    counts = sync.directory_sync_run()

    assert memberships("dana") == {("nlp", "member", "directory")}
    assert counts["added"] >= 1 and counts["removed"] == 1
    actions = set(AuditEntry.objects.filter(data__user="dana").values_list("action", "target"))
    assert {
        ("directory_membership_remove", "vision"),
        ("directory_membership_add", "nlp"),
    } <= actions
    assert DirectoryAccount.objects.get(user__username="dana").groups == ["gpu-nlp"]


def test_the_sync_brings_in_mapped_people_who_never_signed_in(directory, vision, nlp):
    call_command("ldap_sync_users", stdout=open("/dev/null", "w"))  # noqa: SIM115
    assert memberships("erin") == {("vision", "lead", "directory"), ("nlp", "member", "directory")}
    assert memberships("dana") == {("vision", "member", "directory")}
    # frank is disabled; the directory's alice is in no mapped group.
    assert not get_user_model().objects.filter(username__in=["frank", "alice"]).exists()


def test_a_leads_manual_membership_is_left_alone(directory, vision, nlp, lena):
    sign_in("dana", "dana-pw")
    MembershipFactory(user=get_user_model().objects.get(username="dana"), team=nlp)
    directory.modify(group("gpu-vision"), {"member": [(ldap3.MODIFY_DELETE, [dn("dana")])]})
    sync.directory_sync_run()
    assert memberships("dana") == {("nlp", "member", "manual")}


def test_the_directory_does_not_take_a_teams_last_lead(directory, vision, nlp, ops):
    sign_in("erin", "erin-pw")
    directory.delete(group("gpu-vision-leads"))
    directory.modify(group("gpu-vision"), {"member": [(ldap3.MODIFY_DELETE, [dn("erin")])]})
    sync.directory_sync_run()
    assert ("vision", "lead", "directory") in memberships("erin")
    assert AuditEntry.objects.filter(action="directory_last_lead_kept", target="vision").exists()
    flag = Notification.objects.get(user=ops, kind="directory")
    assert "vision" in flag.title.lower() or "Vision" in flag.title
    sync.directory_sync_run()  # told once
    assert Notification.objects.filter(user=ops, kind="directory").count() == 1


@pytest.fixture
def a10(db):
    model = CardModelFactory(slug="dir-a10", name="A10", vendor="nvidia")
    make_node(model, cards=4, hostname="dir-node")
    return model


def _working(user, team, a10, django_capture_on_commit_callbacks):
    """An active lease with a running session, a waiting request, an SSH key and a token."""
    lease = ask(user, team, a10)
    assert provisioning.provision_step(lease_id=lease.pk)
    lease.refresh_from_db()
    with django_capture_on_commit_callbacks(execute=True):
        session = sessions.session_open(lease=lease, user=user)
    sessions.session_running(session_id=session.pk, address="10.0.0.9")
    waiting = ask(user, team, a10, count=4)
    keys.ssh_key_add(user=user, public_key=ED25519, name="laptop")
    return lease, session, waiting


def test_a_person_disabled_in_the_directory_loses_access_at_the_next_sync(
    directory, vision, a10, sent_tasks, django_capture_on_commit_callbacks
):
    erin = UserFactory(username="lead-erin")
    MembershipFactory(user=erin, team=vision, role=Membership.Role.LEAD)
    browser = sign_in("dana", "dana-pw")
    dana = get_user_model().objects.get(username="dana")
    token = (
        Client()
        .post(
            "/api/v1/auth/token/",
            {"username": "dana", "password": "dana-pw"},
            content_type="application/json",
        )
        .json()["token"]
    )
    lease, session, waiting = _working(dana, vision, a10, django_capture_on_commit_callbacks)
    assert waiting.status in (LeaseStatus.QUEUED, LeaseStatus.SCHEDULED)
    assert Client().get("/api/v1/leases/", HTTP_AUTHORIZATION=f"Token {token}").status_code == 200
    # dana's browser opens the session: a ticket from the portal for the session's origin.
    ticket = urlsplit(browser.get(f"/leases/{lease.pk}/session/go/")["Location"])
    origin = Client(HTTP_HOST=ticket.netloc)
    assert origin.get(f"{ticket.path}?{ticket.query}").status_code == 302  # the pass is set

    directory.modify(
        dn("dana"), {"pwdAccountLockedTime": [(ldap3.MODIFY_REPLACE, ["000001010000Z"])]}
    )
    with django_capture_on_commit_callbacks(execute=True):
        counts = sync.directory_sync_run()

    assert counts["left"] == 1
    assert Client().get("/api/v1/leases/", HTTP_AUTHORIZATION=f"Token {token}").status_code == 401
    assert browser.get("/").status_code == 302  # the web session is over
    gate = browser.get(
        "/sessions/auth/",
        HTTP_X_ORIGINAL_URI=f"/sessions/{session.pk}/lab",
        HTTP_X_CARDPOOL_PROXY=proxy_secret(),
    )
    assert gate.status_code == 403  # the proxy lets nothing through
    # The tab dana had open on the session's origin: the session is gone (410), not a sign-in.
    assert origin.get(f"/sessions/{session.pk}/lab").status_code == 410
    session.refresh_from_db()
    assert session.status == "ended"
    assert "leasing.tasks.session_stop" in [t.name for t in sent_tasks]  # its processes
    assert not SshKey.objects.filter(user=dana).exists()  # off the nodes at the next round
    lease.refresh_from_db()
    waiting.refresh_from_db()
    assert (
        lease.status in (LeaseStatus.RELEASING, LeaseStatus.ENDED) and lease.end_reason == "admin"
    )
    assert waiting.status == LeaseStatus.CANCELLED
    dana.refresh_from_db()
    assert not dana.is_active
    account = DirectoryAccount.objects.get(user=dana)
    assert account.left_reason == "disabled" and account.left_at is not None
    entry = AuditEntry.objects.get(action="account_leave", target="dana")
    assert entry.data["why"] == "disabled" and entry.data["ended"] == [lease.pk]
    assert entry.data["cancelled"] == [waiting.pk] and entry.data["tokens"] == 1
    told = Notification.objects.get(user=erin, kind="directory")
    assert "dana" in told.title
    # Signing in is refused at once, too.
    assert (
        b"not correct"
        in Client(HTTP_ACCEPT_LANGUAGE="en")
        .post("/accounts/login/", {"login": "dana", "password": "dana-pw"})
        .content
    )

    # Let back by the directory: the account works again, the old session stays gone (410).
    directory.modify(dn("dana"), {"pwdAccountLockedTime": [(ldap3.MODIFY_DELETE, [])]})
    assert sync.directory_sync_run()["returned"] == 1
    again = sign_in("dana", "dana-pw")
    assert again.get(f"/sessions/{session.pk}/lab").status_code == 410
    assert Client().get("/api/v1/leases/", HTTP_AUTHORIZATION=f"Token {token}").status_code == 401


def test_a_disabled_persons_sign_in_attempt_makes_them_leave_at_once(directory, vision):
    sign_in("dana", "dana-pw")
    token = (
        Client()
        .post(
            "/api/v1/auth/token/",
            {"username": "dana", "password": "dana-pw"},
            content_type="application/json",
        )
        .json()["token"]
    )
    directory.modify(
        dn("dana"), {"pwdAccountLockedTime": [(ldap3.MODIFY_REPLACE, ["000001010000Z"])]}
    )
    assert Client().get("/api/v1/leases/", HTTP_AUTHORIZATION=f"Token {token}").status_code == 200

    refused = Client(HTTP_ACCEPT_LANGUAGE="en").post(
        "/accounts/login/", {"login": "dana", "password": "dana-pw"}
    )

    assert b"not correct" in refused.content
    assert Client().get("/api/v1/leases/", HTTP_AUTHORIZATION=f"Token {token}").status_code == 401
    assert DirectoryAccount.objects.get(user__username="dana").left_reason == "disabled"


def test_a_wrong_password_of_someone_still_there_changes_nothing(directory, vision):
    sign_in("dana", "dana-pw")
    Client(HTTP_ACCEPT_LANGUAGE="en").post("/accounts/login/", {"login": "dana", "password": "x"})
    assert get_user_model().objects.get(username="dana").is_active
    assert not AuditEntry.objects.filter(action="account_leave").exists()


def test_a_person_removed_from_the_directory_leaves_their_leases_to_the_lead(
    directory, vision, a10, settings, django_capture_on_commit_callbacks
):
    settings.CARDPOOL_DIRECTORY = {**settings.CARDPOOL_DIRECTORY, "LEAVER_LEASES": "lead"}
    lead = UserFactory(username="lead-lee")
    MembershipFactory(user=lead, team=vision, role=Membership.Role.LEAD)
    sign_in("dana", "dana-pw")
    dana = get_user_model().objects.get(username="dana")
    lease, session, waiting = _working(dana, vision, a10, django_capture_on_commit_callbacks)

    directory.delete(dn("dana"))
    sync.directory_sync_run()

    lease.refresh_from_db()
    assert (lease.user, lease.status) == (lead, LeaseStatus.ACTIVE)
    assert LeaseEvent.objects.filter(lease=lease, kind="passed_to_lead").exists()
    session.refresh_from_db()
    assert session.status == "ended"  # the leaver's processes end before the lead has the cards
    waiting.refresh_from_db()
    assert waiting.status == LeaseStatus.CANCELLED
    assert DirectoryAccount.objects.get(user=dana).left_reason == "removed"
    notice = Notification.objects.get(user=lead, kind="directory")
    assert str(lease.pk) in notice.body


def test_out_of_the_group_out_of_the_team_even_with_open_leases(
    directory, vision, a10, django_capture_on_commit_callbacks
):
    """The directory's word wins over "nobody leaves with open leases": the running lease
    runs to its end on the team's account, the request not started is cancelled."""
    sign_in("dana", "dana-pw")
    dana = get_user_model().objects.get(username="dana")
    lease, session, waiting = _working(dana, vision, a10, django_capture_on_commit_callbacks)
    directory.modify(group("gpu-vision"), {"member": [(ldap3.MODIFY_DELETE, [dn("dana")])]})

    sync.directory_sync_run()

    assert memberships("dana") == set()
    lease.refresh_from_db()
    waiting.refresh_from_db()
    assert (lease.status, lease.user, lease.team) == (LeaseStatus.ACTIVE, dana, vision)
    assert waiting.status == LeaseStatus.CANCELLED
    dana.refresh_from_db()
    assert dana.is_active  # out of a team, not out of the site
    entry = AuditEntry.objects.get(action="directory_membership_remove", target="vision")
    assert entry.data["cancelled"] == [waiting.pk]


def test_a_directory_that_returns_nobody_changes_nothing(directory, vision, settings):
    sign_in("dana", "dana-pw")
    settings.LDAP_AUTH_SEARCH_BASE = "ou=nobody-here,dc=example,dc=com"
    with pytest.raises(ConnectionError):
        sync.directory_sync_run()
    assert get_user_model().objects.get(username="dana").is_active


def test_a_directory_that_cannot_be_reached_changes_nothing(directory, vision, settings):
    sign_in("dana", "dana-pw")
    settings.LDAP_AUTH_CONNECTION_PASSWORD = "not-the-password"
    with pytest.raises(ConnectionError):
        sync.directory_sync_run()
    assert get_user_model().objects.get(username="dana").is_active
