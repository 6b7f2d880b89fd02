"""Sign-up is closed by default; a team's lead (or an operator) invites a new member, who sets a
password through the mailed link and signs in as a member of that team."""

from __future__ import annotations

import re
import runpy
from pathlib import Path

import pytest
from allauth.account.models import EmailAddress
from django.contrib.auth import get_user_model
from django.core.exceptions import PermissionDenied, ValidationError

from portal.models import Membership
from portal.services_account import account_invite

User = get_user_model()
SETTINGS_FILE = Path(__file__).resolve().parents[2] / "portal" / "settings.py"


def settings_under(monkeypatch, **environ) -> dict:
    for name in ("CARDPOOL_ALLOW_SIGNUP", "CARDPOOL_EMAIL_VERIFICATION"):
        monkeypatch.delenv(name, raising=False)
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    return runpy.run_path(str(SETTINGS_FILE))


def test_signup_is_closed_by_default(monkeypatch):
    closed = settings_under(monkeypatch)
    assert closed["ACCOUNT_SIGNUP_ENABLED"] is False
    assert closed["ACCOUNT_PREVENT_ENUMERATION"] is True
    opened = settings_under(monkeypatch, CARDPOOL_ALLOW_SIGNUP="true")
    assert opened["ACCOUNT_SIGNUP_ENABLED"] is True
    assert opened["ACCOUNT_EMAIL_VERIFICATION"] == "mandatory"  # verify when open


def test_the_closed_signup_page_says_so(en_client, db):
    response = en_client.get("/accounts/signup/")
    assert b"Sign Up Closed" in response.content
    en_client.post(
        "/accounts/signup/",
        {
            "email": "x@example.org",
            "username": "x",
            "password1": "pw-x-9-long",
            "password2": "pw-x-9-long",
        },
    )
    assert not User.objects.filter(username="x").exists()


def test_open_signup_does_not_reveal_a_known_address(en_client, alice, settings, mailoutbox):
    settings.ACCOUNT_SIGNUP_ENABLED = True
    settings.ACCOUNT_EMAIL_VERIFICATION = "mandatory"
    data = {"password1": "a-long-passphrase-9", "password2": "a-long-passphrase-9"}
    known = en_client.post("/accounts/signup/", {**data, "email": alice.email, "username": "m1"})
    fresh = en_client.post(
        "/accounts/signup/", {**data, "email": "new@example.org", "username": "m2"}
    )
    assert known.status_code == fresh.status_code == 302
    assert known.url == fresh.url
    assert not User.objects.filter(username="m1").exists()
    assert [m.to for m in mailoutbox] == [[alice.email], ["new@example.org"]]


def link_in(mail) -> str:
    return re.search(r"https?://testserver(/\S+)", mail.body).group(1)


def test_a_lead_invites_and_the_person_sets_a_password(client, lena, vision, mailoutbox):
    client.force_login(lena)
    response = client.post(
        "/teams/vision/invite/", {"username": "dora", "email": "dora@example.org"}
    )
    assert response.status_code == 302
    dora = User.objects.get(username="dora")
    assert not dora.has_usable_password()
    assert Membership.objects.filter(user=dora, team=vision, role="member").exists()
    assert len(mailoutbox) == 1 and mailoutbox[0].to == ["dora@example.org"]

    client.logout()
    step = client.get(link_in(mailoutbox[0]))
    assert step.status_code == 302
    done = client.post(
        step.url, {"password1": "doras-own-secret-5", "password2": "doras-own-secret-5"}
    )
    assert done.status_code == 302
    dora.refresh_from_db()
    assert dora.check_password("doras-own-secret-5")
    assert EmailAddress.objects.get(user=dora).verified  # following the link proved it
    client.post("/accounts/login/", {"login": "dora", "password": "doras-own-secret-5"})
    assert client.session["_auth_user_id"] == str(dora.pk)
    assert client.get("/pool/").status_code == 200  # in a team: sees the pool


def test_only_the_teams_lead_or_an_operator_invites(alice, bob, lena, ops, vision, nlp):
    for outsider in (alice, bob):
        with pytest.raises(PermissionDenied):
            account_invite(by=outsider, team=vision, username="eve", email="eve@example.org")
    with pytest.raises(PermissionDenied):
        account_invite(by=lena, team=nlp, username="eve", email="eve@example.org")
    assert account_invite(by=ops, team=nlp, username="eve", email="eve@example.org")


@pytest.mark.parametrize(
    ("username", "email", "field"),
    [("ａｌｉｃｅ", "new@example.org", "username"), ("newbie", "ALICE@example.org", "email")],
)
def test_an_invitation_refuses_existing_people(lena, alice, vision, username, email, field):
    alice.email = "alice@example.org"
    alice.save()
    with pytest.raises(ValidationError) as caught:
        account_invite(by=lena, team=vision, username=username, email=email)
    assert field in caught.value.message_dict
    assert User.objects.count() == 2
