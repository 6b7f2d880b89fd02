"""The API's default permission beside IsAuthenticated (REST_FRAMEWORK settings); kept apart
from portal.api, which DRF's views import (a permission class there would be a cycle)."""

from __future__ import annotations

from django.utils.translation import gettext_lazy as _
from rest_framework.permissions import BasePermission

from portal.permissions import sees_pool


class SeesPool(BasePermission):
    """Signed-in people in no team (and with no site role) get 403 on every API view."""

    message = _("You are not in a team yet: ask a team lead or an operator to add you.")

    def has_permission(self, request, view) -> bool:
        return not request.user.is_authenticated or sees_pool(request.user)
