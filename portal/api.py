"""Shared pieces of the REST API: error format and the token endpoint."""

from __future__ import annotations

from django.core.exceptions import ValidationError as DjangoValidationError
from rest_framework import exceptions, serializers
from rest_framework.authtoken.views import ObtainAuthToken
from rest_framework.views import exception_handler as drf_exception_handler


def exception_handler(exc, context):
    """Turn Django's ValidationError (raised by services) into a 400 with the message."""
    if isinstance(exc, DjangoValidationError):
        if hasattr(exc, "message_dict"):
            exc = exceptions.ValidationError(detail=exc.message_dict)
        else:
            exc = exceptions.ValidationError(detail={"detail": exc.messages})
    return drf_exception_handler(exc, context)


class ErrorSerializer(serializers.Serializer):
    detail = serializers.CharField()


class ObtainTokenView(ObtainAuthToken):
    """POST username + password → token, so scripts can start without the browser."""
