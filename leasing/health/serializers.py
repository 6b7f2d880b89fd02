"""What the alerts API shows and takes."""

from __future__ import annotations

from rest_framework import serializers

from leasing.choices import AlertSeverity
from leasing.models import Alert, AlertRule
from leasing.notify.messages import render_params
from portal.input import StrictSerializer


class AlertSerializer(serializers.ModelSerializer):
    title = serializers.SerializerMethodField()
    body = serializers.SerializerMethodField()
    kind_label = serializers.CharField(source="get_kind_display", read_only=True)
    card = serializers.SerializerMethodField()
    node = serializers.SerializerMethodField()
    acknowledged_by = serializers.SlugRelatedField(slug_field="username", read_only=True)
    silenced_by = serializers.SlugRelatedField(slug_field="username", read_only=True)

    class Meta:
        model = Alert
        fields = [
            "id",
            "kind",
            "kind_label",
            "severity",
            "status",
            "subject",
            "card",
            "node",
            "lease",
            "title",
            "body",
            "value",
            "peak",
            "threshold",
            "opened_at",
            "last_seen_at",
            "resolved_at",
            "acknowledged_at",
            "acknowledged_by",
            "silenced_until",
            "silenced_by",
        ]
        read_only_fields = fields

    def _text(self, obj) -> tuple[str, str]:
        params = {**obj.params, "id": obj.pk, "value": obj.value, "at": obj.opened_at}
        return render_params("alert_opened", params)

    def get_title(self, obj) -> str:
        """Worded in the reader's language."""
        return self._text(obj)[0]

    def get_body(self, obj) -> str:
        return self._text(obj)[1]

    def get_card(self, obj) -> str | None:
        return obj.params.get("card")

    def get_node(self, obj) -> str | None:
        return obj.params.get("node")


class SilenceSerializer(StrictSerializer):
    minutes = serializers.IntegerField(min_value=0, max_value=7 * 24 * 60)


class AlertRuleSerializer(serializers.ModelSerializer):
    kind_label = serializers.CharField(source="get_kind_display", read_only=True)

    class Meta:
        model = AlertRule
        fields = ["kind", "kind_label", "threshold", "for_minutes", "severity", "enabled"]
        read_only_fields = fields


class AlertRuleInput(StrictSerializer):
    threshold = serializers.FloatField(min_value=0, max_value=100_000)
    for_minutes = serializers.IntegerField(min_value=0, max_value=7 * 24 * 60)
    severity = serializers.ChoiceField(choices=AlertSeverity.choices)
    enabled = serializers.BooleanField(default=True)
