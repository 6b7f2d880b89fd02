"""``GET /api/v1/card-models/{slug}/timeline/?start=&end=``: the model's one picture of the
future (``scheduler.picture``) per card, the same the pool timeline and the calendar draw."""

from __future__ import annotations

from datetime import timedelta

from django.shortcuts import get_object_or_404
from django.urls import path
from django.utils import timezone
from django.utils.translation import gettext as _
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.decorators import api_view
from rest_framework.response import Response

from inventory.models import CardModel
from leasing.lifecycle.pool_timeline import seen_leases
from leasing.scheduler.picture import KINDS, model_picture, re_estimated_within
from portal.input import DateTimeField, StrictSerializer

DEFAULT_SPAN = timedelta(days=3)
LONGEST_SPAN = timedelta(days=31)


class TimelineQuerySerializer(StrictSerializer):
    start = DateTimeField(required=False, help_text="From (default: now).")
    end = DateTimeField(required=False, help_text="Until (default: start + 3 days; at most 31).")
    format = serializers.CharField(required=False)  # DRF's ?format=json

    def validate(self, attrs):
        start = attrs.get("start") or timezone.now()
        end = attrs.get("end") or start + DEFAULT_SPAN
        if end <= start:
            raise serializers.ValidationError({"end": [_("end must be after start.")]})
        if end - start > LONGEST_SPAN:
            raise serializers.ValidationError({"end": [_("Ask for at most 31 days at a time.")]})
        return {"start": start, "end": end}


class BookingSerializer(serializers.Serializer):
    kind = serializers.ChoiceField(
        choices=KINDS,
        help_text=(
            "held: a lease holds the card (until its effective end); reserved: a booked "
            "reservation; planned: the queue's plan holds it for a waiting lease (from its "
            "estimated start for its duration); maintenance: the card or its node is out of "
            "service or drained; unhealthy: its readings keep it out of placement."
        ),
    )
    start = serializers.DateTimeField()
    end = serializers.DateTimeField()
    lease = serializers.IntegerField(
        allow_null=True, help_text="The lease's id where you may see that lease, else null."
    )


class CardTimelineSerializer(serializers.Serializer):
    node = serializers.CharField(help_text="The node's hostname.")
    index = serializers.IntegerField(help_text="The card's index in its node.")
    bookings = BookingSerializer(many=True)


class ReEstimatingSerializer(serializers.Serializer):
    lease = serializers.IntegerField(allow_null=True)
    count = serializers.IntegerField()
    estimated_start = serializers.DateTimeField(allow_null=True)
    duration_minutes = serializers.IntegerField()


class TimelineSerializer(serializers.Serializer):
    card_model = serializers.CharField()
    start = serializers.DateTimeField()
    end = serializers.DateTimeField()
    cards = CardTimelineSerializer(many=True)
    re_estimating = ReEstimatingSerializer(
        many=True,
        help_text=(
            "Waiting leases planned, being re-estimated: the plan has not put them on cards "
            "yet (they count for the model as a whole)."
        ),
    )
    re_estimated_within_seconds = serializers.IntegerField(
        help_text="The refresh places a lease listed in re_estimating within this long."
    )


@extend_schema(
    parameters=[
        OpenApiParameter("start", str, description="ISO 8601; default now."),
        OpenApiParameter("end", str, description="ISO 8601; default start + 3 days."),
    ],
    responses={200: TimelineSerializer},
    description=(
        "Each card of the model (node, index) with what keeps it busy over [start, end), read "
        "from the queue's plan: the same picture as the pool timeline and the availability "
        "calendar. A stretch with no booking is free and can be reserved as shown."
    ),
)
@api_view(["GET"])
def card_model_timeline(request, slug: str):
    card_model = get_object_or_404(CardModel, slug=slug)
    query = TimelineQuerySerializer(data=request.query_params.dict())
    query.is_valid(raise_exception=True)
    start, end = query.validated_data["start"], query.validated_data["end"]
    picture = model_picture(card_model.pk, start=start, end=end, now=max(timezone.now(), start))
    seen = seen_leases(request.user, picture)
    data = {
        "card_model": card_model.slug,
        "start": start,
        "end": end,
        "cards": [
            {
                "node": c.hostname,
                "index": c.index,
                "bookings": [
                    {
                        "kind": b.kind,
                        "start": b.start,
                        "end": b.end,
                        "lease": b.lease_id if b.lease_id in seen else None,
                    }
                    for b in picture.bookings.get(c.card_id, ())
                ],
            }
            for c in picture.cards
        ],
        "re_estimating": [
            {
                "lease": r.lease_id if r.lease_id in seen else None,
                "count": r.count,
                "estimated_start": r.estimated_start,
                "duration_minutes": int(r.duration / timedelta(minutes=1)),
            }
            for r in picture.re_estimating
        ],
        "re_estimated_within_seconds": int(re_estimated_within().total_seconds()),
    }
    return Response(TimelineSerializer(data).data)


urlpatterns = [
    path(
        "card-models/<slug:slug>/timeline/",
        card_model_timeline,
        name="card-model-timeline",
    ),
]
