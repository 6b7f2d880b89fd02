from django.apps import AppConfig
from django.core.exceptions import ImproperlyConfigured
from django.utils.translation import gettext_lazy as _


class LeasingConfig(AppConfig):
    name = "leasing"
    verbose_name = _("Leasing")

    def ready(self) -> None:
        from django.conf import settings

        from leasing.choices import Priority, Purpose
        from leasing.directory.receivers import connect

        connect()

        for purpose, priority in settings.CARDPOOL.get("PURPOSE_PRIORITY", {}).items():
            if purpose not in Purpose.values or priority not in Priority.values:
                raise ImproperlyConfigured(
                    f"CARDPOOL_PURPOSE_PRIORITY: {purpose}={priority}: purposes are "
                    f"{', '.join(Purpose.values)}; classes are {', '.join(Priority.values)}"
                )
