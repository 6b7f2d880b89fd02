"""POST /api/v1/telemetry/: node agents send their cards' readings with a node token.

Node tokens (``Authorization: Node <token>``) are accepted here and nowhere else: the
authentication class is not among the API's defaults, and this view accepts nothing else.
"""

from __future__ import annotations

from django.contrib.auth.models import AnonymousUser
from django.urls import path
from django.utils.translation import gettext_lazy as _
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.utils import extend_schema
from rest_framework import exceptions, serializers, status
from rest_framework.authentication import BaseAuthentication, get_authorization_header
from rest_framework.permissions import BasePermission
from rest_framework.response import Response
from rest_framework.settings import api_settings
from rest_framework.throttling import SimpleRateThrottle
from rest_framework.views import APIView

from inventory import telemetry
from inventory.models import Node
from portal.api import ErrorSerializer
from portal.input import StrictSerializer

DEFAULT_RATE = "120/min"  # an agent posts every 30 s; this leaves room for retries


class NodeTokenAuthentication(BaseAuthentication):
    """``Authorization: Node <token>`` → (AnonymousUser, node): a node is not a person, so
    nothing that checks request.user will ever take it for one."""

    keyword = "Node"

    def authenticate(self, request):
        parts = get_authorization_header(request).split()
        if not parts or parts[0].lower() != self.keyword.lower().encode():
            return None
        if len(parts) != 2:
            raise exceptions.AuthenticationFailed(
                _("Invalid Authorization header: send 'Node <token>'.")
            )
        try:
            token = parts[1].decode()
        except UnicodeError as exc:
            raise exceptions.AuthenticationFailed(_("The token has invalid characters.")) from exc
        node = telemetry.node_by_token(token)
        if node is None:
            raise exceptions.AuthenticationFailed(_("Invalid or revoked node token."))
        return AnonymousUser(), node

    def authenticate_header(self, request):
        return self.keyword


class NodeTokenScheme(OpenApiAuthenticationExtension):
    target_class = "inventory.api_telemetry.NodeTokenAuthentication"
    name = "nodeToken"

    def get_security_definition(self, auto_schema):
        return {
            "type": "apiKey",
            "in": "header",
            "name": "Authorization",
            "description": "Node token (`manage.py node_token HOSTNAME`), as `Node <token>`.",
        }


class IsNodeAgent(BasePermission):
    message = _("Send a node token: Authorization: Node <token>.")

    def has_permission(self, request, view):
        return isinstance(request.auth, Node)


class NodeRateThrottle(SimpleRateThrottle):
    """Per node (per address before authentication); rate from the "telemetry" scope."""

    scope = "telemetry"

    def get_rate(self):
        return api_settings.DEFAULT_THROTTLE_RATES.get(self.scope) or DEFAULT_RATE

    def get_cache_key(self, request, view):
        ident = f"node-{request.auth.pk}" if isinstance(request.auth, Node) else None
        return self.cache_format % {"scope": self.scope, "ident": ident or self.get_ident(request)}


class SampleSerializer(serializers.Serializer):
    """One reading (documentation only: the service validates each sample)."""

    uuid = serializers.CharField(required=False, help_text=_("The card's UUID."))
    index = serializers.IntegerField(required=False, help_text=_("The card's index on the node."))
    at = serializers.DateTimeField(
        required=False, help_text=_("When it was read, with a time zone; default now.")
    )
    utilization_pct = serializers.FloatField(required=False, allow_null=True)
    memory_used_mb = serializers.FloatField(
        required=False, allow_null=True, help_text=_("Memory used, MiB.")
    )
    temperature_c = serializers.FloatField(required=False, allow_null=True)
    power_w = serializers.FloatField(required=False, allow_null=True)


class TelemetryRequestSerializer(StrictSerializer):
    node = serializers.CharField(
        required=False, max_length=253, help_text=_("The node's hostname; optional.")
    )
    samples = serializers.ListField(
        child=serializers.DictField(),
        allow_empty=False,
        max_length=telemetry.MAX_SAMPLES,
        help_text=_("Readings: each names its card by uuid or index."),
    )


class TelemetryRequestDoc(TelemetryRequestSerializer):
    samples = SampleSerializer(many=True)


class TelemetryResponseSerializer(serializers.Serializer):
    count = serializers.IntegerField(help_text=_("New samples stored."))
    received = serializers.IntegerField(help_text=_("Samples in the request."))
    node = serializers.CharField()


class TelemetryView(APIView):
    """Store a node's card readings. All or nothing: any bad sample rejects the request with
    a message per bad sample. Samples already stored (same card and time) are skipped."""

    authentication_classes = [NodeTokenAuthentication]
    permission_classes = [IsNodeAgent]
    throttle_classes = [NodeRateThrottle]

    @extend_schema(
        operation_id="telemetry_create",
        request=TelemetryRequestDoc,
        responses={201: TelemetryResponseSerializer, 400: ErrorSerializer, 403: ErrorSerializer},
    )
    def post(self, request):
        node: Node = request.auth
        serializer = TelemetryRequestSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        named = serializer.validated_data.get("node")
        if named and named != node.hostname:
            raise exceptions.PermissionDenied(
                _("This token belongs to node %(own)s, not %(named)s.")
                % {"own": node.hostname, "named": named}
            )
        samples = serializer.validated_data["samples"]
        count = telemetry.telemetry_record(node=node, samples=samples)
        return Response(
            {"count": count, "received": len(samples), "node": node.hostname},
            status=status.HTTP_201_CREATED,
        )


urlpatterns = [path("telemetry/", TelemetryView.as_view(), name="api-telemetry")]
