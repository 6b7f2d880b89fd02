"""REST API for asking by task: POST /api/v1/estimate/, and leases requested by profile.

Wired from ``leasing.api``: ``extra_urlpatterns`` takes ``urlpatterns`` from here, and
``LeaseViewSet.create`` hands a body with a ``profile`` to ``lease_by_profile``.
"""

from __future__ import annotations

from datetime import timedelta

from django.urls import path
from drf_spectacular.utils import extend_schema
from rest_framework.response import Response
from rest_framework.views import APIView

from leasing.estimator import TaskProfile
from leasing.models import Lease
from leasing.recommend import lease_request_by_profile, recommend
from leasing.serializers_profile import (
    EstimateRequestSerializer,
    LeaseByProfileSerializer,
    RecommendationSerializer,
)


class EstimateView(APIView):
    """The memory a task needs, broken down with the formulas, and the card models that fit.

    Ranked: free now first (cheapest first), then soonest free. Nothing is written.
    """

    @extend_schema(
        request=EstimateRequestSerializer,
        responses={200: RecommendationSerializer},
        operation_id="estimate_create",
    )
    def post(self, request):
        data = EstimateRequestSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        v = data.validated_data
        rec = recommend(
            profile=TaskProfile(**v["profile"]),
            duration=timedelta(minutes=v["duration_minutes"]),
            start_at=v.get("start_at"),
            priority=v["priority"],
        )
        return Response(RecommendationSerializer(rec, context={"request": request}).data)


def lease_by_profile(request) -> Lease:
    """Validate a by-profile lease request and place it (the top-ranked option)."""
    from leasing.api import default_team  # leasing.api imports this module

    data = LeaseByProfileSerializer(data=request.data)
    data.is_valid(raise_exception=True)
    v = data.validated_data
    return lease_request_by_profile(
        user=request.user,
        team=v.get("team") or default_team(request.user),
        profile=TaskProfile(**v["profile"]),
        duration=timedelta(minutes=v["duration_minutes"]),
        start_at=v.get("start_at"),
        priority=v["priority"],
        purpose=v.get("purpose"),
        description=v["description"],
    )


urlpatterns = [path("estimate/", EstimateView.as_view(), name="api-estimate")]
