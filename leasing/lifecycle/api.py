"""REST API for leases: /api/v1/leases/."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta

from django.core.exceptions import ValidationError
from django.db.models import Prefetch, Value, prefetch_related_objects
from django.db.models.functions import Coalesce
from django.utils.translation import gettext as _
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.response import Response

from leasing.advisor.estimator import TaskProfile
from leasing.advisor.serializers import LeaseByProfileSerializer
from leasing.lifecycle import change_decisions, changes, releases, requests, resize
from leasing.lifecycle import selectors as lease_selectors
from leasing.lifecycle.filters import LeaseFilterSet
from leasing.lifecycle.requests import lease_request_by_profile
from leasing.lifecycle.serializers import (
    ApprovalSerializer,
    DecisionSerializer,
    ExtendSerializer,
    LeaseChangeSerializer,
    LeaseEventSerializer,
    LeaseRequestSerializer,
    LeaseSerializer,
    ResizeSerializer,
    ResolveSerializer,
)
from leasing.lifecycle.validation import Checkpoint
from leasing.models import REQUEST_KEY_MAX, Allocation, Lease, LeaseChange
from leasing.teams import approvals
from leasing.teams import selectors as team_selectors
from portal.input import NoBodySerializer, refuse_body
from portal.models import Membership


def default_team(user):
    """The team a request is charged to when none is named: the user's only team."""
    memberships = list(Membership.objects.filter(user=user).select_related("team")[:2])
    if len(memberships) == 1:
        return memberships[0].team
    raise ValidationError(
        {
            "team": [
                _("You are in several teams; name the one to charge (team slug).")
                if memberships
                else _("You are in no team; ask a team lead to add you.")
            ]
        }
    )


def _request_key(request) -> str:
    """The Idempotency-Key header, checked: at most 80 visible ASCII characters."""
    key = request.headers.get("Idempotency-Key", "").strip()
    if len(key) > REQUEST_KEY_MAX or not all(33 <= ord(c) <= 126 for c in key):
        raise ValidationError(
            {
                "Idempotency-Key": [
                    _("Use at most %(n)s visible ASCII characters (a UUID will do).")
                    % {"n": REQUEST_KEY_MAX}
                ]
            }
        )
    return key


def lease_by_profile(request) -> Lease:
    """Validate a by-profile lease request and place it (the top-ranked option)."""
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
        requirements=dict(v.get("requirements") or {}),
    )


class LeaseViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    """Your leases (a lead also sees the team's, an operator everyone's)."""

    serializer_class = LeaseSerializer
    filterset_class = LeaseFilterSet  # the lease page's filters, "scope" included

    queryset = Lease.objects.none()  # for the schema; get_queryset scopes to the user

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):
            return Lease.objects.none()
        leases = lease_selectors.with_pending_change(
            lease_selectors.leases_visible_to(self.request.user).prefetch_related(
                Prefetch("allocations", queryset=Allocation.objects.select_related("card__node"))
            )
        )
        # each team's work ahead (the start a queued lease is told) read with the page
        leases = leases.annotate(work_ahead=Coalesce("team__fair_share__ahead", Value(0.0)))
        return leases.order_by("-submitted_at", "-pk")

    def filter_queryset(self, queryset):
        """The list's filters (``LeaseFilterSet``); one lease by id is any the person sees."""
        return super().filter_queryset(queryset) if self.action == "list" else queryset

    @extend_schema(
        request=LeaseRequestSerializer,
        responses={201: LeaseSerializer},
        parameters=[
            OpenApiParameter(
                "Idempotency-Key",
                str,
                OpenApiParameter.HEADER,
                description=(
                    "Any unique string of at most 80 visible ASCII characters (a UUID). Sending "
                    "the same request again with the same key — a retry after a timeout or a "
                    "503 — returns the lease the first one made (header Idempotent-Replayed: "
                    "true) instead of booking twice. The same key for a different request: 400."
                ),
            )
        ],
    )
    def create(self, request):
        # Ask by task: the best-ranked option is requested. A body that is not a JSON object
        # (null, a list, a number) goes on to the serializer, which answers 400.
        if isinstance(request.data, Mapping) and "profile" in request.data:
            lease = lease_by_profile(request)
            return Response(
                LeaseSerializer(self._fresh(lease.pk)).data, status=status.HTTP_201_CREATED
            )
        data = LeaseRequestSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        v = data.validated_data
        key = _request_key(request)
        lease = requests.lease_request(
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
            override_reason=v["override_reason"],
            request_key=key,
            checkpoint=Checkpoint(**v["checkpoint"]) if v.get("checkpoint") else None,
            start_policy=v.get("start_policy") or "",
            environment=v.get("environment"),
        )
        # The service's own lease, not a re-read: its user, team and model are the objects
        # passed in, so the allocations (with card and node) are the one query left.
        prefetch_related_objects(
            [lease],
            Prefetch("allocations", queryset=Allocation.objects.select_related("card__node")),
        )
        if not lease.replayed:
            lease.pending_changes = []  # made just now: no change can wait for it yet
        response = Response(LeaseSerializer(lease).data, status=status.HTTP_201_CREATED)
        if lease.replayed:
            response["Idempotent-Replayed"] = "true"
        return response

    def _fresh(self, pk):
        return self.get_queryset().get(pk=pk)

    @extend_schema(request=ExtendSerializer, responses={200: LeaseSerializer, 202: LeaseSerializer})
    @action(detail=True, methods=["post"])
    def extend(self, request, pk=None):
        data = ExtendSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        lease = changes.lease_extend(
            lease=self.get_object(), user=request.user, minutes=data.validated_data["minutes"]
        )
        return self._changed(lease)

    def _changed(self, lease: Lease) -> Response:
        """200 with the lease as it is now, or 202 when the change waits for the lead
        (``pending_change`` says what waits)."""
        if getattr(lease, "pending_change", None) is not None:
            return Response(LeaseSerializer(lease).data, status=status.HTTP_202_ACCEPTED)
        return Response(LeaseSerializer(self._fresh(lease.pk)).data)

    @extend_schema(request=ResizeSerializer, responses={200: LeaseSerializer, 202: LeaseSerializer})
    @action(detail=True, methods=["post"])
    def resize(self, request, pk=None):
        """More or fewer cards, or another model of the same family; returns the lease that carries on."""
        data = ResizeSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        lease = resize.lease_resize(
            lease=self.get_object(),
            user=request.user,
            count=data.validated_data.get("count"),
            card_model=data.validated_data.get("card_model"),
        )
        return self._changed(lease)

    @extend_schema(request=NoBodySerializer, responses=LeaseSerializer)
    @action(detail=True, methods=["post"])
    def release(self, request, pk=None):
        refuse_body(request)
        lease = changes.lease_release(lease=self.get_object(), user=request.user)
        return Response(LeaseSerializer(self._fresh(lease.pk)).data)

    @extend_schema(request=NoBodySerializer, responses=LeaseSerializer)
    @action(detail=True, methods=["post"], url_path="release-retry")
    def release_retry(self, request, pk=None):
        """Operators: send a failed release (status release_failed) to the backend again."""
        refuse_body(request)
        lease = releases.lease_release_retry(lease=self.get_object(), user=request.user)
        return Response(LeaseSerializer(self._fresh(lease.pk)).data)

    @extend_schema(request=ResolveSerializer, responses=LeaseSerializer)
    @action(detail=True, methods=["post"], url_path="release-resolve")
    def release_resolve(self, request, pk=None):
        """Operators: a failed release was cleaned up by hand; the lease ends, the cards return."""
        data = ResolveSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        lease = releases.lease_release_resolve(
            lease=self.get_object(), user=request.user, note=data.validated_data["note"]
        )
        return Response(LeaseSerializer(self._fresh(lease.pk)).data)

    @extend_schema(request=NoBodySerializer, responses=LeaseSerializer)
    @action(detail=True, methods=["post"])
    def cancel(self, request, pk=None):
        refuse_body(request)
        lease = changes.lease_cancel(lease=self.get_object(), user=request.user)
        return Response(LeaseSerializer(self._fresh(lease.pk)).data)

    @extend_schema(responses=LeaseEventSerializer(many=True))
    @action(detail=True, methods=["get"])
    def events(self, request, pk=None):
        lease = self.get_object()
        events = lease.events.select_related("actor").order_by("at", "pk")
        return Response(LeaseEventSerializer(events, many=True).data)


class ApprovalViewSet(mixins.ListModelMixin, viewsets.GenericViewSet):
    """Requests above a member's limit waiting for your decision (leads, operators)."""

    serializer_class = ApprovalSerializer
    queryset = Lease.objects.none()

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):
            return Lease.objects.none()
        return team_selectors.approvals_for(self.request.user).order_by("submitted_at", "pk")

    @extend_schema(request=DecisionSerializer, responses=LeaseSerializer)
    @action(detail=True, methods=["post"])
    def approve(self, request, pk=None):
        data = DecisionSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        lease = approvals.lease_approve(
            lease=self.get_object(), user=request.user, note=data.validated_data["reason"]
        )
        return Response(LeaseSerializer(lease).data)

    @extend_schema(request=DecisionSerializer, responses=LeaseSerializer)
    @action(detail=True, methods=["post"])
    def reject(self, request, pk=None):
        data = DecisionSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        lease = approvals.lease_reject(
            lease=self.get_object(), user=request.user, reason=data.validated_data["reason"]
        )
        return Response(LeaseSerializer(lease).data)


class LeaseChangeViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    """Extensions and resizes above a member's limit: the holder sees theirs, a lead decides
    the team's (``?status=pending`` for what waits), an operator sees all."""

    serializer_class = LeaseChangeSerializer
    filterset_fields = ["status", "kind", "lease"]
    queryset = LeaseChange.objects.none()

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):
            return LeaseChange.objects.none()
        return lease_selectors.changes_visible_to(self.request.user).order_by(
            "-requested_at", "-pk"
        )

    @extend_schema(request=DecisionSerializer, responses=LeaseSerializer)
    @action(detail=True, methods=["post"])
    def approve(self, request, pk=None):
        data = DecisionSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        lease = change_decisions.change_approve(
            change=self.get_object(), user=request.user, note=data.validated_data["reason"]
        )
        return Response(LeaseSerializer(lease).data)

    @extend_schema(request=DecisionSerializer, responses=LeaseChangeSerializer)
    @action(detail=True, methods=["post"])
    def reject(self, request, pk=None):
        data = DecisionSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        change = self.get_object()
        change_decisions.change_reject(
            change=change, user=request.user, reason=data.validated_data["reason"]
        )
        return Response(LeaseChangeSerializer(self.get_queryset().get(pk=change.pk)).data)

    @extend_schema(request=NoBodySerializer, responses=LeaseChangeSerializer)
    @action(detail=True, methods=["post"])
    def withdraw(self, request, pk=None):
        refuse_body(request)
        change = self.get_object()
        change_decisions.change_withdraw(change=change, user=request.user)
        return Response(LeaseChangeSerializer(self.get_queryset().get(pk=change.pk)).data)


def register(router) -> None:
    router.register("leases", LeaseViewSet, basename="lease")
    router.register("approvals", ApprovalViewSet, basename="approval")
    router.register("lease-changes", LeaseChangeViewSet, basename="lease-change")
