"""The catalogue of real card models, kept as data in ``inventory/data/card_models.yaml``.

``catalogue_sync`` upserts that file into the ``CardModel`` table by slug. It runs from the
data migration ``0002_card_catalogue`` (so a fresh database has the catalogue) and from
``manage.py load_catalogue`` (to bring an existing database up to date with the file).

Every entry is checked before anything is written; a bad entry raises ``ValueError`` that
names its slug and the problem, and the database is left as it was.
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

import yaml
from django.core.exceptions import ValidationError
from django.core.validators import URLValidator, validate_slug
from django.db import models, transaction

from inventory.models import CardModel, InterconnectKind, StackFamily, Vendor

CATALOGUE_PATH = Path(__file__).resolve().parent / "data" / "card_models.yaml"

REQUIRED_KEYS = ("slug", "vendor", "name", "memory_gb")

# Applied when a model is created; later syncs leave the operator's price alone.
CREATE_ONLY_KEYS = frozenset({"price_per_hour"})

# Keys the catalogue may set: every field of the real model except the primary key.
# Checked against the current model, so a key added to the model and the file later does
# not break the 0002 migration, whose historical model simply lacks that field.
_FIELDS: dict[str, models.Field] = {
    f.name: f for f in CardModel._meta.concrete_fields if not f.primary_key
}

_CHOICES: dict[str, frozenset[str]] = {
    "vendor": frozenset(Vendor.values),
    "interconnect_kind": frozenset(InterconnectKind.values),
    "stack_family": frozenset(StackFamily.values),
}


def catalogue_sync(
    *, path: Path | str | None = None, card_model_cls: type[models.Model] | None = None
) -> tuple[int, int]:
    """Create or update card models from the catalogue file, matching on slug.

    ``card_model_cls`` is the model class to write through: the real ``CardModel`` by
    default, or the historical one a migration gets from ``apps.get_model``. Only the keys
    an entry states are written (``visible_devices_env`` and other fields the file leaves
    out stay as the operator set them); ``price_per_hour`` is written only on create.

    Returns ``(created, updated)``. Values are compared before writing, so a second run
    over an unchanged file returns ``(0, 0)`` and saves nothing.
    """
    cls = card_model_cls or CardModel
    entries = load_catalogue(path)
    writable = {f.name for f in cls._meta.concrete_fields}
    manager = cls._default_manager
    created = updated = 0
    with transaction.atomic(using=manager.db):
        existing = {obj.slug: obj for obj in manager.filter(slug__in=[e["slug"] for e in entries])}
        for entry in entries:
            values = {k: v for k, v in entry.items() if k in writable}
            obj = existing.get(entry["slug"])
            if obj is None:
                manager.create(**values)
                created += 1
                continue
            changed = [
                key
                for key, value in values.items()
                if key not in CREATE_ONLY_KEYS and getattr(obj, key) != value
            ]
            if changed:
                for key in changed:
                    setattr(obj, key, values[key])
                obj.save(update_fields=changed)
                updated += 1
    return created, updated


def load_catalogue(path: Path | str | None = None) -> list[dict[str, Any]]:
    """Read and check the catalogue file; return its entries with values in model types.

    Raises ``ValueError`` naming the entry's slug (or its position, if it has none) and
    the problem, for the first bad entry found.
    """
    source = Path(path) if path is not None else CATALOGUE_PATH
    try:
        data = yaml.safe_load(source.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise ValueError(f"card catalogue {source}: not valid YAML: {exc}") from exc
    if not isinstance(data, list):
        raise ValueError(f"card catalogue {source}: expected a list of mappings")
    entries: list[dict[str, Any]] = []
    seen: set[str] = set()
    for position, raw in enumerate(data, start=1):
        entry = _clean_entry(raw, position)
        if entry["slug"] in seen:
            raise ValueError(f"card model {entry['slug']!r}: slug appears more than once")
        seen.add(entry["slug"])
        entries.append(entry)
    return entries


def _clean_entry(raw: object, position: int) -> dict[str, Any]:
    """Check one entry and convert its values; raise ``ValueError`` on the first problem."""
    if not isinstance(raw, Mapping):
        raise ValueError(f"card catalogue entry #{position}: expected a mapping")
    label = (
        f"card model {raw['slug']!r}" if raw.get("slug") else f"card catalogue entry #{position}"
    )
    unknown = sorted(str(k) for k in raw if k not in _FIELDS)
    if unknown:
        raise ValueError(f"{label}: unknown key(s) {', '.join(unknown)}")
    missing = [k for k in REQUIRED_KEYS if raw.get(k) in (None, "")]
    if missing:
        raise ValueError(f"{label}: missing required {', '.join(missing)}")
    entry: dict[str, Any] = {}
    for key, value in raw.items():
        try:
            entry[key] = _convert(_FIELDS[key], value)
        except ValueError as exc:
            raise ValueError(f"{label}: {key}: {exc}") from None
    if entry["memory_gb"] <= 0:
        raise ValueError(f"{label}: memory_gb: must be greater than 0")
    return entry


def _convert(field: models.Field, value: Any) -> Any:
    """Turn a YAML value into what ``field`` stores, or raise ``ValueError`` saying why not."""
    if value is None or value == "":
        if field.null:
            return None
        if isinstance(field, models.CharField | models.TextField):
            return ""
        raise ValueError("may not be empty")
    if isinstance(field, models.BooleanField):
        if not isinstance(value, bool):
            raise ValueError(f"expected true or false, got {value!r}")
        return value
    if isinstance(field, models.DecimalField):
        return _decimal(field, value)
    if isinstance(field, models.IntegerField):
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"expected a whole number, got {value!r}")
        if (
            isinstance(field, models.PositiveIntegerField | models.PositiveSmallIntegerField)
            and value < 0
        ):
            raise ValueError("may not be negative")
        return value
    if isinstance(field, models.CharField | models.TextField):
        return _text(field, value)
    raise ValueError(f"the catalogue cannot set a {type(field).__name__}")  # pragma: no cover


def _decimal(field: models.DecimalField, value: Any) -> Decimal:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ValueError(f"expected a number, got {value!r}")
    try:
        number = Decimal(str(value))
    except InvalidOperation:
        raise ValueError(f"expected a number, got {value!r}") from None
    if not number.is_finite() or number < 0:
        raise ValueError(f"expected a non-negative number, got {value!r}")
    exponent = number.as_tuple().exponent
    assert isinstance(exponent, int)  # finite, checked above
    if -exponent > field.decimal_places:
        raise ValueError(f"{value!r} has more than {field.decimal_places} decimal place(s)")
    if len(number.quantize(Decimal(1)).as_tuple().digits) > field.max_digits - field.decimal_places:
        raise ValueError(f"{value!r} is too large")
    return number


def _text(field: models.Field, value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError(f"expected text, got {value!r}")
    value = value.strip()
    if field.max_length and len(value) > field.max_length:
        raise ValueError(f"longer than {field.max_length} characters")
    allowed = _CHOICES.get(field.name)
    if allowed is not None and value not in allowed:
        raise ValueError(f"{value!r} is not one of {', '.join(sorted(allowed))}")
    try:
        if isinstance(field, models.SlugField):
            validate_slug(value)
        elif isinstance(field, models.URLField):
            URLValidator()(value)
    except ValidationError:
        raise ValueError(f"{value!r} is not a valid {type(field).__name__[:-5].lower()}") from None
    return value
