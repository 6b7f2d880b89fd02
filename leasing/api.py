"""REST API for leases: /api/v1/leases/."""

from __future__ import annotations

from datetime import timedelta

from django.core.exceptions import ValidationError
from django.db.models import Prefetch
from drf_spectacular.utils import extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.response import Response

from leasing import selectors, services
from leasing.models import Allocation, Lease
from leasing.serializers import (
    ExtendSerializer,
    LeaseEventSerializer,
    LeaseRequestSerializer,
    LeaseSerializer,
)
from portal.models import Membership

extra_urlpatterns: list = []


def default_team(user):
    """The team a request is charged to when none is named: the user's only team."""
    memberships = list(Membership.objects.filter(user=user).select_related("team")[:2])
    if len(memberships) == 1:
        return memberships[0].team
    raise ValidationError(
        {
            "team": [
                "You are in several teams; name the one to charge (team slug)."
                if memberships
                else "You are in no team; ask a team lead to add you."
            ]
        }
    )


class LeaseViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    """Your leases (a lead also sees the team's, an operator everyone's)."""

    serializer_class = LeaseSerializer
    filterset_fields = ["status", "team__slug", "card_model__slug"]

    queryset = Lease.objects.none()  # for the schema; get_queryset scopes to the user

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):
            return Lease.objects.none()
        leases = selectors.leases_visible_to(self.request.user).prefetch_related(
            Prefetch("allocations", queryset=Allocation.objects.select_related("card__node"))
        )
        if self.action == "list" and self.request.query_params.get("scope") != "all":
            leases = leases.filter(user=self.request.user)
        return leases.order_by("-submitted_at", "-pk")

    @extend_schema(request=LeaseRequestSerializer, responses={201: LeaseSerializer})
    def create(self, request):
        data = LeaseRequestSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        v = data.validated_data
        lease = services.lease_request(
            user=request.user,
            team=v.get("team") or default_team(request.user),
            card_model=v.get("card_model"),
            requirements=dict(v["requirements"]) if v.get("requirements") else None,
            count=v["count"],
            duration=timedelta(minutes=v["duration_minutes"]),
            start_at=v.get("start_at"),
            priority=v["priority"],
            purpose=v["purpose"],
            same_node=v["same_node"],
            description=v["description"],
        )
        return Response(LeaseSerializer(self._fresh(lease.pk)).data, status=status.HTTP_201_CREATED)

    def _fresh(self, pk):
        return self.get_queryset().get(pk=pk)

    @extend_schema(request=ExtendSerializer, responses=LeaseSerializer)
    @action(detail=True, methods=["post"])
    def extend(self, request, pk=None):
        data = ExtendSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        lease = services.lease_extend(
            lease=self.get_object(), user=request.user, minutes=data.validated_data["minutes"]
        )
        return Response(LeaseSerializer(self._fresh(lease.pk)).data)

    @extend_schema(request=None, responses=LeaseSerializer)
    @action(detail=True, methods=["post"])
    def release(self, request, pk=None):
        lease = services.lease_release(lease=self.get_object(), user=request.user)
        return Response(LeaseSerializer(self._fresh(lease.pk)).data)

    @extend_schema(request=None, responses=LeaseSerializer)
    @action(detail=True, methods=["post"])
    def cancel(self, request, pk=None):
        lease = services.lease_cancel(lease=self.get_object(), user=request.user)
        return Response(LeaseSerializer(self._fresh(lease.pk)).data)

    @extend_schema(responses=LeaseEventSerializer(many=True))
    @action(detail=True, methods=["get"])
    def events(self, request, pk=None):
        lease = self.get_object()
        events = lease.events.select_related("actor").order_by("at", "pk")
        return Response(LeaseEventSerializer(events, many=True).data)


def register(router) -> None:
    router.register("leases", LeaseViewSet, basename="lease")
