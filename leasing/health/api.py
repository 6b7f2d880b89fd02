"""REST API for operators: /api/v1/alerts/ (list, filter, acknowledge, silence) and
/api/v1/alert-rules/ (read, set a rule's threshold). Anyone else gets 403."""

from __future__ import annotations

from django.core.exceptions import ValidationError as DjangoValidationError
from django.utils.translation import gettext_lazy as _
from django_filters.rest_framework import DjangoFilterBackend
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import mixins, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import NotFound
from rest_framework.exceptions import ValidationError as ApiValidationError
from rest_framework.permissions import BasePermission
from rest_framework.response import Response

from leasing.choices import AlertKind
from leasing.health import rules as health_rules
from leasing.health import selectors, services
from leasing.health.serializers import (
    AlertRuleInput,
    AlertRuleSerializer,
    AlertSerializer,
    SilenceSerializer,
)
from leasing.models import Alert
from portal.input import NoBodySerializer, refuse_body
from portal.permissions import is_operator


class IsOperator(BasePermission):
    message = _("Only operators see pool alerts.")

    def has_permission(self, request, view) -> bool:
        return is_operator(request.user)


def _as_api_error(exc: DjangoValidationError) -> ApiValidationError:
    return ApiValidationError(exc.message_dict if hasattr(exc, "error_dict") else exc.messages)


class AlertViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    """Pool alerts, newest first; filter by ``status``, ``kind``, ``severity``, ``lasting``."""

    serializer_class = AlertSerializer
    permission_classes = [IsOperator]
    filter_backends = [DjangoFilterBackend]
    filterset_class = selectors.AlertFilterSet
    queryset = Alert.objects.none()

    def get_queryset(self):
        return selectors.alerts_list()

    def _alert(self, pk) -> Alert:
        try:
            return Alert.objects.get(pk=int(pk))
        except (Alert.DoesNotExist, ValueError, TypeError):
            raise NotFound from None

    @extend_schema(request=NoBodySerializer, responses=AlertSerializer)
    @action(detail=True, methods=["post"])
    def acknowledge(self, request, pk=None):
        """Take the alert on (recorded: who, when)."""
        refuse_body(request)
        try:
            alert = services.alert_acknowledge(alert=self._alert(pk), user=request.user)
        except DjangoValidationError as exc:
            raise _as_api_error(exc) from None
        return Response(self.get_serializer(alert).data)

    @extend_schema(request=SilenceSerializer, responses=AlertSerializer)
    @action(detail=True, methods=["post"])
    def silence(self, request, pk=None):
        """Tell nobody about this rule on this subject for ``minutes`` (0 lifts it)."""
        alert = self._alert(pk)
        given = SilenceSerializer(data=request.data)
        given.is_valid(raise_exception=True)
        try:
            alert = services.alert_silence(
                alert=alert, user=request.user, minutes=given.validated_data["minutes"]
            )
        except DjangoValidationError as exc:
            raise _as_api_error(exc) from None
        return Response(self.get_serializer(alert).data)


KIND = OpenApiParameter(
    "kind", str, OpenApiParameter.PATH, enum=AlertKind.values, description="The rule."
)


class AlertRuleViewSet(viewsets.ViewSet):
    """The rules with the thresholds in force (an operator's, else the defaults)."""

    permission_classes = [IsOperator]
    lookup_field = "kind"
    serializer_class = AlertRuleSerializer

    @extend_schema(responses=AlertRuleSerializer(many=True))
    def list(self, request):
        rules = health_rules.rules_in_force().values()
        return Response(AlertRuleSerializer(rules, many=True).data)

    @extend_schema(parameters=[KIND], responses=AlertRuleSerializer)
    def retrieve(self, request, kind=None):
        if kind not in AlertKind.values:
            raise NotFound
        return Response(AlertRuleSerializer(health_rules.rules_in_force()[kind]).data)

    @extend_schema(parameters=[KIND], request=AlertRuleInput, responses=AlertRuleSerializer)
    def update(self, request, kind=None):
        if kind not in AlertKind.values:
            raise NotFound
        given = AlertRuleInput(data=request.data)
        given.is_valid(raise_exception=True)
        try:
            rule = services.alert_rule_set(user=request.user, kind=kind, **given.validated_data)
        except DjangoValidationError as exc:
            raise _as_api_error(exc) from None
        return Response(AlertRuleSerializer(rule).data)


def register(router) -> None:
    router.register("alerts", AlertViewSet, basename="alert")
    router.register("alert-rules", AlertRuleViewSet, basename="alert-rule")
