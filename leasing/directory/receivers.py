"""Where the directory rules meet Django's and allauth's events (connected in
LeasingConfig.ready): an operator deactivating an account makes its holder a leaver, and each
OpenID Connect sign-in brings the provider's groups claim to the person's teams."""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import transaction
from django.db.models.signals import post_save, pre_save

from leasing.directory.services import account_leave, directory_sign_in
from portal.directory import Person


def _remember_active(sender, instance, update_fields=None, **kwargs) -> None:
    if instance.pk is None or (update_fields is not None and "is_active" not in update_fields):
        instance._was_active = None  # new, or a save that leaves is_active alone (last_login)
        return
    instance._was_active = (
        sender.objects.filter(pk=instance.pk).values_list("is_active", flat=True).first()
    )


def _deactivated(sender, instance, created, **kwargs) -> None:
    """Saved inactive after being active (the admin's "active" box, any service): a leaver."""
    if created or instance.is_active or not getattr(instance, "_was_active", None):
        return
    instance._was_active = False
    user_pk = instance.pk
    transaction.on_commit(
        lambda: account_leave(user=sender.objects.get(pk=user_pk), why="deactivated")
    )


def oidc_groups(extra_data: dict) -> list[str] | None:
    """The groups claim (CARDPOOL_OIDC_GROUPS_CLAIM) from the userinfo answer or the ID
    token; None when the provider sends none (teams then stay as they are)."""
    claim = settings.CARDPOOL_DIRECTORY["OIDC_GROUPS_CLAIM"]
    for part in ("userinfo", "id_token"):
        value = (extra_data.get(part) or {}).get(claim)
        if isinstance(value, list):
            return sorted({str(group) for group in value})
        if isinstance(value, str):
            return [value]
    return None


def _signed_in(sender, request, user, **kwargs) -> None:
    sociallogin = kwargs.get("sociallogin")
    if sociallogin is None or sociallogin.account.get_provider(request).id != "openid_connect":
        return
    data = sociallogin.account.extra_data or {}
    claims = (data.get("userinfo") or {}) | (data.get("id_token") or {})
    person = Person(
        username=user.get_username(),
        dn=str(claims.get("sub", sociallogin.account.uid))[:500],
        uid=str(claims.get("preferred_username", ""))[:64],
        groups=oidc_groups(data),
    )
    directory_sign_in(user=user, person=person, source="oidc")


def connect() -> None:
    from allauth.account.signals import user_logged_in

    user_model = get_user_model()
    pre_save.connect(_remember_active, sender=user_model, dispatch_uid="directory-was-active")
    post_save.connect(_deactivated, sender=user_model, dispatch_uid="directory-deactivated")
    user_logged_in.connect(_signed_in, dispatch_uid="directory-oidc-sign-in")
