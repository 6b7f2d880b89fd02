"""Usernames are NFKC-normalised and unique in any case on every path that names a user:
sign-up, the admin's add and change forms, and any other save (commands, LDAP, scripts)."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.core.management import CommandError, call_command

User = get_user_model()
FULLWIDTH_ALICE = "ａｌｉｃｅ"


def signup(client, username, email):
    return client.post(
        "/accounts/signup/",
        {
            "email": email,
            "username": username,
            "password1": "a-long-passphrase-9",
            "password2": "a-long-passphrase-9",
        },
    )


@pytest.fixture
def open_signup(settings):
    settings.ACCOUNT_SIGNUP_ENABLED = True
    settings.ACCOUNT_EMAIL_VERIFICATION = "none"


@pytest.mark.parametrize("name", [FULLWIDTH_ALICE, "ALICE", "Ａｌｉｃｅ"])
def test_signup_refuses_a_look_alike(en_client, alice, open_signup, name):
    response = signup(en_client, name, "mallory@example.org")
    assert response.status_code == 200
    assert response.context["form"].errors["username"]
    assert User.objects.count() == 1


def test_signup_stores_the_plain_form(en_client, db, open_signup):
    assert signup(en_client, "ｃａｒｏｌ", "carol@example.org").status_code == 302
    assert User.objects.get().username == "carol"


@pytest.fixture
def as_admin(client, db):
    client.force_login(User.objects.create_superuser("root", "root@example.org", "pw"))
    client.defaults["HTTP_ACCEPT_LANGUAGE"] = "en"
    return client


def test_admin_cannot_add_a_look_alike(as_admin, alice):
    response = as_admin.post(
        "/admin/auth/user/add/",
        {
            "username": FULLWIDTH_ALICE,
            "password1": "x-long-pass-91",
            "password2": "x-long-pass-91",
            "usable_password": "true",
        },
    )
    assert response.status_code == 200
    assert "username" in response.context["adminform"].form.errors
    assert not User.objects.filter(username__in=[FULLWIDTH_ALICE, "alice "]).exists()


def test_admin_cannot_rename_into_a_look_alike(alice, bob):
    from portal.admin import UserAdmin

    form_class = UserAdmin.form
    data = {"username": "ＡＬＩＣＥ", "date_joined": "2026-01-01 00:00:00"}
    assert "username" in form_class(data=data, instance=bob).errors
    data["username"] = "ｂｏｂ"  # its own name, in another form, is fine
    form = form_class(data=data, instance=bob)
    assert form.is_valid(), form.errors
    assert form.cleaned_data["username"] == "bob"


def test_every_other_save_is_guarded(alice):
    with pytest.raises(ValidationError):
        User.objects.create_user(FULLWIDTH_ALICE, password="x")
    with pytest.raises(ValidationError):
        User.objects.create_user("Alice", password="x")
    dave = User.objects.create_user("Ｄａｖｅ", password="x")
    assert dave.username == "Dave"
    dave.first_name = "D"
    dave.save(update_fields=["first_name"])  # no rename: no check


def test_management_command_cannot_make_a_look_alike(alice):
    with pytest.raises(CommandError, match="username is taken"):
        call_command("createsuperuser", username="ALICE", email="x@example.org", interactive=False)
    assert User.objects.count() == 1
