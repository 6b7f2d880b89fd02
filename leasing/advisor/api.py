"""REST API for asking by task: POST /api/v1/estimate/ (advice only; nothing is written).

A lease requested by profile goes through the lease API (``leasing.lifecycle.api``), which
takes the top-ranked option through the same admission as any request.
"""

from __future__ import annotations

from datetime import timedelta

from django.urls import path
from drf_spectacular.utils import extend_schema
from rest_framework.response import Response
from rest_framework.views import APIView

from leasing.advisor.estimator import TaskProfile
from leasing.advisor.recommend import priced_team_id, recommend
from leasing.advisor.serializers import (
    EstimateRequestSerializer,
    RecommendationSerializer,
)


class EstimateView(APIView):
    """The memory a task needs, broken down with the formulas, and the card models that fit.

    Ranked by what the task needs (training speed, memory bandwidth, memory fit, rendering
    on graphics cards), its cost and when it starts: docs/estimator.md. Every option that
    fits is listed, the models left out with the reason. Nothing is written.
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
            team_id=priced_team_id(request.user),
            requirements=dict(v.get("requirements") or {}),
            start_policy=v.get("start_policy") or "",
        )
        return Response(RecommendationSerializer(rec, context={"request": request}).data)


urlpatterns = [path("estimate/", EstimateView.as_view(), name="api-estimate")]
