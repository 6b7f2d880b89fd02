"""The team API: teams you see, their quota rules (operators replace them) and this month's use."""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.shortcuts import get_object_or_404
from django.urls import path
from django.utils import timezone
from django.utils.translation import gettext as _
from drf_spectacular.utils import extend_schema
from rest_framework import status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import ValidationError as ApiValidationError
from rest_framework.response import Response
from rest_framework.views import APIView

from leasing.models import FairSharePolicy
from leasing.teams import fairshare, selectors, services
from leasing.teams.serializers import (
    FairSharePolicySerializer,
    FairShareSerializer,
    MemberAddSerializer,
    MemberSerializer,
    QuotaRuleSerializer,
    QuotaUseSerializer,
    ShareSerializer,
    TeamSerializer,
)
from portal.models import Team


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

    @extend_schema(methods=["GET"], responses=ShareSerializer(many=True))
    @extend_schema(
        methods=["PUT"], request=ShareSerializer(many=True), responses=ShareSerializer(many=True)
    )
    @action(detail=True, methods=["get", "put"])
    def shares(self, request, slug=None):
        """The team's guaranteed shares; operators replace them all with PUT."""
        team = self.get_object()
        if request.method == "PUT":
            given = ShareSerializer(data=request.data, many=True)
            given.is_valid(raise_exception=True)
            services.share_replace(
                user=request.user, team=team, shares=[dict(s) for s in given.validated_data]
            )
        rows = team.shares.select_related("card_model").order_by("card_model__slug", "family")
        return Response(ShareSerializer(rows, many=True).data)

    @extend_schema(methods=["GET"], responses=FairShareSerializer)
    @extend_schema(methods=["PUT"], request=FairShareSerializer, responses=FairShareSerializer)
    @action(detail=True, methods=["get", "put"], url_path="fair-share", url_name="fair-share")
    def fair_share(self, request, slug=None):
        """The team's fair share (share, recent use, factor); operators set its weight."""
        team = self.get_object()
        if request.method == "PUT":
            given = FairShareSerializer(data=request.data)
            given.is_valid(raise_exception=True)
            fairshare.weight_set(
                user=request.user, team=team, weight=given.validated_data["weight"]
            )
        return Response(FairShareSerializer(fairshare.team_standing(team)).data)

    def _members(self, team):
        memberships = team.memberships.select_related("user").order_by("role", "user__username")
        return Response(MemberSerializer(memberships, many=True).data)

    @extend_schema(methods=["GET"], responses=MemberSerializer(many=True))
    @extend_schema(
        methods=["POST"], request=MemberAddSerializer, responses=MemberSerializer(many=True)
    )
    @action(detail=True, methods=["get", "post"])
    def members(self, request, slug=None):
        """The team's members; a lead (or an operator) adds an existing account by username."""
        team = self.get_object()
        if request.method == "POST":
            data = MemberAddSerializer(data=request.data)
            data.is_valid(raise_exception=True)
            name = data.validated_data["username"]
            member = get_user_model().objects.filter(username__iexact=name).first()
            if member is None:
                raise ApiValidationError(
                    {"username": [_("No account is called “%(user)s”.") % {"user": name}]}
                )
            services.membership_add(user=request.user, team=team, member=member)
            return Response(self._members(team).data, status=status.HTTP_201_CREATED)
        return self._members(team)

    @extend_schema(request=None, responses={204: None})
    @action(
        detail=True,
        methods=["delete"],
        url_path=r"members/(?P<username>[^/]+)",
        url_name="member",
    )
    def member(self, request, slug=None, username=None):
        """A lead takes a member out (refused while they hold or wait for cards there)."""
        team = self.get_object()
        membership = get_object_or_404(
            team.memberships.select_related("user", "team"), user__username=username
        )
        services.membership_remove(user=request.user, membership=membership)
        return Response(status=status.HTTP_204_NO_CONTENT)


class FairSharePolicyView(APIView):
    """The site's fair-share settings: the half-life of use, the minutes between two
    recomputations of the factors, and whether a team below its share takes cards back
    (``reclaim``). Everyone signed in reads them; operators change them."""

    @extend_schema(responses=FairSharePolicySerializer)
    def get(self, request):
        return Response(FairSharePolicySerializer(FairSharePolicy.current()).data)

    @extend_schema(request=FairSharePolicySerializer, responses=FairSharePolicySerializer)
    def put(self, request):
        given = FairSharePolicySerializer(data=request.data)
        given.is_valid(raise_exception=True)
        policy = fairshare.policy_set(user=request.user, **given.validated_data)
        return Response(FairSharePolicySerializer(policy).data)


urlpatterns = [
    path("fair-share/", FairSharePolicyView.as_view(), name="api-fair-share"),
]


def register(router) -> None:
    router.register("teams", TeamViewSet, basename="team")
