"""The API's shape of the requirements (``inventory.requirements``): one field per entry of
the declaration, used by the lease API and the estimate API alike."""

from __future__ import annotations

from django.utils.translation import gettext_lazy as _
from rest_framework import serializers

from inventory.models import Region
from inventory.requirements import REQUIREMENTS, VERSION_PATTERN, Requirement, requirement_errors
from portal.input import StrictSerializer


def requirement_serializer_field(req: Requirement) -> serializers.Field:
    """The API's shape of one requirement (``inventory.requirements``)."""
    # Lazy, worded when the schema is made: str() here froze it at import in the site's
    # language (Chinese descriptions in the English schema).
    common = {"required": False, "help_text": req.help_text}
    if req.kind == "choice":
        return serializers.ChoiceField(choices=req.choices, **common)
    if req.kind == "number":
        return serializers.DecimalField(max_digits=7, decimal_places=1, min_value=0, **common)
    if req.kind == "version":
        return serializers.RegexField(VERSION_PATTERN, max_length=40, **common)
    return serializers.SlugRelatedField(
        slug_field="slug",
        queryset=Region.objects.all(),
        error_messages={"does_not_exist": _("Unknown region “{value}”.")},
        **common,
    )


class RequirementsSerializer(StrictSerializer):
    """What the cards must have: with ``card_model`` the model must meet the model
    requirements and the node requirements choose its cards; without, the best model meeting
    them all is asked for. One field per entry of ``inventory.requirements.REQUIREMENTS``."""

    locals().update({req.name: requirement_serializer_field(req) for req in REQUIREMENTS})

    def validate(self, attrs):
        errors = requirement_errors(attrs)
        if errors:
            raise serializers.ValidationError(errors)
        return attrs
