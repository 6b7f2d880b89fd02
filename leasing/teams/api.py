"""The team API: teams you see, their quota rules (operators replace them) and this month's use."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta

from django.core.exceptions import ValidationError
from django.db.models import Prefetch, prefetch_related_objects
from django.utils import timezone
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.response import Response

from leasing import api_estimate, resize, selectors, services
from leasing.models import REQUEST_KEY_MAX, Allocation, Lease
from leasing.serializers import (
    ApprovalSerializer,
    DecisionSerializer,
    ExtendSerializer,
    LeaseEventSerializer,
    LeaseRequestSerializer,
    LeaseSerializer,
    QuotaRuleSerializer,
    QuotaUseSerializer,
    ResizeSerializer,
    TeamSerializer,
)
from portal.models import Membership, Team

extra_urlpatterns: list = [*api_estimate.urlpatterns]


class TeamViewSet(viewsets.ReadOnlyModelViewSet):
    """Teams you belong to (operators and finance: all); quotas with this month's use."""

    serializer_class = TeamSerializer
    lookup_field = "slug"
    queryset = Team.objects.none()

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):
            return Team.objects.none()
        return (
            selectors.teams_visible_to(self.request.user)
            .select_related("department")
            .order_by("slug")
        )

    @extend_schema(methods=["GET"], responses=QuotaUseSerializer(many=True))
    @extend_schema(
        methods=["PUT"],
        request=QuotaRuleSerializer(many=True),
        responses=QuotaUseSerializer(many=True),
    )
    @action(detail=True, methods=["get", "put"])
    def quotas(self, request, slug=None):
        team = self.get_object()
        if request.method == "PUT":
            rules = QuotaRuleSerializer(data=request.data, many=True)
            rules.is_valid(raise_exception=True)
            services.quota_replace(
                user=request.user, team=team, rules=[dict(r) for r in rules.validated_data]
            )
        overview = selectors.team_overview(team, now=timezone.now())
        rows = [
            row for row in overview["rows"] if row.rule is not None or row.card_model is not None
        ]
        return Response(QuotaUseSerializer(rows, many=True).data)




def register(router) -> None:
    router.register("teams", TeamViewSet, basename="team")
