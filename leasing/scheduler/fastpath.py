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
from django.db.models import Exists, OuterRef, Q, QuerySet

from inventory.models import Card
from leasing import statements
from leasing.choices import LeaseStatus
from leasing.models import Allocation
from leasing.scheduler.availability import usable_cards

# place_now as one statement (PostgreSQL and SQLite ≥ 3.25 both have window functions): the
# ORM version took two queries, each repeating the anti-join and its planning. The free cards
# (the CTE) are built by the ORM from the one "usable card" rule (``availability.usable_cards``)
# and the allocations overlapping the window, as ``snapshot`` gives them to the planner (a
# lease marked for preemption holds its cards only until its ``preempt_at``); the choice of
# node and domain is plain SQL. tests/leasing/test_fastpath.py holds it to the planner.
_CHOOSE_SQL = """
WITH free(id, node_id, domain, idx) AS (SELECT * FROM ({free}) AS f0{unless_queued}),
domains AS (
    SELECT node_id, domain, COUNT(*) AS n,
           SUM(COUNT(*)) OVER (PARTITION BY node_id) AS node_free
    FROM free
    GROUP BY node_id, domain
),
best AS (
    SELECT node_id, domain FROM domains
    WHERE n >= %s
    ORDER BY node_free, n, node_id, domain
    LIMIT 1
)
SELECT f.id FROM free f
JOIN best b ON b.node_id = f.node_id AND b.domain = f.domain
ORDER BY f.idx
LIMIT %s
"""


# With ``unless_queued``: no cards when someone waits for the model (the queue's check and
# the placement in one round trip; the caller then runs the full pass, as for no fit). At the
# head of the statement, uncorrelated: the database checks it once, before looking for free
# cards (a request that meets a queue does not pay for the search).
_UNLESS_QUEUED = """
    WHERE NOT EXISTS (SELECT 1 FROM leasing_lease WHERE card_model_id = %s AND status = %s)"""


def free_cards(
    card_model_id: int,
    *,
    start: datetime,
    end: datetime,
    nodes: frozenset[int] | None = None,
) -> QuerySet[Card]:
    """The model's cards that can hold a lease over [start, end) and nobody holds then, on
    *nodes* (the lease's requirements, ``inventory.requirements.nodes_meeting``) if given."""
    busy = Allocation.objects.filter(
        card=OuterRef("pk"), start_at__lt=end, end_at__gt=start
    ).filter(
        Q(lease__preempt_at__isnull=True)
        | Q(lease__preempt_cards__isnull=False)  # partial: the taken cards' periods end then
        | Q(lease__preempt_at__gt=start)
    )
    cards = usable_cards(start, end).filter(card_model_id=card_model_id)
    if nodes is not None:
        cards = cards.filter(node_id__in=sorted(nodes))
    return cards.filter(~Exists(busy))


def place_now(
    card_model_id: int,
    *,
    count: int,
    start: datetime,
    end: datetime,
    nodes: frozenset[int] | None = None,
    unless_queued: bool = False,
) -> list[int] | None:
    """*count* cards on one node and one interconnect domain, free over [start, end) (start is
    now), chosen as ``planner.place`` would; None when that takes more than one domain, or,
    with *unless_queued*, when a lease waits for the model (the queue read in the same
    statement)."""
    if nodes is not None and not nodes:
        return None  # no node meets the requirements: the caller says why
    free_sql, free_params = _free_sql(card_model_id, start=start, end=end, nodes=nodes)
    queued_sql, queued_params = (
        (_UNLESS_QUEUED, (card_model_id, LeaseStatus.QUEUED)) if unless_queued else ("", ())
    )
    sql = _CHOOSE_SQL.format(free=free_sql, unless_queued=queued_sql)
    with connection.cursor() as cursor:
        cursor.execute(sql, (*free_params, *queued_params, count, count))
        ids = [row[0] for row in cursor.fetchall()]
    return ids or None


# The free-card statement is the same text for every model and window (only its parameters
# change), and building it through the ORM costs more than running it: it is built once per
# process and database vendor, then reused with the call's parameters (leasing.statements).
def _free_sql(
    card_model_id: int, *, start: datetime, end: datetime, nodes: frozenset[int] | None
) -> tuple[str, tuple]:
    def build(model: int, start: datetime, end: datetime, nodes=nodes):
        return (
            free_cards(model, start=start, end=end, nodes=nodes)
            .order_by()
            .values_list("id", "node_id", "interconnect_domain", "index")
        )

    if nodes is not None:  # the node list changes the text: built every time
        return build(card_model_id, start, end).query.sql_with_params()
    return statements.reused("fastpath.free", build, model=card_model_id, start=start, end=end)
