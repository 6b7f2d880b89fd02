"""REST API: /api/v1/environments/, /api/v1/ssh-keys/, /api/v1/leases/{id}/session/."""

from __future__ import annotations

from django.core.exceptions import PermissionDenied, ValidationError
from django.shortcuts import get_object_or_404
from django.urls import path
from django.utils.translation import gettext as _
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.exceptions import NotFound
from rest_framework.response import Response
from rest_framework.views import APIView

from inventory.models import CardModel
from leasing.models import Environment, Lease, Session, SshKey
from leasing.workbench import environments, keys, sessions
from portal.input import NoBodySerializer, StrictSerializer, refuse_body
from portal.permissions import is_operator


class EnvironmentSerializer(serializers.ModelSerializer):
    card_models = serializers.SlugRelatedField(slug_field="slug", many=True, read_only=True)

    class Meta:
        model = Environment
        fields = [
            "slug",
            "name",
            "stack_family",
            "stack_version",
            "card_models",
            "vendors",
            "entry_kind",
            "entry",
            "description",
        ]


class EnvironmentViewSet(viewsets.ReadOnlyModelViewSet):
    """Offered environments; ``?card_model=<slug>`` lists only those that fit that model."""

    serializer_class = EnvironmentSerializer
    lookup_field = "slug"

    def get_queryset(self):
        return Environment.objects.filter(active=True).prefetch_related("card_models")

    @extend_schema(parameters=[OpenApiParameter("card_model", str, description="card model slug")])
    def list(self, request, *args, **kwargs):
        slug = request.query_params.get("card_model")
        if slug:
            model = CardModel.objects.filter(slug=slug).first()
            if model is None:
                raise NotFound(_("No card model “%(slug)s”.") % {"slug": slug})
            rows = environments.environments_for(model)
        else:
            rows = list(self.get_queryset())
        return Response(self.get_serializer(rows, many=True).data)


class SshKeySerializer(StrictSerializer, serializers.ModelSerializer):
    class Meta:
        model = SshKey
        fields = ["id", "name", "public_key", "fingerprint", "created_at"]
        read_only_fields = ["id", "fingerprint", "created_at"]
        extra_kwargs = {"name": {"required": False}}

    def create(self, validated_data):
        try:
            return keys.ssh_key_add(user=self.context["request"].user, **validated_data)
        except ValidationError as exc:
            raise serializers.ValidationError({"public_key": exc.messages}) from exc


class SshKeyViewSet(
    mixins.ListModelMixin,
    mixins.CreateModelMixin,
    mixins.DestroyModelMixin,
    viewsets.GenericViewSet,
):
    """Your SSH public keys; they are allowed on the nodes of your active leases."""

    serializer_class = SshKeySerializer

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):  # the schema, built without a user
            return SshKey.objects.none()
        return SshKey.objects.filter(user=self.request.user)

    def perform_destroy(self, instance):
        keys.ssh_key_remove(user=self.request.user, key=instance)


class SessionSerializer(serializers.ModelSerializer):
    url = serializers.SerializerMethodField()
    terminal_url = serializers.SerializerMethodField()

    class Meta:
        model = Session
        fields = [
            "id",
            "status",
            "host",
            "url",
            "terminal_url",
            "created_at",
            "started_at",
            "ended_at",
            "end_reason",
            "failure_reason",
        ]

    def get_url(self, obj) -> str:
        return self.context["request"].build_absolute_uri(obj.base_url + sessions.JUPYTERLAB_PATH)

    def get_terminal_url(self, obj) -> str:
        # A new terminal of the session each time it is opened (the page's "Open terminal").
        return self.context["request"].build_absolute_uri(
            f"/leases/{obj.lease_id}/session/go/?target=terminal"
        )


class LeaseSessionView(APIView):
    """The lease's browser session: GET the latest, POST to open (202 while it starts),
    DELETE to stop it. Only the holder (an operator may read and stop)."""

    def _lease(self, request, pk: int) -> Lease:
        lease = get_object_or_404(Lease, pk=pk)
        if lease.user_id != request.user.pk and not is_operator(request.user):
            raise NotFound()
        return lease

    @extend_schema(responses={200: SessionSerializer})
    def get(self, request, pk: int):
        session = Session.objects.filter(lease=self._lease(request, pk)).order_by("-pk").first()
        if session is None:
            raise NotFound(_("This lease has no session."))
        return Response(SessionSerializer(session, context={"request": request}).data)

    @extend_schema(request=NoBodySerializer, responses={202: SessionSerializer})
    def post(self, request, pk: int):
        refuse_body(request)
        lease = self._lease(request, pk)
        try:
            session = sessions.session_open(lease=lease, user=request.user)
        except ValidationError as exc:
            raise serializers.ValidationError({"detail": exc.messages}) from exc
        except PermissionDenied as exc:
            raise NotFound(str(exc)) from exc
        code = status.HTTP_200_OK if session.status == "running" else status.HTTP_202_ACCEPTED
        return Response(SessionSerializer(session, context={"request": request}).data, status=code)

    @extend_schema(request=NoBodySerializer, responses={204: None})
    def delete(self, request, pk: int):
        refuse_body(request)
        lease = self._lease(request, pk)
        session = Session.objects.live().filter(lease=lease).first()
        if session is None:
            raise NotFound(_("No session is running on this lease."))
        sessions.session_stop(session=session, user=request.user)
        return Response(status=status.HTTP_204_NO_CONTENT)


def register(router) -> None:
    router.register("environments", EnvironmentViewSet, basename="environment")
    router.register("ssh-keys", SshKeyViewSet, basename="ssh-key")


urlpatterns = [
    path("leases/<int:pk>/session/", LeaseSessionView.as_view(), name="api-lease-session"),
]
