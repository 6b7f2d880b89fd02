"""Sign-in against the site's LDAP directory (django-python3-ldap, on the pure-Python ldap3).

Enabled only when CARDPOOL_LDAP_URL is set; portal/settings.py reads the rest of the
CARDPOOL_LDAP_* variables and docs/operations.md lists them.
"""

from __future__ import annotations

from django.core.exceptions import ImproperlyConfigured

BACKEND = "django_python3_ldap.auth.LDAPBackend"

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


def sync_user_relations(user, ldap_attributes) -> None:
    """After each LDAP sign-in: the user has a profile, and the directory's email counts as
    verified (the directory is the authority), so mandatory email verification does not
    stop directory users."""
    from allauth.account.models import EmailAddress

    from portal.models import Profile

    Profile.objects.get_or_create(user=user)
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
