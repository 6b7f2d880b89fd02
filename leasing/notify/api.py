"""REST API for your notifications: /api/v1/notifications/ (list, ?unread=1, read, read-all).

Wired from ``portal.api_urls`` with ``api_notify.register(router)``. Everyone sees only
their own notifications; another user's id is a 404.
"""

from __future__ import annotations

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema, inline_serializer
from rest_framework import mixins, serializers, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import NotFound
from rest_framework.response import Response

from leasing.models import Notification
from leasing.notify import selectors, sending, services
from leasing.notify.messages import notice_text
from leasing.notify.services import KIND_LABELS
from portal.input import NoBodySerializer, refuse_body


class NotificationSerializer(serializers.ModelSerializer):
    kind_label = serializers.SerializerMethodField()
    url = serializers.SerializerMethodField()
    unread = serializers.SerializerMethodField()
    data = serializers.SerializerMethodField()
    title = serializers.SerializerMethodField()
    body = serializers.SerializerMethodField()

    class Meta:
        model = Notification
        fields = [
            "id",
            "kind",
            "kind_label",
            "title",
            "body",
            "url",
            "lease",
            "data",
            "created_at",
            "read_at",
            "unread",
        ]
        read_only_fields = fields

    def get_title(self, obj) -> str:
        """Worded for the reader (their language and time zone) where stored as a message."""
        return notice_text(obj)[0]

    def get_body(self, obj) -> str:
        return notice_text(obj)[1]

    def get_kind_label(self, obj) -> str:
        return str(KIND_LABELS.get(obj.kind, obj.kind))

    def get_url(self, obj) -> str:
        """Absolute, so a script can hand it on."""
        request = self.context.get("request")
        if obj.url.startswith("/") and request is not None:
            return request.build_absolute_uri(obj.url)
        return obj.url

    def get_data(self, obj) -> dict:
        return sending.public_data(obj)

    def get_unread(self, obj) -> bool:
        return obj.read_at is None


UNREAD = OpenApiParameter(
    "unread", OpenApiTypes.BOOL, description="1: only notifications not yet read."
)


class NotificationViewSet(
    mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet
):
    """Your notifications, newest first."""

    serializer_class = NotificationSerializer
    queryset = Notification.objects.none()  # for the schema; get_queryset scopes to the user

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):
            return Notification.objects.none()
        unread = self.request.query_params.get("unread", "").lower() in ("1", "true", "yes")
        return selectors.notifications_of(self.request.user, unread=unread).order_by(
            "-created_at", "-pk"
        )

    @extend_schema(parameters=[UNREAD])
    def list(self, request, *args, **kwargs):
        return super().list(request, *args, **kwargs)

    @extend_schema(request=NoBodySerializer, responses=NotificationSerializer)
    @action(detail=True, methods=["post"])
    def read(self, request, pk=None):
        """Mark one notification read."""
        refuse_body(request)
        try:
            note = services.notification_read(user=request.user, notification_id=int(pk))
        except (Notification.DoesNotExist, ValueError, TypeError):
            raise NotFound from None
        return Response(self.get_serializer(note).data)

    @extend_schema(
        request=NoBodySerializer,
        responses=inline_serializer("ReadAll", {"marked": serializers.IntegerField()}),
    )
    @action(detail=False, methods=["post"], url_path="read-all")
    def read_all(self, request):
        """Mark all your notifications read; says how many were unread."""
        refuse_body(request)
        return Response({"marked": services.notifications_read_all(user=request.user)})


def register(router) -> None:
    router.register("notifications", NotificationViewSet, basename="notification")
