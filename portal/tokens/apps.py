from django.apps import AppConfig
from django.conf import settings
from django.db.models.signals import post_save
from django.utils.translation import gettext_lazy as _


def _password_changed(sender, instance, created, **kwargs) -> None:
    """A new password ends the person's API tokens, as it ends their other sessions.

    ``_password`` holds the raw password only between ``set_password()`` and the save that
    follows it — so a rehash on login (Django upgrading the hash) revokes nothing.
    """
    if created or getattr(instance, "_password", None) is None:
        return
    if settings.CARDPOOL_REVOKE_TOKENS_ON_PASSWORD_CHANGE:
        from portal.tokens.services import token_revoke_all

        token_revoke_all(user=instance)


class TokensConfig(AppConfig):
    name = "portal.tokens"
    label = "tokens"
    verbose_name = _("API tokens")

    def ready(self) -> None:
        post_save.connect(
            _password_changed, sender=settings.AUTH_USER_MODEL, dispatch_uid="tokens-password"
        )
