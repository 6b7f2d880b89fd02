"""Browser pages for notifications: the notification centre and what goes where (settings)."""

from __future__ import annotations

from urllib.parse import urlsplit

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied, ValidationError
from django.core.paginator import Paginator
from django.db.models import Prefetch
from django.http import Http404, HttpResponse
from django.shortcuts import redirect, render
from django.utils.http import url_has_allowed_host_and_scheme
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy
from django.views.decorators.http import require_POST

from leasing.choices import Channel, Kind
from leasing.models import Delivery, Notification, Webhook
from leasing.notify import selectors, services
from leasing.notify.messages import notice_text
from leasing.notify.services import KIND_LABELS, OPTIONAL_CHANNELS, TEAM_KINDS
from portal.input import local_next

PAGE_SIZE = 50


class WebhookForm(forms.Form):
    name = forms.CharField(label=gettext_lazy("Name"), max_length=100)
    url = forms.CharField(
        label=gettext_lazy("Webhook address"),
        max_length=500,
        widget=forms.TextInput(attrs={"inputmode": "url", "placeholder": "https://"}),
    )
    format = forms.ChoiceField(label=gettext_lazy("Format"), choices=Webhook.Format.choices)
    secret = forms.CharField(
        label=gettext_lazy("Signing secret"),
        max_length=200,
        required=False,
        widget=forms.PasswordInput(render_value=False, attrs={"autocomplete": "off"}),
        help_text=gettext_lazy("DingTalk, Feishu and signed JSON; WeCom robots have none."),
    )
    kinds = forms.MultipleChoiceField(
        label=gettext_lazy("Events"),
        choices=Kind.choices,
        required=False,
        widget=forms.CheckboxSelectMultiple,
        help_text=gettext_lazy("None ticked: every event (for a team: the team events)."),
    )
    team = forms.ModelChoiceField(
        label=gettext_lazy("For"),
        queryset=None,
        required=False,
        empty_label=gettext_lazy("Me"),
    )

    def __init__(self, *args, user, **kwargs):
        super().__init__(*args, **kwargs)
        teams = selectors.teams_managed_by(user)
        self.fields["team"].queryset = teams
        # Shown only to those who lead a team; a team posted by anyone else is refused.
        self.has_teams = teams.exists()


def _masked(url: str) -> str:
    """The address without its path and query, which carry the robot's key or token."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}/…"


def _settings_context(request, form: WebhookForm | None = None) -> dict:
    prefs = services.preferences_for(request.user)
    rows = [
        {
            "kind": kind,
            "label": label,
            "team": kind in TEAM_KINDS,
            "email": Channel.EMAIL in prefs[kind],
            "webhook": Channel.WEBHOOK in prefs[kind],
        }
        for kind, label in Kind.choices
    ]
    hooks = list(
        selectors.webhooks_managed_by(request.user)
        .prefetch_related(
            Prefetch(
                "deliveries",
                queryset=Delivery.objects.order_by("-created_at", "-pk").prefetch_related(
                    "attempt_rows"
                )[:3],
                to_attr="recent",
            )
        )
        .order_by("team__slug", "pk")
    )
    for hook in hooks:
        hook.masked_url = _masked(hook.url)
        hook.kind_labels = [KIND_LABELS.get(k, k) for k in hook.kinds]
    return {
        "rows": rows,
        "hooks": hooks,
        "form": form or WebhookForm(user=request.user),
        "channels": OPTIONAL_CHANNELS,
    }


@login_required
def notification_list(request):
    unread = request.GET.get("unread") == "1"
    page = Paginator(selectors.notifications_of(request.user, unread=unread), PAGE_SIZE).get_page(
        request.GET.get("page")
    )
    for note in page:
        note.kind_label = KIND_LABELS.get(note.kind, note.kind)
        # Stored as message + parameters: worded for this reader (language, time zone).
        note.title, note.body = notice_text(note)
    return render(
        request,
        "leasing/notifications.html",
        {"page": page, "unread": unread, "labels": KIND_LABELS},
    )


@login_required
@require_POST
def notification_read(request, pk: int):
    try:
        note = services.notification_read(user=request.user, notification_id=pk)
    except Notification.DoesNotExist:
        raise Http404 from None
    if request.POST.get("open") and url_has_allowed_host_and_scheme(
        note.url, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        return redirect(note.url)
    return redirect(_back(request))


@login_required
@require_POST
def notification_read_all(request):
    count = services.notifications_read_all(user=request.user)
    messages.success(request, _("%(n)s notifications marked read.") % {"n": count})
    return redirect(_back(request))


def _back(request) -> str:
    return local_next(request) or "notifications:list"


@login_required
def notification_settings(request):
    if request.method == "POST":
        choices = {kind: request.POST.getlist(kind) for kind in Kind.values}
        try:
            services.preferences_set(user=request.user, choices=choices)
        except ValidationError as exc:
            for message in exc.messages:
                messages.error(request, message)
        else:
            messages.success(request, _("Saved: you will be told as chosen."))
        return redirect("notifications:settings")
    return render(request, "leasing/notifications_settings.html", _settings_context(request))


def _hook(request, pk: int) -> Webhook:
    hook = selectors.webhooks_managed_by(request.user).filter(pk=pk).first()
    if hook is None:
        raise Http404
    return hook


@login_required
@require_POST
def webhook_add(request):
    form = WebhookForm(request.POST, user=request.user)
    if form.is_valid():
        d = form.cleaned_data
        try:
            hook = services.webhook_create(
                user=request.user,
                team=d.get("team"),
                name=d["name"],
                url=d["url"],
                format=d["format"],
                secret=d["secret"],
                kinds=d["kinds"],
            )
        except PermissionDenied as exc:
            form.add_error("team", str(exc))
        except ValidationError as exc:
            by_field = exc.message_dict if hasattr(exc, "error_dict") else {None: exc.messages}
            for field, errors in by_field.items():
                for error in errors:
                    form.add_error(field if field in form.fields else None, error)
        else:
            messages.success(
                request,
                _("Webhook “%(name)s” added. Send a test to check it.") % {"name": hook.name},
            )
            return redirect("notifications:settings")
    response = render(
        request, "leasing/notifications_settings.html", _settings_context(request, form)
    )
    response.status_code = 400
    return response


@login_required
@require_POST
def webhook_remove(request, pk: int):
    hook = _hook(request, pk)
    services.webhook_delete(user=request.user, webhook=hook)
    messages.success(request, _("Webhook “%(name)s” deleted.") % {"name": hook.name})
    return redirect("notifications:settings")


@login_required
@require_POST
def webhook_send_test(request, pk: int):
    hook = _hook(request, pk)
    try:
        services.webhook_test(user=request.user, webhook=hook)
    except ValidationError as exc:
        messages.error(request, " ".join(exc.messages))
        return redirect("notifications:settings")
    messages.success(
        request,
        _("Test message on its way to “%(name)s”; reload in a few seconds to see how it went.")
        % {"name": hook.name},
    )
    return redirect("notifications:settings")


def notification_bell(request):
    """The header's bell alone (htmx polls it, so the unread count follows new notices).
    Signed out meanwhile: 286, htmx's "stop polling" (a redirect would swap the sign-in page
    into the header)."""
    if not request.user.is_authenticated:
        return HttpResponse(status=286)
    return render(request, "leasing/_notification_bell.html")
