"""Placing a request for free cards in SQL, when nobody waits for the card model.

The full queue pass (``run.schedule_card_model``) loads every card and every open
allocation of the model into Python and plans the whole queue: right when there is a queue,
but most requests in a pool with free cards meet no queue at all, and then the pass can only
decide one thing: put the new lease on the best-fitting node and interconnect domain now.
``place_now`` answers that one question with one query over the free cards and chooses
exactly as ``planner.place`` does in its first step (one node, one domain; the node with the
fewest free cards, then the domain with the fewest, then the lowest ids). Anything else
(the cards must span domains or nodes, or do not fit now) returns None, and the caller runs
the full pass. The caller holds the model's lock; the exclusion constraint stays the guard.
"""

from __future__ import annotations

from datetime import datetime

from django.db import connection

from inventory.models import Card, Node
from leasing.choices import LeaseStatus
from leasing.models import Lease


def queue_is_empty(card_model_id: int) -> bool:
    return not Lease.objects.filter(card_model_id=card_model_id, status=LeaseStatus.QUEUED).exists()


# place_now as one statement (PostgreSQL and SQLite ≥ 3.25 both have window functions): the
# ORM version took two queries, each repeating the anti-join and its planning, plus the ORM's
# own compile time. The free cards are those ``snapshot.card_slots`` and ``snapshot.timeline_for``
# would give the planner: healthy, on a node that is up (or draining after the end), with no
# allocation overlapping the window; a lease marked for preemption holds its cards only until
# its ``preempt_at``. tests/leasing/test_fastpath.py holds this to the planner's answer.
_PLACE_NOW_SQL = """
WITH free AS (
    SELECT c.id, c.node_id, c.interconnect_domain AS domain, c."index" AS idx
    FROM inventory_card c
    JOIN inventory_node n ON n.id = c.node_id
    WHERE c.card_model_id = %(model)s AND c.status = %(ok)s
      AND (n.status = %(active)s OR (n.status = %(draining)s AND n.drain_at >= %(end)s))
      AND NOT EXISTS (
          SELECT 1 FROM leasing_allocation a
          JOIN leasing_lease l ON l.id = a.lease_id
          WHERE a.card_id = c.id AND a.start_at < %(end)s AND a.end_at > %(start)s
            AND (l.preempt_at IS NULL OR l.preempt_at > %(start)s)
      )
),
domains AS (
    SELECT node_id, domain, COUNT(*) AS n,
           SUM(COUNT(*)) OVER (PARTITION BY node_id) AS node_free
    FROM free
    GROUP BY node_id, domain
),
best AS (
    SELECT node_id, domain FROM domains
    WHERE n >= %(count)s
    ORDER BY node_free, n, node_id, domain
    LIMIT 1
)
SELECT f.id FROM free f
JOIN best b ON b.node_id = f.node_id AND b.domain = f.domain
ORDER BY f.idx
LIMIT %(count)s
"""


def place_now(
    card_model_id: int, *, count: int, start: datetime, end: datetime
) -> list[int] | None:
    """*count* cards on one node and one interconnect domain, free over [start, end) (start is
    now), chosen as ``planner.place`` would; None when that takes more than one domain."""
    adapt = connection.ops.adapt_datetimefield_value
    params = {
        "model": card_model_id,
        "ok": Card.Status.OK,
        "active": Node.Status.ACTIVE,
        "draining": Node.Status.DRAINING,
        "start": adapt(start),
        "end": adapt(end),
        "count": count,
    }
    with connection.cursor() as cursor:
        cursor.execute(_PLACE_NOW_SQL, params)
        ids = [row[0] for row in cursor.fetchall()]
    return ids or None
