"""The audit trail for changes that are not a lease's own timeline."""

from __future__ import annotations

import json

from django.core.serializers.json import DjangoJSONEncoder
from django.utils import timezone

from portal.models import AuditEntry


def audit(*, actor, action: str, target: str, **data) -> AuditEntry:
    """Record that *actor* did *action* to *target* (call inside the change's transaction)."""
    return AuditEntry.objects.create(
        at=timezone.now(),
        actor=actor if getattr(actor, "pk", None) else None,
        action=action,
        target=str(target)[:200],
        data=json.loads(json.dumps(data, cls=DjangoJSONEncoder)),  # decimals, times → strings
    )
