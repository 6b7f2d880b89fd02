"""One username rule on every path that creates a user (issue #28): invitations, sign-up, the
admin and any other save refuse invisible, control, format and markup characters, spaces,
mixed-script look-alikes and names that look like an existing one; names in one script
(``张伟``, ``李娜``) and ``o.brien``, ``anna-maria`` pass. Names stored before the rule are
kept and listed for operators."""

from __future__ import annotations

import io

import pytest
from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.core.management import call_command
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from portal.services_account import account_invite
from portal.usernames import ALLOWED, username_check

User = get_user_model()

REFUSED = [
    "alice\u200b",  # zero-width space: shown exactly like "alice"
    "o'brien<script>",
    "z d",
    "bob\u202eevil",  # right-to-left override
    "carol\u0007",  # a control character
    "dan\u00ad",  # soft hyphen (a format character)
    "eve\u2060",  # word joiner
    "<b>frank</b>",
    "gina&amp;",
    'henry"',
    "ivy\u3000",  # ideographic space: NFKC makes it a space
    "аlice",  # Cyrillic а among Latin letters (mixed script)
]
TAKEN = ["аӏісе", "ΑLICE"]  # Cyrillic / Greek letters only, looking like "alice"
ACCEPTED = ["张伟", "李娜", "o.brien", "anna-maria", "Мария", "dev_ops+1", "bob@lab"]


def _invite(lena, vision, name):
    return account_invite(by=lena, team=vision, username=name, email=f"{abs(hash(name))}@ex.org")


@pytest.mark.parametrize("name", REFUSED + TAKEN)
def test_an_invitation_refuses(lena, alice, vision, name):
    before = User.objects.count()
    with pytest.raises(ValidationError) as caught:
        _invite(lena, vision, name)
    assert caught.value.message_dict["username"]
    assert User.objects.count() == before


@pytest.mark.parametrize("name", ACCEPTED)
def test_an_invitation_accepts(lena, alice, vision, name):
    assert _invite(lena, vision, name).username == name


@pytest.mark.parametrize("name", REFUSED + TAKEN)
def test_every_other_save_refuses(alice, name):
    with pytest.raises(ValidationError):
        User.objects.create_user(name, password="x")


@pytest.mark.parametrize("name", ["alice\u200b", "z d", "аlice", "аӏісе"])
def test_signup_refuses_with_a_message(alice, client, settings, name):
    settings.ACCOUNT_SIGNUP_ENABLED = True
    settings.ACCOUNT_EMAIL_VERIFICATION = "none"
    response = client.post(
        "/accounts/signup/",
        {
            "email": "new@example.org",
            "username": name,
            "password1": "a-long-passphrase-9",
            "password2": "a-long-passphrase-9",
        },
        HTTP_ACCEPT_LANGUAGE="en",
    )
    assert response.status_code == 200
    assert response.context["form"].errors["username"]
    assert User.objects.count() == 1


def test_the_message_names_the_character(db):
    with pytest.raises(ValidationError) as caught:
        username_check("alice\u200b")
    assert "U+200B ZERO WIDTH SPACE" in " ".join(caught.value.messages)


def test_a_name_from_before_the_rule_is_kept_and_listed(db, alice):
    User.objects.bulk_create([User(username="old\u200bname"), User(username="аlice")])
    kept = User.objects.get(username="old\u200bname")
    kept.first_name = "Kept"
    kept.save()  # a full save of an unchanged name is fine
    kept.refresh_from_db()
    assert kept.username == "old\u200bname"
    out, err = io.StringIO(), io.StringIO()
    call_command("usernames_check", stdout=out, stderr=err)
    lines = out.getvalue().splitlines()
    assert len(lines) == 2
    assert "old\\u200bname" in lines[0] and "U+200B" in lines[0]
    assert "\\u0430lice" in lines[1]
    assert "2 username(s)" in err.getvalue()
    with pytest.raises(ValidationError):  # renaming into another bad name is refused
        kept.username = "still\u200bbad"
        kept.save()


@given(st.text(max_size=20))
@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
def test_any_text_is_a_clean_name_or_a_clear_refusal(db, text):
    try:
        name = username_check(text)
    except ValidationError as exc:
        assert exc.messages
    else:
        assert ALLOWED.match(name) and len(name) <= 150


def test_a_directory_name_the_rule_refuses_is_no_sign_in_and_no_account(db, monkeypatch):
    """LDAP sign-in makes the account on the way (the pre_save guard checks it): a name the
    rule refuses is a refused sign-in, not a 500."""
    from django_python3_ldap.auth import LDAPBackend as Library

    from portal.ldap_backend import LDAPBackend

    def make(self, *args, **kwargs):
        return User.objects.create_user("z d")

    monkeypatch.setattr(Library, "authenticate", make)
    assert LDAPBackend().authenticate(None, username="z d", password="x") is None
    assert not User.objects.exists()
