"""Admin for the inventory: regions, card models (spec sheets), nodes and their cards."""

from __future__ import annotations

from datetime import timedelta

from django.contrib import admin
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from inventory.models import Card, CardModel, Node, Region
from leasing.lifecycle import maintenance


@admin.register(Region)
class RegionAdmin(admin.ModelAdmin):
    list_display = ["name", "slug", "kind", "parent", "energy_price_kwh"]
    list_filter = ["kind"]
    search_fields = ["name", "slug"]
    prepopulated_fields = {"slug": ["name"]}
    list_select_related = ["parent"]


@admin.register(CardModel)
class CardModelAdmin(admin.ModelAdmin):
    list_display = [
        "name",
        "vendor",
        "architecture",
        "memory_gb",
        "memory_bandwidth_gbs",
        "bf16_tflops",
        "fp8_tflops",
        "int8_tops",
        "interconnect_kind",
        "interconnect_gbs",
        "tdp_w",
        "price_per_hour",
    ]
    list_filter = ["vendor", "interconnect_kind", "stack_family", "graphics"]
    search_fields = ["name", "slug", "architecture", "family", "software_stack"]
    prepopulated_fields = {"slug": ["name"]}
    fieldsets = [
        (None, {"fields": ["vendor", "name", "slug", "architecture", "family", "form_factor"]}),
        (_("Memory"), {"fields": ["memory_gb", "memory_bandwidth_gbs"]}),
        (
            _("Peak throughput"),
            {
                "fields": [
                    ("fp64_tflops", "fp32_tflops", "tf32_tflops"),
                    ("fp16_tflops", "bf16_tflops", "fp8_tflops"),
                    "int8_tops",
                ]
            },
        ),
        (
            _("Interconnect and power"),
            {"fields": ["interconnect_kind", "interconnect_gbs", "tdp_w"]},
        ),
        (
            _("Software and price"),
            {
                "fields": [
                    "software_stack",
                    ("stack_family", "graphics"),
                    "visible_devices_env",
                    "price_per_hour",
                    "source_url",
                    "notes",
                ]
            },
        ),
    ]


class CardInline(admin.TabularInline):
    model = Card
    fields = ["index", "card_model", "uuid", "interconnect_domain", "status", "health_note"]
    ordering = ["index"]
    extra = 0
    show_change_link = True


@admin.register(Node)
class NodeAdmin(admin.ModelAdmin):
    list_display = [
        "hostname",
        "region",
        "status",
        "drain_at",
        "network_kind",
        "network_gbps",
        "driver_version",
    ]
    list_filter = ["status", "region", "network_kind"]
    search_fields = ["hostname", "external_id", "driver_version"]
    list_select_related = ["region"]
    readonly_fields = ["created_at", "updated_at"]
    inlines = [CardInline]
    actions = ["drain_in_one_hour"]

    @admin.action(description=_("Drain in one hour (warn holders, then maintenance)"))
    def drain_in_one_hour(self, request, queryset):
        at = timezone.now() + timedelta(hours=1)
        for node in queryset:
            warned = maintenance.node_drain(user=request.user, node=node, drain_at=at)
            # Starts with a word: the admin capitalises a message's first letter (hostnames
            # are lower case).
            self.message_user(request, maintenance.node_drain_said(node, at, warned))


@admin.register(Card)
class CardAdmin(admin.ModelAdmin):
    list_display = ["__str__", "card_model", "interconnect_domain", "status", "uuid"]
    list_filter = ["status", "card_model", "node__region"]
    search_fields = ["uuid", "node__hostname"]
    list_select_related = ["node", "card_model"]
    autocomplete_fields = ["node"]
    ordering = ["node__hostname", "index"]
    actions = ["mark_faulty"]

    @admin.action(description=_("Mark faulty (move its lease to a spare, or end it)"))
    def mark_faulty(self, request, queryset):

        for card in queryset:
            outcome = maintenance.card_mark_faulty(
                user=request.user, card=card, note=_("marked in the admin")
            )
            self.message_user(
                request,
                _("Card %(card)s is faulty: %(outcome)s.")
                % {"card": card, "outcome": maintenance.FAULTY_OUTCOMES.get(outcome, outcome)},
            )
