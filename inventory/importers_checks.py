"""What an inventory import may read and store: size limits, and each value checked by the model
field that will store it.

The limits (``settings.CARDPOOL_IMPORT``) keep a hostile or broken file from exhausting memory.
:func:`field_errors` runs a value through the field's own checks (length, choices, validators
such as the hostname's) and the integer ranges every supported database enforces, so that a
value the database would refuse is a line in the report, the same on SQLite and PostgreSQL and
with or without ``--dry-run``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.backends.base.operations import BaseDatabaseOperations
from django.utils import translation

# The ranges PostgreSQL (and MySQL) enforce; SQLite's backend would allow 64 bits everywhere.
_INTEGER_RANGES = BaseDatabaseOperations.integer_field_ranges
# Keys whose YAML value may be a mapping of single values; ``cards`` may be a list of them.
_MAPPING_KEYS = ("labels", "software_versions")


@dataclass(frozen=True)
class ImportLimits:
    """How much one import may read (CARDPOOL_IMPORT_* in docs/operations.md; the defaults
    are in settings)."""

    max_bytes: int
    max_rows: int
    max_cards_per_node: int


def import_limits() -> ImportLimits:
    configured = settings.CARDPOOL_IMPORT
    return ImportLimits(
        max_bytes=configured["MAX_BYTES"],
        max_rows=configured["MAX_ROWS"],
        max_cards_per_node=configured["MAX_CARDS_PER_NODE"],
    )


def field_errors(model: type[models.Model], name: str, value: Any, label: str = "") -> list[str]:
    """Why *value* cannot be stored in ``model.name`` (empty when it can), in English like the
    rest of the import's report."""
    field = model._meta.get_field(name)
    label = label or name
    with translation.override("en"):
        try:
            cleaned = field.to_python(value)
            bounds = _INTEGER_RANGES.get(field.get_internal_type())
            if bounds is not None:
                MinValueValidator(bounds[0])(cleaned)
                MaxValueValidator(bounds[1])(cleaned)
            field.clean(cleaned, None)
        except ValidationError as exc:
            return [f"{label} {_short(value)}: {' '.join(exc.messages)}"]
    return []


def value_shape_errors(data: Mapping[Any, Any]) -> list[str]:
    """A row's values must be single values (mappings for labels, a list of mappings for
    cards) and hold no NUL character, which PostgreSQL cannot store in text or JSON."""
    errors = []
    for key, value in data.items():
        if key is None or key == "__line__":
            continue  # None: csv's list of fields beyond the header, ignored like unknown columns
        if _has_nul(key):
            errors.append(f"key {_short(key)} contains a NUL character")
        elif key == "cards" and isinstance(value, list):
            continue  # each card is checked where its position and line are known
        elif key in _MAPPING_KEYS and isinstance(value, dict):
            errors.extend(f"{key}: {e}" for e in value_shape_errors(value))
        elif isinstance(value, list | dict | set | tuple):
            errors.append(f"{key} must be a single value, not a {type(value).__name__}")
        elif _has_nul(value):
            errors.append(f"{key} contains a NUL character")
    return errors


def _has_nul(value: Any) -> bool:
    return "\x00" in value if isinstance(value, str) else False


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else f"{text[:37]}…{text[-2:]}"
