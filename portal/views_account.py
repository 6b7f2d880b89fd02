"""The profile page: time zone, language and personal API tokens (key shown once)."""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import Http404
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone, translation
from django.utils.cache import add_never_cache_headers, patch_cache_control
from django.utils.translation import gettext as _
from django.views.decorators.http import require_POST

from portal.forms_account import InviteForm, PreferencesForm, TokenForm
from portal.input import form_error_lines
from portal.models import Team
from portal.services_account import account_invite, invitation_send, profile_update
from portal.tokens.selectors import tokens_of
from portal.tokens.services import token_create, token_revoke


def _render(request, *, preferences=None, token_form=None, new_key=None, status=200):
    profile = getattr(request.user, "profile", None)
    preferences = preferences or PreferencesForm(
        initial={
            "timezone": profile.timezone if profile else "",
            "language": translation.get_language(),
            "stack": profile.stack if profile else "",
        }
    )
    context = {
        "preferences": preferences,
        "token_form": token_form or TokenForm(),
        "tokens": tokens_of(request.user),
        "new_key": new_key,
        "now": timezone.now(),
    }
    response = render(request, "portal/profile.html", context, status=status)
    add_never_cache_headers(response)
    return response


@login_required
def profile(request):
    if request.method != "POST":
        return _render(request)
    form = PreferencesForm(request.POST)
    if not form.is_valid():
        return _render(request, preferences=form, status=400)
    try:
        profile_update(
            user=request.user,
            timezone=form.cleaned_data["timezone"],
            language=form.cleaned_data["language"],
            stack=form.cleaned_data["stack"],
        )
    except ValidationError as exc:
        form.add_error(None, exc.messages)
        return _render(request, preferences=form, status=400)
    language = form.cleaned_data["language"]
    translation.activate(language)
    messages.success(request, _("Your preferences are saved."))
    response = redirect("profile:index")
    response.set_cookie(
        settings.LANGUAGE_COOKIE_NAME,
        language,
        max_age=settings.LANGUAGE_COOKIE_AGE,
        samesite=settings.LANGUAGE_COOKIE_SAMESITE,
        secure=settings.LANGUAGE_COOKIE_SECURE,
        httponly=settings.LANGUAGE_COOKIE_HTTPONLY,
    )
    return response


@login_required
@require_POST
def token_new(request):
    """Make a token and show its key in this response only (never stored, never cached)."""
    form = TokenForm(request.POST)
    if not form.is_valid():
        return _render(request, token_form=form, status=400)
    days = form.cleaned_data["expires_in_days"]
    try:
        token, key = token_create(
            user=request.user,
            name=form.cleaned_data["name"],
            expires_at=timezone.now() + timedelta(days=days) if days else None,
        )
    except ValidationError as exc:
        form.add_error(None, exc.messages)
        return _render(request, token_form=form, status=400)
    response = _render(request, new_key={"token": token, "key": key})
    patch_cache_control(response, no_store=True)
    return response


@login_required
@require_POST
def token_delete(request, pk: int):
    if not token_revoke(user=request.user, token_id=pk):
        raise Http404
    messages.success(request, _("The token is revoked; scripts using it can no longer sign in."))
    return redirect("profile:index")


@login_required
@require_POST
def team_invite(request, slug: str):
    """A lead (or an operator) invites a new member: account made, set-password link mailed."""
    team = get_object_or_404(Team, slug=slug)
    form = InviteForm(request.POST)
    if not form.is_valid():
        messages.error(
            request,
            _("Check the invitation: %(errors)s") % {"errors": "; ".join(form_error_lines(form))},
        )
        return redirect("team_detail", slug=team.slug)
    try:
        user = account_invite(by=request.user, team=team, **form.cleaned_data)
    except PermissionDenied as exc:
        raise Http404 from exc
    except ValidationError as exc:
        messages.error(request, " ".join(exc.messages))
        return redirect("team_detail", slug=team.slug)
    invitation_send(request=request, user=user)
    messages.success(
        request,
        _("%(user)s is invited: a link to set a password went to %(email)s.")
        % {"user": user.get_username(), "email": user.email},
    )
    return redirect("team_detail", slug=team.slug)
