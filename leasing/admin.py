"""Admin for operators: leases are read here and changed only through services."""

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied, ValidationError
from django.utils.translation import gettext_lazy as _

from leasing.health import services as health_services
from leasing.lifecycle import changes, releases
from leasing.models import (
    Alert,
    AlertRule,
    Allocation,
    BackendCall,
    Delivery,
    DeliveryAttempt,
    Environment,
    FairShare,
    FairSharePolicy,
    GuaranteedShare,
    Lease,
    LeaseEvent,
    MemberLimit,
    OffPeakWindow,
    Price,
    Quota,
    Session,
    SshKey,
    Statement,
    TeamPrice,
    UsageRecord,
    WorkspaceUsage,
)
from leasing.teams import fairshare as fair_services
from leasing.teams import services as team_services


class ReadOnlyInline(admin.TabularInline):
    extra = 0
    can_delete = False

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False


class AllocationInline(ReadOnlyInline):
    model = Allocation
    fields = ["card", "start_at", "end_at"]
    readonly_fields = fields


class EventInline(ReadOnlyInline):
    model = LeaseEvent
    fields = ["at", "kind", "from_status", "to_status", "actor", "message"]
    readonly_fields = fields


class BackendCallInline(ReadOnlyInline):
    model = BackendCall
    fields = ["backend", "action", "attempt", "started_at", "finished_at", "ok", "detail"]
    readonly_fields = fields


@admin.register(Lease)
class LeaseAdmin(admin.ModelAdmin):
    list_display = [
        "id",
        "status",
        "user",
        "team",
        "card_model",
        "count",
        "start_at",
        "end_at",
        "priority",
        "borrowed",
    ]
    list_filter = ["status", "priority", "purpose", "card_model", "team"]
    search_fields = ["user__username", "description", "=id"]
    date_hierarchy = "submitted_at"
    inlines = [AllocationInline, EventInline, BackendCallInline]
    actions = ["release_selected", "retry_failed_releases", "resolve_failed_releases"]
    list_select_related = ["user", "team", "card_model"]

    def get_readonly_fields(self, request, obj=None):
        return [f.name for f in Lease._meta.fields]

    def has_add_permission(self, request):
        return False

    def has_delete_permission(self, request, obj=None):
        return False

    def _each(self, request, queryset, action) -> None:
        for lease in queryset:
            try:
                action(lease=lease, user=request.user)
            except (ValidationError, PermissionDenied) as exc:
                self.message_user(
                    request,
                    _("Lease %(id)s: %(why)s")
                    % {"id": lease.pk, "why": " ".join(getattr(exc, "messages", [str(exc)]))},
                    messages.WARNING,
                )

    @admin.action(description=_("Release the selected leases now"))
    def release_selected(self, request, queryset):
        self._each(request, queryset, changes.lease_release)

    @admin.action(description=_("Failed releases: send the release to the backend again"))
    def retry_failed_releases(self, request, queryset):
        self._each(request, queryset, releases.lease_release_retry)

    @admin.action(description=_("Failed releases: mark released (the cards were freed by hand)"))
    def resolve_failed_releases(self, request, queryset):
        self._each(request, queryset, releases.lease_release_resolve)


@admin.register(Quota)
class QuotaAdmin(admin.ModelAdmin):
    list_display = [
        "team",
        "card_model",
        "max_concurrent_cards",
        "card_hours_per_month",
        "max_lease_hours",
        "money_per_month",
    ]
    list_filter = ["team"]

    def save_model(self, request, obj, form, change):
        limits = {f: getattr(obj, f) for f in (*Quota.LIMIT_FIELDS, "money_per_month")}
        team_services.quota_set(
            user=request.user, team=obj.team, card_model=obj.card_model, **limits
        )


@admin.register(GuaranteedShare)
class GuaranteedShareAdmin(admin.ModelAdmin):
    """Cards always available to a team within a time; lent to others while idle."""

    list_display = ["team", "card_model", "family", "cards", "within_minutes"]
    list_filter = ["team"]

    def save_model(self, request, obj, form, change):
        team_services.share_set(
            user=request.user,
            team=obj.team,
            card_model=obj.card_model,
            family=obj.family,
            cards=obj.cards,
            within_minutes=obj.within_minutes,
        )

    def delete_model(self, request, obj):
        team_services.share_remove(user=request.user, share=obj)


@admin.register(FairShare)
class FairShareAdmin(admin.ModelAdmin):
    """A team's fair-share weight; its use, factor and work ahead are what the last
    recomputation found (read-only: they change only at the fixed recomputation times)."""

    list_display = ["team", "weight", "use", "factor", "ahead", "computed_at"]
    readonly_fields = ["use", "factor", "ahead", "computed_at"]

    def save_model(self, request, obj, form, change):
        fair_services.weight_set(user=request.user, team=obj.team, weight=obj.weight)


@admin.register(FairSharePolicy)
class FairSharePolicyAdmin(admin.ModelAdmin):
    """How fast use is forgotten (half-life) and how often the factors are recomputed."""

    list_display = ["half_life_hours", "every_minutes", "reclaim", "computed_at"]
    readonly_fields = ["computed_at"]

    def has_add_permission(self, request):
        return not FairSharePolicy.objects.exists() and super().has_add_permission(request)

    def has_delete_permission(self, request, obj=None):
        return False

    def save_model(self, request, obj, form, change):
        fair_services.policy_set(
            user=request.user,
            half_life_hours=obj.half_life_hours,
            every_minutes=obj.every_minutes,
            reclaim=obj.reclaim,
        )


@admin.register(OffPeakWindow)
class OffPeakWindowAdmin(admin.ModelAdmin):
    """Off-peak periods of the week (site time zone) and their tariff: the price book's
    prices by time of day."""

    list_display = ["weekday", "start_hour", "end_hour", "price_factor"]


@admin.register(MemberLimit)
class MemberLimitAdmin(admin.ModelAdmin):
    list_display = [
        "membership",
        "card_model",
        "max_concurrent_cards",
        "card_hours_per_month",
        "max_lease_hours",
    ]

    def save_model(self, request, obj, form, change):
        limits = {f: getattr(obj, f) for f in MemberLimit.LIMIT_FIELDS}
        team_services.member_limit_set(
            user=request.user, membership=obj.membership, card_model=obj.card_model, **limits
        )


@admin.register(Price)
class PriceAdmin(admin.ModelAdmin):
    """List prices with the date they take effect: a change next month does not rewrite this one."""

    list_display = ["card_model", "price_per_hour", "effective_from"]
    list_filter = ["card_model"]
    date_hierarchy = "effective_from"


@admin.register(TeamPrice)
class TeamPriceAdmin(admin.ModelAdmin):
    list_display = ["team", "card_model", "price_per_hour", "effective_from"]
    list_filter = ["team", "card_model"]


@admin.register(UsageRecord)
class UsageRecordAdmin(admin.ModelAdmin):
    """Read-only: written by the usage service when a lease ends."""

    list_display = [
        "lease",
        "team",
        "user",
        "card_model",
        "start_at",
        "end_at",
        "card_minutes",
        "price",
        "cost",
    ]
    list_filter = ["team", "card_model", "month"]
    list_select_related = ["team", "user", "card_model"]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False


class DeliveryAttemptInline(admin.TabularInline):
    """Each try at the delivery, in order: what the other side answered and how long it took."""

    model = DeliveryAttempt
    fields = ["number", "at", "duration_ms", "outcome", "response_code", "response_body", "error"]
    readonly_fields = fields
    extra = 0
    can_delete = False

    def has_add_permission(self, request, obj=None):
        return False


@admin.register(Delivery)
class DeliveryAdmin(admin.ModelAdmin):
    """Every notification sent by email or webhook, with each of its attempts."""

    inlines = [DeliveryAttemptInline]

    list_display = [
        "notification",
        "channel",
        "webhook",
        "status",
        "attempts",
        "last_attempt_at",
        "response_code",
    ]
    list_filter = ["status", "channel"]
    list_select_related = ["notification", "webhook"]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False


@admin.register(AlertRule)
class AlertRuleAdmin(admin.ModelAdmin):
    """Operators' thresholds; a rule without a row runs with its defaults."""

    list_display = ("kind", "threshold", "for_minutes", "severity", "enabled", "updated_at")

    def save_model(self, request, obj, form, change):
        try:
            health_services.alert_rule_set(
                user=request.user,
                kind=obj.kind,
                threshold=obj.threshold,
                for_minutes=obj.for_minutes,
                severity=obj.severity,
                enabled=obj.enabled,
            )
        except (PermissionDenied, ValidationError) as exc:
            self.message_user(request, str(exc), messages.ERROR)


@admin.register(Alert)
class AlertAdmin(admin.ModelAdmin):
    """The alerts' record (acknowledge and silence on the alerts page or the API)."""

    list_display = ("kind", "subject", "severity", "status", "opened_at", "resolved_at")
    list_filter = ("status", "kind", "severity")
    readonly_fields = [f.name for f in Alert._meta.fields]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False


@admin.register(Statement)
class StatementAdmin(admin.ModelAdmin):
    """Read-only: issued by billing.statements once a month is closed."""

    list_display = ["number", "team", "month", "issued_at", "cost", "currency"]
    list_filter = ["month", "team"]
    list_select_related = ["team"]
    search_fields = ["number", "team__name"]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(Environment)
class EnvironmentAdmin(admin.ModelAdmin):
    """Operators define the environments users pick for their leases."""

    list_display = ["name", "slug", "stack_family", "stack_version", "entry_kind", "active"]
    list_filter = ["active", "stack_family", "entry_kind"]
    search_fields = ["name", "slug", "stack_version"]
    prepopulated_fields = {"slug": ["name"]}
    filter_horizontal = ["card_models"]


@admin.register(Session)
class SessionAdmin(admin.ModelAdmin):
    """Browser sessions, for operators to see what runs where (they end with their lease)."""

    list_display = ["pk", "lease", "user", "host", "port", "status", "created_at", "ended_at"]
    list_filter = ["status", "backend"]
    readonly_fields = [f.name for f in Session._meta.fields if f.name != "token"]
    exclude = ["token"]

    def has_add_permission(self, request):
        return False


@admin.register(SshKey)
class SshKeyAdmin(admin.ModelAdmin):
    list_display = ["user", "name", "fingerprint", "created_at"]
    search_fields = ["user__username", "fingerprint", "name"]
    readonly_fields = ["user", "public_key", "fingerprint", "created_at"]

    def has_add_permission(self, request):
        return False


@admin.register(WorkspaceUsage)
class WorkspaceUsageAdmin(admin.ModelAdmin):
    list_display = ["path", "user", "team", "bytes_used", "files", "measured_at", "warned_at"]
    readonly_fields = ["path", "user", "team", "bytes_used", "files", "measured_at", "warned_at"]

    def has_add_permission(self, request):
        return False
