"""The node agent's side of a preemption (local backend): GET /api/v1/checkpoints/ lists the
checkpoints to deliver on the token's node; POST /api/v1/checkpoints/<lease>/ reports one
delivered. Node token only (``inventory.api_telemetry``)."""

from __future__ import annotations

from django.urls import path
from django.utils import timezone
from django.utils.translation import gettext as _
from drf_spectacular.utils import extend_schema
from rest_framework import exceptions, serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from inventory.api_telemetry import IsNodeAgent, NodeRateThrottle, NodeTokenAuthentication
from leasing.lifecycle.checkpoints import checkpoint_delivered, checkpoints_for_node
from portal.input import StrictSerializer


class CheckpointDueSerializer(serializers.Serializer):
    lease = serializers.IntegerField()
    user = serializers.CharField()
    signal = serializers.CharField(help_text="Signal name without SIG (empty: none).")
    command = serializers.CharField(help_text="Command to run (empty: none).")
    seconds = serializers.IntegerField(allow_null=True)
    preempt_at = serializers.DateTimeField()
    env_var = serializers.CharField(help_text="The devices variable of the card's vendor.")
    devices = serializers.ListField(child=serializers.IntegerField())


class DeliveredSerializer(StrictSerializer):
    ok = serializers.BooleanField()
    detail = serializers.CharField(max_length=500, required=False, allow_blank=True, default="")


class CheckpointListView(APIView):
    """Checkpoints the agent of the token's node has to deliver now."""

    authentication_classes = [NodeTokenAuthentication]
    permission_classes = [IsNodeAgent]
    throttle_classes = [NodeRateThrottle]

    @extend_schema(operation_id="checkpoints_list", responses=CheckpointDueSerializer(many=True))
    def get(self, request):
        due = checkpoints_for_node(request.auth, now=timezone.now())
        return Response(CheckpointDueSerializer(due, many=True).data)


class CheckpointDeliveredView(APIView):
    """The agent delivered (or failed to deliver) a lease's checkpoint on its node."""

    authentication_classes = [NodeTokenAuthentication]
    permission_classes = [IsNodeAgent]
    throttle_classes = [NodeRateThrottle]

    @extend_schema(
        operation_id="checkpoints_delivered", request=DeliveredSerializer, responses={204: None}
    )
    def post(self, request, lease_id: int):
        body = DeliveredSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        if not checkpoint_delivered(
            node=request.auth,
            lease_id=lease_id,
            ok=body.validated_data["ok"],
            detail=body.validated_data["detail"],
            now=timezone.now(),
        ):
            raise exceptions.NotFound(_("No checkpoint of this lease is due on this node."))
        return Response(status=status.HTTP_204_NO_CONTENT)


urlpatterns = [
    path("checkpoints/", CheckpointListView.as_view(), name="api-checkpoints"),
    path(
        "checkpoints/<int:lease_id>/",
        CheckpointDeliveredView.as_view(),
        name="api-checkpoint-delivered",
    ),
]
