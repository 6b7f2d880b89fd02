"""Input refused in one place, before any view or serializer sees it.

* NUL characters: PostgreSQL text cannot hold them (a DataError, a 500). The middleware
  refuses them in the path (404), in the query string, cookies, the Authorization header,
  form posts and JSON bodies (400), so no lookup or field anywhere has to think of it.
* Unknown fields: every API input serializer derives from ``StrictSerializer``, which names
  the fields it does not know instead of dropping them silently (tests/test_strict_input.py
  walks every write route to check).
* Deep JSON: Python's parser recurses once per nesting level, so a body of a few thousand
  ``[`` is a RecursionError (a 500). ``json_loads`` measures the nesting first, without
  recursing, and refuses anything deeper than MAX_JSON_DEPTH; the API's JSON parser
  (``BoundedJSONParser``), the NUL check below and webhook replies all parse through it.
* Dates: far dates (year 1 or 9999) overflow the arithmetic done on them; ``validate_date``
  keeps a date within SANE_YEARS of today with a message that says so.
"""

from __future__ import annotations

import io
import json
import re
from datetime import date

from django.conf import settings
from django.core.exceptions import ValidationError
from django.http import Http404, HttpResponseBadRequest, JsonResponse
from django.utils import timezone
from django.utils.http import url_has_allowed_host_and_scheme
from django.utils.translation import gettext as _
from rest_framework import serializers
from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser

NUL = "\x00"
# Dates more than this many years from today are refused: no report, statement or lease
# needs them, and date arithmetic near year 1 or 9999 overflows.
SANE_YEARS = 100
# Most cards any one request, resize or quota may name (the largest pool we plan for).
MAX_CARDS = 4096
# Most cards a team or member limit may name: far above any pool, far below the column's range.
MAX_LIMIT_CARDS = 100_000
# Deepest JSON nesting accepted anywhere (no body of ours needs more than a handful).
MAX_JSON_DEPTH = 64

_JSON_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")


class JsonTooDeep(ValueError):
    """A JSON document nested deeper than MAX_JSON_DEPTH (refused before parsing)."""

    def __init__(self):
        super().__init__(
            _("The JSON body is nested more than %(most)s levels deep; send a flatter document.")
            % {"most": MAX_JSON_DEPTH}
        )


def json_depth_check(body: bytes | str) -> None:
    """JsonTooDeep when *body* nests arrays/objects deeper than MAX_JSON_DEPTH. Linear and
    without recursion: strings are cut out, then the brackets left are counted."""
    raw = body.encode() if isinstance(body, str) else bytes(body)
    if raw.count(b"[") + raw.count(b"{") <= MAX_JSON_DEPTH:
        return  # the usual body: too few brackets to nest that deep, whatever the strings hold
    brackets = _JSON_STRING.sub(b"", raw).translate(None, _NOT_BRACKETS)
    if len(brackets) <= MAX_JSON_DEPTH:
        return
    depth = 0
    for byte in brackets:
        depth += 1 if byte in (0x5B, 0x7B) else -1
        if depth > MAX_JSON_DEPTH:
            raise JsonTooDeep


def json_loads(body: bytes | str, **kwargs):
    """``json.loads`` that refuses a too-deep document (JsonTooDeep, a ValueError) first."""
    json_depth_check(body)
    return json.loads(body, **kwargs)


class BoundedJSONParser(JSONParser):
    """DRF's JSON parser behind the nesting check: too deep is a 400 that says so."""

    def parse(self, stream, media_type=None, parser_context=None):
        body = stream.read() if stream is not None else b""
        try:
            json_depth_check(body)
        except JsonTooDeep as exc:
            raise ParseError(str(exc)) from None
        return super().parse(io.BytesIO(body), media_type, parser_context)


def _has_nul(value) -> bool:
    if isinstance(value, str):
        return NUL in value
    if isinstance(value, dict):
        return any(_has_nul(k) or _has_nul(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_has_nul(v) for v in value)
    return False


def _json_has_nul(request) -> bool:
    if "json" not in request.content_type:
        return False
    body = request.body  # read once; Django keeps it for the parser that follows
    if b"\x00" not in body and b"\\u0000" not in body.lower():
        return False
    try:
        return _has_nul(json_loads(body))
    except ValueError:  # malformed or too deep: the parser answers it
        return NUL.encode() in body


class RefuseNulMiddleware:
    """A NUL character anywhere in the request: 404 in the path, 400 elsewhere."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        if NUL in request.path:
            raise Http404
        found = any(NUL in k or any(NUL in v for v in request.GET.getlist(k)) for k in request.GET)
        # Cookies too: Django unquotes "\\000" in a quoted cookie to NUL, and the session
        # lookup would send it to the database. Headers the app reads (Authorization).
        found = found or any(NUL in k or NUL in v for k, v in request.COOKIES.items())
        found = found or NUL in request.headers.get("Authorization", "")
        if not found and request.method not in ("GET", "HEAD", "OPTIONS"):
            if request.content_type in ("application/x-www-form-urlencoded", "multipart/form-data"):
                found = any(
                    NUL in k or any(NUL in v for v in request.POST.getlist(k)) for k in request.POST
                )
            else:
                found = _json_has_nul(request)
        if found:
            message = _("The request contains a NUL character, which no field accepts.")
            if request.path.startswith("/api/"):
                return JsonResponse({"detail": message}, status=400)
            return HttpResponseBadRequest(message)
        return self.get_response(request)


class StrictInputMixin:
    """Refuse fields the serializer does not know, naming them (400), instead of dropping them."""

    def to_internal_value(self, data):
        if isinstance(data, dict):
            writable = {name for name, field in self.fields.items() if not field.read_only}
            unknown = sorted(str(k) for k in data if k not in writable)
            if unknown:
                raise serializers.ValidationError(
                    {
                        name: [
                            _("Unknown field; this endpoint does not take “%(name)s”.")
                            % {"name": name}
                        ]
                        for name in unknown
                    }
                )
        return super().to_internal_value(data)


class StrictSerializer(StrictInputMixin, serializers.Serializer):
    """The base of every API input serializer."""


def _date_range_message() -> str:
    year = timezone.now().year
    return _("Give a date within %(years)s years of today (%(first)s to %(last)s).") % {
        "years": SANE_YEARS,
        "first": year - SANE_YEARS,
        "last": year + SANE_YEARS,
    }


def validate_date(value: date) -> None:
    """Refuse a date further than SANE_YEARS from today (a form or serializer validator)."""
    if value is not None and abs(value.year - timezone.now().year) > SANE_YEARS:
        raise ValidationError(_date_range_message(), code="date_range")


class DateTimeField(serializers.DateTimeField):
    """DRF's DateTimeField within SANE_YEARS of today. DRF's own overflows (a 500) when it
    moves a naive time near year 1 or 9999 into UTC; this answers the range instead."""

    def __init__(self, **kwargs):
        kwargs["validators"] = [*kwargs.get("validators", ()), validate_date]
        super().__init__(**kwargs)

    def to_internal_value(self, value):
        try:
            return super().to_internal_value(value)
        except OverflowError:
            raise serializers.ValidationError(_date_range_message(), code="date_range") from None


def validate_lease_minutes(minutes: int) -> None:
    """A lease length in minutes no longer than the site's MAX_LEASE_MINUTES (and so never
    one that overflows the date arithmetic behind it)."""
    most = settings.CARDPOOL["MAX_LEASE_MINUTES"]
    if minutes is not None and minutes > most:
        raise ValidationError(
            _(
                "The longest lease is %(hours)s hours (%(minutes)s minutes); ask for less and extend later."
            )
            % {"hours": most // 60, "minutes": most},
            code="max_value",
        )


def validate_lease_hours(hours: int) -> None:
    """A lease length in hours (a quota's longest lease) within the site's MAX_LEASE_MINUTES."""
    if hours is not None:
        validate_lease_minutes(hours * 60)


class NoBodySerializer(StrictSerializer):
    """The input of an action that takes none: any field given is refused by name."""


def refuse_body(request) -> None:
    """For actions without input: a body with fields is a 400 that names them."""
    NoBodySerializer(data=request.data if hasattr(request.data, "keys") else {}).is_valid(
        raise_exception=True
    )


def local_next(request) -> str | None:
    """The ``next`` a form posted, when it is a path on this site; None otherwise.

    ``redirect("²")`` would try to reverse "²" as a view name (a NoReverseMatch, a 500):
    only an absolute path on this host is followed.
    """
    back = request.POST.get("next", "")
    if back.startswith("/") and url_has_allowed_host_and_scheme(
        back, allowed_hosts={request.get_host()}
    ):
        return back
    return None


def form_error_lines(form, *, given_only: bool = False) -> list[str]:
    """A form's errors as a person reads them: "<field's label>: <reason>" (the label in the
    reader's language, never the field's key), the form's own errors as they are. With
    *given_only*, only errors on fields the person filled in (a live preview does not nag
    about fields not reached yet)."""
    lines = []
    for name, errors in form.errors.items():
        field = form.fields.get(name)
        if given_only and (field is None or form.data.get(form.add_prefix(name)) in (None, "")):
            continue
        for error in errors:
            if field is not None and field.label:
                error = _("%(field)s: %(error)s") % {"field": field.label, "error": error}
            lines.append(str(error))
    return lines
