"""The one way to take row locks, always in primary-key order so two writers never deadlock."""

from __future__ import annotations

from collections.abc import Iterable

from inventory.models import CardModel
from portal.models import Team


def lock_card_models(card_model_ids: Iterable[int]) -> list[int]:
    """Lock the card models whose cards a transaction is about to book (after any team lock).

    Placement for one model is serialized on its row (PostgreSQL); on SQLite the
    IMMEDIATE transaction already serializes every writer. The exclusion constraint
    stays the last line of defence either way.
    """
    ids = sorted(set(card_model_ids))
    return list(
        CardModel.objects.select_for_update()
        .filter(pk__in=ids)
        .order_by("pk")
        .values_list("pk", flat=True)
    )


def lock_team(team_id: int) -> None:
    """Lock a team while its quota is checked and charged; always before any card model lock."""
    Team.objects.select_for_update().filter(pk=team_id).values_list("pk", flat=True).first()
