"""Sign-in against a real OpenLDAP (slapd): the login page and the token endpoint, wrong
passwords and the shared lockout, StartTLS, a disabled account, a name a local account holds,
and what the directory says about the person (Unix account, teams from groups)."""

from __future__ import annotations

import pytest
from allauth.account.models import EmailAddress
from django.contrib.auth import get_user_model
from django.test import Client

from portal.models import DirectoryAccount, Membership
from portal.tokens.models import ApiToken
from tests.factories import UserFactory
from tests.identity import slapd

TOKEN_URL = "/api/v1/auth/token/"
pytestmark = pytest.mark.django_db


def web_login(client, login, password):
    return client.post("/accounts/login/", {"login": login, "password": password})


def token_login(login, password, ip="198.51.100.7"):
    return Client().post(
        TOKEN_URL,
        {"username": login, "password": password},
        content_type="application/json",
        REMOTE_ADDR=ip,
        HTTP_ACCEPT_LANGUAGE="en",
    )


def test_a_directory_person_signs_in_through_the_login_page(en_client, directory, vision, settings):
    settings.ACCOUNT_EMAIL_VERIFICATION = "mandatory"  # the directory's address counts
    response = web_login(en_client, "dana", "dana-pw")
    assert response.status_code == 302
    user = get_user_model().objects.get(username="dana")
    assert en_client.session["_auth_user_id"] == str(user.pk)
    assert (user.email, user.first_name, user.last_name) == ("dana@example.com", "Dana", "Wu")
    assert not user.has_usable_password()
    assert EmailAddress.objects.get(user=user).verified
    account = DirectoryAccount.objects.get(user=user)
    assert (account.source, account.dn) == ("ldap", f"uid=dana,{slapd.PEOPLE}")
    assert (account.uid, account.uid_number, account.gid_number) == ("dana", 20001, 20001)
    assert (account.home, account.shell) == ("/home/dana", "/bin/bash")
    assert account.groups == ["gpu-vision"]
    membership = Membership.objects.get(user=user)
    assert (membership.team, membership.role, membership.source) == (vision, "member", "directory")


def test_groups_give_roles_and_several_teams(en_client, directory, vision, nlp):
    assert web_login(en_client, "erin", "erin-pw").status_code == 302
    roles = {
        (m.team.slug, m.role)
        for m in Membership.objects.filter(user__username="erin").select_related("team")
    }
    assert roles == {("vision", "lead"), ("nlp", "member")}


def test_the_token_endpoint_signs_in_against_the_directory(directory, vision):
    response = token_login("dana", "dana-pw")
    assert response.status_code == 200, response.content
    token = response.json()["token"]
    me = Client().get("/api/v1/leases/", HTTP_AUTHORIZATION=f"Token {token}")
    assert me.status_code == 200
    assert ApiToken.objects.get().user.username == "dana"


def test_a_wrong_password_is_refused_at_both_doors(en_client, directory):
    assert b"not correct" in web_login(en_client, "dana", "nope").content
    assert token_login("dana", "nope").status_code == 400
    assert "_auth_user_id" not in en_client.session
    assert not get_user_model().objects.filter(username="dana").exists()


def test_wrong_directory_passwords_lock_both_doors(en_client, directory, settings):
    settings.ACCOUNT_RATE_LIMITS = {"login_failed": "10/m/ip,5/5m/key"}
    for n in range(3):
        assert b"not correct" in web_login(en_client, "dana", f"wrong-{n}").content
    for n in range(2):
        assert token_login("dana", "wrong", ip=f"203.0.113.{n}").status_code == 400
    # The right password no longer helps, at either door.
    locked = token_login("dana", "dana-pw", ip="203.0.113.99")
    assert locked.status_code == 429
    assert "Too many failed login attempts" in locked.json()["detail"]
    other_browser = Client(HTTP_ACCEPT_LANGUAGE="en")
    assert b"Too many failed login attempts" in web_login(other_browser, "dana", "dana-pw").content
    assert not ApiToken.objects.exists()


def test_starttls_with_the_servers_ca(en_client, directory, settings):
    settings.LDAP_AUTH_USE_TLS = True
    assert web_login(en_client, "dana", "dana-pw").status_code == 302


def test_starttls_refuses_a_server_it_cannot_verify(en_client, directory, settings, tmp_path):
    """The server's certificate is checked: against another CA, StartTLS fails and so does
    the sign-in (ldap3 alone would not check at all)."""
    slapd._certificates(tmp_path)  # a CA that did not sign the server's certificate
    settings.LDAP_AUTH_USE_TLS = True
    settings.LDAP_AUTH_TLS_ARGS = {
        **settings.LDAP_AUTH_TLS_ARGS,
        "ca_certs_file": str(tmp_path / "ca.pem"),
    }
    assert web_login(en_client, "dana", "dana-pw").status_code == 200
    assert not get_user_model().objects.filter(username="dana").exists()


def test_a_disabled_account_cannot_sign_in(en_client, directory):
    """frank carries pwdAccountLockedTime (OpenLDAP's password policy): slapd refuses him."""
    assert b"not correct" in web_login(en_client, "frank", "frank-pw").content
    assert token_login("frank", "frank-pw").status_code == 400
    assert not get_user_model().objects.filter(username="frank").exists()


def test_a_local_account_keeps_its_name(en_client, directory):
    """The directory has an alice too; the local alice is not taken over by it."""
    local = UserFactory(username="alice", email="alice@local.example")
    assert b"not correct" in web_login(en_client, "alice", "alice-ldap-pw").content
    assert token_login("alice", "alice-ldap-pw").status_code == 400
    local.refresh_from_db()
    assert local.email == "alice@local.example" and local.has_usable_password()
    assert not DirectoryAccount.objects.exists()
    # The local password still works.
    assert web_login(Client(), "alice", "pw-for-tests").status_code == 302


def test_an_account_an_earlier_ldap_sign_in_made_is_taken_up(en_client, directory):
    earlier = UserFactory(username="dana")
    earlier.set_unusable_password()
    earlier.save()
    assert web_login(en_client, "dana", "dana-pw").status_code == 302
    assert DirectoryAccount.objects.get().user == earlier


def test_the_unix_account_the_session_mapping_reads(en_client, directory, vision):
    from portal.directory import UnixAccount, unix_account

    assert web_login(en_client, "dana", "dana-pw").status_code == 302
    dana = get_user_model().objects.get(username="dana")
    assert unix_account(dana) == UnixAccount("dana", 20001, 20001, "/home/dana", "/bin/bash")
    assert unix_account(UserFactory(username="local-only")) is None


def test_a_directory_that_is_down_is_a_refusal(en_client, directory, settings):
    """Every server down: the sign-in is refused (the library's default pool would retry
    for ever), and a local account still signs in."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    settings.LDAP_AUTH_URL = [f"ldap://127.0.0.1:{closed}"]
    assert b"not correct" in web_login(en_client, "dana", "dana-pw").content
    UserFactory(username="local-lu")
    assert web_login(Client(), "local-lu", "pw-for-tests").status_code == 302
