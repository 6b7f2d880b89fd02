from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class TokensConfig(AppConfig):
    name = "portal.tokens"
    label = "tokens"
    verbose_name = _("API tokens")
