"""Sign-in against the site's LDAP directory (django-python3-ldap, on the pure-Python ldap3).

Enabled only when CARDPOOL_LDAP_URL is set; portal/settings.py reads the rest of the
CARDPOOL_LDAP_* variables and docs/operations.md lists them.
"""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.exceptions import ImproperlyConfigured
from django.utils.module_loading import import_string

BACKEND = "portal.ldap_backend.LDAPBackend"

# CARDPOOL_LDAP_USERNAME_FORMAT → how a username becomes the name to bind with.
USERNAME_FORMATS = {
    # uid=<username>,<search base>
    "openldap": "django_python3_ldap.utils.format_username_openldap",
    # DOMAIN\<username>
    "active_directory": "django_python3_ldap.utils.format_username_active_directory",
    # <username>@domain
    "active_directory_principal": (
        "django_python3_ldap.utils.format_username_active_directory_principal"
    ),
}

USER_MODEL_FIELDS = {"username", "email", "first_name", "last_name"}


def parse_user_fields(raw: str) -> dict[str, str]:
    """Parse "username=uid,email=mail,…" (user field = LDAP attribute); fail loudly."""
    fields: dict[str, str] = {}
    for item in raw.split(","):
        if not item.strip():
            continue
        field, sep, attribute = (part.strip() for part in item.partition("="))
        if not sep or not attribute or field not in USER_MODEL_FIELDS:
            raise ImproperlyConfigured(
                f"CARDPOOL_LDAP_USER_FIELDS: {item.strip()!r} is not <field>=<attribute> "
                f"with a field among {sorted(USER_MODEL_FIELDS)}"
            )
        fields[field] = attribute
    if "username" not in fields:
        raise ImproperlyConfigured(
            "CARDPOOL_LDAP_USER_FIELDS must map username (e.g. username=uid)"
        )
    return fields


def username_format(name: str) -> str:
    try:
        return USERNAME_FORMATS[name]
    except KeyError:
        raise ImproperlyConfigured(
            f"CARDPOOL_LDAP_USERNAME_FORMAT={name!r}: use one of {sorted(USERNAME_FORMATS)}"
        ) from None


def format_username(model_fields: dict) -> str:
    """The name to bind with: the site's format (CARDPOOL_LDAP_USERNAME_FORMAT), except for
    the service account (CARDPOOL_LDAP_BIND_USER), which may be given as a full DN."""
    name = model_fields.get(get_user_model().USERNAME_FIELD, "")
    service = getattr(settings, "LDAP_AUTH_CONNECTION_USERNAME", None)
    if service and name == service and "=" in service:
        return service
    site_format = getattr(
        settings,
        "CARDPOOL_LDAP_FORMAT_USERNAME",
        "django_python3_ldap.utils.format_username_openldap",
    )
    return import_string(site_format)(model_fields)


def local_name_taken(username: str) -> bool:
    """Whether *username* belongs to a local account the directory must not take over: one
    with a password of its own or a single sign-on link, and no link to the directory.
    (Accounts an earlier LDAP sign-in made have neither, and are taken up.)"""
    from allauth.socialaccount.models import SocialAccount

    from portal.models import DirectoryAccount

    user = get_user_model().objects.filter(username__iexact=username).first()
    if user is None:
        return False
    if DirectoryAccount.objects.filter(user=user, source=DirectoryAccount.Source.LDAP).exists():
        return False
    return user.has_usable_password() or SocialAccount.objects.filter(user=user).exists()


def sync_user_relations(user, ldap_attributes, *, connection, dn) -> None:
    """After each LDAP sign-in: the user has a profile, and the directory's email counts as
    verified (the directory is the authority), so mandatory email verification does not
    stop directory users. The Unix account and groups are recorded and teams follow the
    groups (leasing.directory)."""
    from allauth.account.models import EmailAddress

    from leasing.directory.services import directory_sign_in
    from portal.directory import groups_of, person_from_entry
    from portal.models import Profile

    Profile.objects.get_or_create(user=user)
    person = person_from_entry(dn or "", ldap_attributes)
    person.groups = groups_of(connection, dn=person.dn, uid=person.uid)
    directory_sign_in(user=user, person=person, source="ldap")
    if user.email:
        address = EmailAddress.objects.filter(user=user, email__iexact=user.email).first()
        if address is None:
            EmailAddress.objects.create(
                user=user,
                email=user.email,
                verified=True,
                primary=not EmailAddress.objects.filter(user=user, primary=True).exists(),
            )
        elif not address.verified:
            address.verified = True
            address.save(update_fields=["verified"])
