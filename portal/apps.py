from django.apps import AppConfig
from django.conf import settings
from django.db.models.signals import post_migrate, pre_save
from django.utils.translation import gettext_lazy as _


def _create_cache_table(sender, using="default", **kwargs) -> None:
    """Every `migrate` makes the database cache's table (rate limits and lockouts live there
    when no Redis is configured); a no-op for other caches or when it exists."""
    from django.core.management import call_command

    call_command("createcachetable", database=using, verbosity=0)


class PortalConfig(AppConfig):
    name = "portal"
    verbose_name = _("Portal")

    def ready(self) -> None:
        from allauth.account.signals import password_reset
        from django.contrib.auth.signals import user_logged_in

        from portal.services_account import address_verify_on_reset, session_language_keep
        from portal.usernames import guard_username

        post_migrate.connect(_create_cache_table, sender=self)
        password_reset.connect(address_verify_on_reset, dispatch_uid="verify-on-reset")
        user_logged_in.connect(session_language_keep, dispatch_uid="session-language")
        pre_save.connect(guard_username, sender=settings.AUTH_USER_MODEL, dispatch_uid="username")
