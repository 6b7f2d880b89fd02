from django.contrib import admin

from portal.tokens.models import ApiToken


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    """Operators can see every token and revoke one by deleting it; keys are never shown."""

    list_display = ["name", "user", "prefix", "created_at", "last_used_at", "expires_at"]
    list_select_related = ["user"]
    search_fields = ["name", "prefix", "user__username", "user__email"]
    readonly_fields = ["user", "name", "prefix", "created_at", "last_used_at", "expires_at"]
    fields = readonly_fields

    def has_add_permission(self, request):
        # A key made here would have to be shown to the operator, not to its owner.
        return False
