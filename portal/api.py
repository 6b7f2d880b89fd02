"""Shared pieces of the REST API: error format and the token endpoint."""

from __future__ import annotations

from datetime import timedelta

from allauth.account import app_settings as account_settings
from allauth.account.adapter import get_adapter
from allauth.account.models import EmailAddress
from django.conf import settings
from django.core.exceptions import ValidationError as DjangoValidationError
from django.utils import timezone
from django.utils.translation import gettext_lazy as _
from drf_spectacular.utils import extend_schema
from rest_framework import exceptions, serializers
from rest_framework.permissions import AllowAny
from rest_framework.response import Response
from rest_framework.throttling import ScopedRateThrottle
from rest_framework.views import APIView
from rest_framework.views import exception_handler as drf_exception_handler

from portal.auth_account import login_credentials
from portal.input import StrictSerializer
from portal.tokens.services import token_create


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


class TokenRequestSerializer(StrictSerializer):
    username = serializers.CharField(help_text=_("Username or email address."))
    password = serializers.CharField(style={"input_type": "password"}, trim_whitespace=False)
    name = serializers.CharField(
        max_length=100,
        default="api-login",
        help_text=_("A name to recognise the token by on your profile page."),
    )

    def validate(self, attrs):
        request = self.context["request"]._request
        # Through allauth's adapter, as the login page does: the same per-account lockout
        # (ACCOUNT_RATE_LIMITS["login_failed"], counted in the shared cache) guards both.
        try:
            user = get_adapter(request).authenticate(
                request, **login_credentials(attrs["username"], attrs["password"])
            )
        except DjangoValidationError as locked:
            raise exceptions.Throttled(detail=" ".join(locked.messages)) from None
        if user is None:
            raise serializers.ValidationError(
                _("Wrong username or password."), code="authorization"
            )
        mandatory = (
            account_settings.EMAIL_VERIFICATION
            == account_settings.EmailVerificationMethod.MANDATORY
        )
        if mandatory and not EmailAddress.objects.filter(user=user, verified=True).exists():
            raise serializers.ValidationError(
                _("Verify your email address first: follow the link in the email we sent you."),
                code="authorization",
            )
        attrs["user"] = user
        return attrs


class TokenResponseSerializer(serializers.Serializer):
    token = serializers.CharField()
    name = serializers.CharField()
    expires_at = serializers.DateTimeField(allow_null=True)


class ObtainTokenView(APIView):
    """POST username + password → a new personal API token, so scripts can start without
    the browser. The token expires after CARDPOOL_API_LOGIN_TOKEN_DAYS and is listed (and
    revocable) on the user's profile page."""

    authentication_classes: list = []
    permission_classes = [AllowAny]
    throttle_classes = [ScopedRateThrottle]
    throttle_scope = "auth-token"

    @extend_schema(
        request=TokenRequestSerializer,
        responses={200: TokenResponseSerializer, 400: ErrorSerializer},
        auth=[],
    )
    def post(self, request):
        serializer = TokenRequestSerializer(data=request.data, context={"request": request})
        serializer.is_valid(raise_exception=True)
        days = settings.CARDPOOL_API_LOGIN_TOKEN_DAYS
        token, key = token_create(
            user=serializer.validated_data["user"],
            name=serializer.validated_data["name"],
            expires_at=timezone.now() + timedelta(days=days) if days else None,
        )
        return Response({"token": key, "name": token.name, "expires_at": token.expires_at})
