"""A password change or reset ends the person's API tokens (CARDPOOL_REVOKE_TOKENS_ON_PASSWORD_CHANGE,
on by default); a hash upgrade on login does not."""

from __future__ import annotations

import pytest
from django.contrib.auth.hashers import make_password

from portal.tokens.models import ApiToken
from portal.tokens.services import token_create


@pytest.fixture
def api(api):
    api.credentials(HTTP_ACCEPT_LANGUAGE="en")
    return api


def use(api, key):
    api.credentials(HTTP_AUTHORIZATION=f"Token {key}", HTTP_ACCEPT_LANGUAGE="en")
    return api.get("/api/v1/leases/")


def change_password(client, user):
    client.force_login(user)
    return client.post(
        "/accounts/password/change/",
        {
            "oldpassword": "pw-for-tests",
            "password1": "brand-new-secret-7",
            "password2": "brand-new-secret-7",
        },
    )


def test_revocation_is_on_by_default():
    from django.conf import settings

    assert settings.CARDPOOL_REVOKE_TOKENS_ON_PASSWORD_CHANGE is True


def test_changing_the_password_revokes_the_tokens(en_client, api, alice, bob):
    _token, key = token_create(user=alice, name="ci")
    _other, bobs_key = token_create(user=bob, name="ci")
    assert use(api, key).status_code == 200
    assert change_password(en_client, alice).status_code == 302
    alice.refresh_from_db()
    assert alice.check_password("brand-new-secret-7")
    assert use(api, key).status_code == 401
    assert not ApiToken.objects.filter(user=alice).exists()
    assert use(api, bobs_key).status_code == 200  # only the changer's tokens


def test_admin_or_script_set_password_revokes_too(alice):
    token_create(user=alice, name="ci")
    alice.set_password("another-secret-8")
    alice.save()
    assert not ApiToken.objects.filter(user=alice).exists()


def test_a_site_may_keep_tokens(en_client, api, alice, settings):
    settings.CARDPOOL_REVOKE_TOKENS_ON_PASSWORD_CHANGE = False
    _token, key = token_create(user=alice, name="ci")
    assert change_password(en_client, alice).status_code == 302
    assert use(api, key).status_code == 200


def test_a_hash_upgrade_on_login_keeps_tokens(alice, settings):
    settings.PASSWORD_HASHERS = [
        "django.contrib.auth.hashers.PBKDF2PasswordHasher",
        "django.contrib.auth.hashers.MD5PasswordHasher",
    ]
    alice.password = make_password("pw-for-tests", hasher="md5")
    alice.save()
    token_create(user=alice, name="ci")
    assert alice.check_password("pw-for-tests")  # rehashes to PBKDF2 and saves
    alice.refresh_from_db()
    assert alice.password.startswith("pbkdf2_sha256$")
    assert ApiToken.objects.filter(user=alice).count() == 1


def test_other_saves_keep_tokens(alice):
    token_create(user=alice, name="ci")
    alice.first_name = "Alice"
    alice.save()
    assert ApiToken.objects.filter(user=alice).count() == 1
