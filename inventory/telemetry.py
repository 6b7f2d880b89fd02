"""Card telemetry: node tokens, recording samples, the DCGM pull, hourly summaries, and the
reads that idle detection and the lease chart need.

Samples (``CardSample``) are kept for CARDPOOL_TELEMETRY_RETENTION_HOURS, then rolled up into
one ``CardHourly`` row per card and hour (UTC) and deleted. Memory is in MiB, as every source
reports it.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import math
import secrets
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured, ValidationError
from django.db import connection, transaction
from django.db.models import Count, F, Max, Sum
from django.db.models.functions import TruncHour
from django.utils import timezone
from django.utils.dateparse import parse_datetime
from django.utils.translation import gettext as _

from inventory import agent
from inventory.models import Card, CardHourly, CardSample, Node

logger = logging.getLogger(__name__)

TOKEN_PREFIX = "cpn_"  # tells a node token from a personal one ("cp_") at a glance
MAX_SAMPLES = 1000  # per call: 8 cards × 2 minutes of 1 s readings, with room to spare
MAX_ERRORS_SHOWN = 20
FUTURE_SKEW = timedelta(minutes=5)  # nodes' clocks drift; more than this is a wrong clock
# Plausible ranges; readings outside them are a broken source, not a busy card.
LIMITS: dict[str, tuple[float, float]] = {
    "utilization_pct": (0, 100),
    "memory_used_mb": (0, 4 * 1024 * 1024),
    "temperature_c": (-40, 150),
    "power_w": (0, 10_000),
}
READINGS = tuple(LIMITS)
SAMPLE_KEYS = frozenset({"uuid", "index", "at", *READINGS})
SUMMARY_CHUNK = 5000  # samples per transaction (below SQLite's bound-parameter limit)
SUMMARY_MAX_CHUNKS = 200  # per run: a bounded batch; the next run takes the rest
PULL_BATCH = 100  # nodes per DCGM pull run, stalest first
PULL_WORKERS = 16
PULL_TIMEOUT = 5  # seconds per exporter
HOUR = timedelta(hours=1)
MIN_RETENTION_HOURS = 2


def retention() -> timedelta:
    """How long raw samples are kept before they are summarised (default 48 hours)."""
    hours = settings.CARDPOOL["TELEMETRY_RETENTION_HOURS"]
    if not isinstance(hours, int) or hours < MIN_RETENTION_HOURS:
        raise ImproperlyConfigured(
            f"CARDPOOL_TELEMETRY_RETENTION_HOURS={hours!r}: give a whole number of hours, "
            f"at least {MIN_RETENTION_HOURS} (idle detection reads the recent raw samples)"
        )
    return timedelta(hours=hours)


# --- Node tokens -----------------------------------------------------------------------------


def token_digest(token: str) -> str:
    """SHA-256 of a node token; tokens carry 256 random bits, so a slow hash adds nothing."""
    return hashlib.sha256(token.encode()).hexdigest()


def node_token_issue(*, node: Node) -> str:
    """Give *node* a new agent token and return it; only its hash is stored, so this is the
    only time anyone sees it. Any earlier token of the node stops working."""
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    digest = token_digest(token)
    Node.objects.filter(pk=node.pk).update(agent_token_hash=digest, updated_at=timezone.now())
    node.agent_token_hash = digest
    return token


def node_token_revoke(*, node: Node) -> None:
    """Take the node's agent token away; its agent is refused until a new one is issued."""
    Node.objects.filter(pk=node.pk).update(agent_token_hash="", updated_at=timezone.now())
    node.agent_token_hash = ""


def node_by_token(token: str) -> Node | None:
    """The node this agent token belongs to, or None.

    The lookup is by digest, so the database never compares the secret itself; the final
    compare_digest keeps the check constant-time whatever the database does.
    """
    if not token:
        return None
    digest = token_digest(token)
    # Every node posts every 30 s: an indexed lookup of the few fields ingest needs, unordered.
    node = next(
        iter(
            Node.objects.filter(agent_token_hash=digest)
            .only("pk", "hostname", "agent_token_hash", "telemetry_seen_at")
            .order_by()[:1]
        ),
        None,
    )
    if node is None or not hmac.compare_digest(node.agent_token_hash, digest):
        return None
    return node


# --- Recording -------------------------------------------------------------------------------


def _card_for(raw: dict, by_uuid: dict[str, int], by_index: dict[int, int], node: Node) -> int:
    """The id of the card *raw* names (by uuid, else index) on *node*."""
    uuid, index = raw.get("uuid") or None, raw.get("index")
    if uuid is None and index is None:
        raise ValidationError(_("Name the card by its uuid or index."))
    if uuid is not None and not isinstance(uuid, str):
        raise ValidationError(_("uuid must be a string."))
    if uuid and uuid in by_uuid:
        return by_uuid[uuid]
    if index is not None:
        if isinstance(index, str) and index.strip().isascii() and index.strip().isdigit():
            index = int(index)
        if isinstance(index, bool) or not isinstance(index, int):
            raise ValidationError(_("index must be a whole number."))
        if index in by_index:
            return by_index[index]
        raise ValidationError(
            _("Node %(node)s has no card with index %(index)s (it has %(known)s).")
            % {"node": node.hostname, "index": index, "known": _known(by_index) or "—"}
        )
    raise ValidationError(
        _("Node %(node)s has no card with UUID %(uuid)s.") % {"node": node.hostname, "uuid": uuid}
    )


def _known(by_index: dict[int, int]) -> str:
    return ", ".join(str(i) for i in sorted(by_index))


def _sample_time(value: object, now: datetime) -> datetime:
    if value is None:
        return now
    if isinstance(value, str):
        try:
            at = parse_datetime(value.strip())
        except ValueError:
            at = None
        if at is None:
            raise ValidationError(
                _("at %(value)r is not an ISO 8601 time (e.g. 2026-03-02T08:00:00Z).")
                % {"value": value[:40]}
            )
    elif isinstance(value, datetime):
        at = value
    else:
        raise ValidationError(_("at must be an ISO 8601 time string."))
    if timezone.is_naive(at):
        raise ValidationError(
            _("at %(value)s has no time zone: add Z or an offset such as +08:00.")
            % {"value": at.isoformat()}
        )
    if at > now + FUTURE_SKEW:
        raise ValidationError(
            _(
                "at %(value)s is in the future (the portal's time is %(now)s): check the node's "
                "clock (NTP)."
            )
            % {"value": at.isoformat(), "now": now.astimezone(UTC).isoformat(timespec="seconds")}
        )
    if at < now - retention():
        raise ValidationError(
            _("at %(value)s is older than the %(hours)s hours that samples are kept.")
            % {"value": at.isoformat(), "hours": int(retention() / HOUR)}
        )
    return at.astimezone(UTC)


def _brief(value: float) -> str:
    text = str(value)
    return text if len(text) <= 20 else text[:17] + "…"


def _readings(raw: dict) -> dict[str, float | None]:
    values: dict[str, float | None] = {}
    for key, (low, high) in LIMITS.items():
        value = raw.get(key)
        if value is None:
            values[key] = None
            continue
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ValidationError(_("%(key)s must be a number.") % {"key": key})
        if not low <= value <= high or not math.isfinite(value):
            raise ValidationError(
                _("%(key)s %(value)s is outside %(low)s–%(high)s.")
                % {"key": key, "value": _brief(value), "low": low, "high": high}
            )
        values[key] = float(value)
    if all(value is None for value in values.values()):
        raise ValidationError(
            _("A sample needs at least one reading: %(keys)s.") % {"keys": ", ".join(READINGS)}
        )
    return values


_INSERT_COLUMNS = ("card_id", "at", *READINGS)


def _insert_new(rows: dict[tuple[int, datetime], dict[str, float | None]]) -> int:
    """Insert the readings not stored yet; returns how many were new. One statement per 500
    rows, ``ON CONFLICT DO NOTHING`` on the (card, at) unique constraint (PostgreSQL and
    SQLite ≥ 3.24 alike): a reading already stored, or stored by a concurrent post of the same
    batch, is skipped. Plain SQL, not ``bulk_create``: this runs for every node every 30 s
    (bench/health_ingest.py), and the ORM's model instances and the extra SELECT that counted
    the new rows were most of its cost."""
    table = connection.ops.quote_name(CardSample._meta.db_table)
    columns = ", ".join(connection.ops.quote_name(c) for c in _INSERT_COLUMNS)
    at_field = CardSample._meta.get_field("at")
    items = list(rows.items())
    inserted = 0
    with connection.cursor() as cursor:
        for start in range(0, len(items), 500):
            chunk = items[start : start + 500]
            params: list = []
            for (card_id, at), values in chunk:
                params.append(card_id)
                params.append(at_field.get_db_prep_value(at, connection))
                params.extend(values[key] for key in READINGS)
            row = "(" + ", ".join(["%s"] * len(_INSERT_COLUMNS)) + ")"
            cursor.execute(
                f"INSERT INTO {table} ({columns}) VALUES {', '.join([row] * len(chunk))} "  # noqa: S608 - names from _meta, values as parameters
                "ON CONFLICT DO NOTHING",
                params,
            )
            inserted += max(cursor.rowcount, 0)
    return inserted


def telemetry_record(*, node: Node, samples: list[dict], now: datetime | None = None) -> int:
    """Store readings of *node*'s cards; returns how many new samples were stored.

    Each sample names its card by ``uuid`` (tried first) or ``index`` on this node and
    carries ``at`` (ISO 8601 with a time zone; default now) and any of utilization_pct,
    memory_used_mb (MiB), temperature_c, power_w. A sample already stored (same card and
    time) is skipped. All or nothing: one bad sample rejects the call with a message per
    bad sample, and nothing is written. Marks the node as seen.
    """
    now = now or timezone.now()
    if not isinstance(samples, list) or not samples:
        raise ValidationError({"samples": [_("Send a list of at least one sample.")]})
    if len(samples) > MAX_SAMPLES:
        raise ValidationError(
            {"samples": [_("At most %(n)s samples per call.") % {"n": MAX_SAMPLES}]}
        )
    cards = list(Card.objects.filter(node=node).values_list("pk", "uuid", "index"))
    by_uuid = {uuid: pk for pk, uuid, _index in cards}
    by_index = {index: pk for pk, _uuid, index in cards}
    errors: list[str] = []
    rows: dict[tuple[int, datetime], dict[str, float | None]] = {}
    for position, raw in enumerate(samples):
        try:
            if not isinstance(raw, dict):
                raise ValidationError(_("Each sample must be an object."))
            if unknown := sorted(str(key) for key in raw if key not in SAMPLE_KEYS):
                # Refused, not dropped: a misspelt reading would otherwise vanish unnoticed.
                raise ValidationError(
                    [
                        _("Unknown field; this endpoint does not take “%(name)s”.") % {"name": name}
                        for name in unknown
                    ]
                )
            card_id = _card_for(raw, by_uuid, by_index, node)
            at = _sample_time(raw.get("at"), now)
            values = _readings(raw)
        except ValidationError as exc:
            errors.extend(f"samples[{position}]: {message}" for message in exc.messages)
            continue
        rows.setdefault((card_id, at), values)
    if errors:
        if len(errors) > MAX_ERRORS_SHOWN:
            more = len(errors) - MAX_ERRORS_SHOWN
            errors = errors[:MAX_ERRORS_SHOWN] + [_("… and %(n)s more.") % {"n": more}]
        raise ValidationError({"samples": errors})
    with transaction.atomic():
        new = _insert_new(rows)
        Node.objects.filter(pk=node.pk).update(telemetry_seen_at=now)
    node.telemetry_seen_at = now
    return new


# --- DCGM pull -------------------------------------------------------------------------------


def _matching(node: Node, parsed: list[dict]) -> list[dict]:
    """The exporter's GPUs that are cards of *node* (by UUID, else by index)."""
    cards = list(Card.objects.filter(node=node).values_list("uuid", "index"))
    uuids, indexes = {uuid for uuid, _i in cards}, {index for _u, index in cards}
    kept = []
    for sample in parsed:
        if sample.get("uuid") in uuids or sample.get("index") in indexes:
            kept.append(sample)
        else:
            logger.warning(
                "DCGM exporter of %s reports GPU %s (%s), which is not a card of the node",
                node.hostname,
                sample.get("index"),
                sample.get("uuid", "no UUID"),
            )
    return kept


def telemetry_pull_node(*, node: Node, text: str, now: datetime | None = None) -> int:
    """Record one scrape of *node*'s DCGM exporter page; returns the new samples stored."""
    now = now or timezone.now()
    samples = [{**sample, "at": now} for sample in _matching(node, agent.parse_dcgm(text))]
    if not samples:
        raise ValidationError(_("The exporter reported none of the node's cards."))
    return telemetry_record(node=node, samples=samples, now=now)


def telemetry_pull_dcgm(
    *, fetch: Callable[..., str] | None = None, now: datetime | None = None
) -> dict[str, int]:
    """Scrape the DCGM exporter of every node that has one (the stalest PULL_BATCH first).

    Pages are fetched in parallel; a node whose exporter fails or reports nonsense is logged
    and skipped, the others are recorded.
    """
    fetch = fetch or agent.fetch_text
    now = (now or timezone.now()).replace(microsecond=0)
    nodes = list(
        Node.objects.exclude(dcgm_url="").order_by(
            F("telemetry_seen_at").asc(nulls_first=True), "pk"
        )[:PULL_BATCH]
    )
    result = {"nodes": len(nodes), "samples": 0, "failed": 0}
    if not nodes:
        return result
    with ThreadPoolExecutor(max_workers=min(PULL_WORKERS, len(nodes))) as pool:
        pages = {node.pk: pool.submit(fetch, node.dcgm_url, timeout=PULL_TIMEOUT) for node in nodes}
    for node in nodes:
        try:
            text = pages[node.pk].result()
            result["samples"] += telemetry_pull_node(node=node, text=text, now=now)
        except ValidationError as exc:
            result["failed"] += 1
            logger.warning("DCGM pull from %s: %s", node.hostname, "; ".join(exc.messages))
        except Exception as exc:  # one broken exporter must not stop the others
            result["failed"] += 1
            logger.warning("DCGM pull from %s (%s) failed: %s", node.hostname, node.dcgm_url, exc)
    return result


# --- Summaries -------------------------------------------------------------------------------


def _weighted(old_avg: float | None, old_n: int, add_sum: float | None, add_n: int):
    if add_n == 0 or add_sum is None:
        return old_avg
    if old_avg is None:
        return add_sum / add_n
    return (old_avg * old_n + add_sum) / (old_n + add_n)


def _maximum(*values: float | None) -> float | None:
    present = [value for value in values if value is not None]
    return max(present) if present else None


def _merge(old: CardHourly | None, group: dict) -> CardHourly:
    n0 = old.samples if old else 0
    return CardHourly(
        card_id=group["card_id"],
        hour=group["hour"],
        samples=n0 + group["n"],
        utilization_avg=_weighted(
            old and old.utilization_avg, n0, group["util_sum"], group["util_n"]
        ),
        utilization_max=_maximum(old and old.utilization_max, group["util_max"]),
        memory_used_max_mb=_maximum(old and old.memory_used_max_mb, group["mem_max"]),
        temperature_max_c=_maximum(old and old.temperature_max_c, group["temp_max"]),
        power_avg_w=_weighted(old and old.power_avg_w, n0, group["power_sum"], group["power_n"]),
        power_max_w=_maximum(old and old.power_max_w, group["power_max"]),
    )


@transaction.atomic
def _summarise_chunk(cutoff: datetime, size: int) -> int:
    # Locking the samples makes a second run wait, then skip what this one deleted.
    ids = list(
        CardSample.objects.select_for_update()
        .filter(at__lt=cutoff)
        .order_by("pk")
        .values_list("pk", flat=True)[:size]
    )
    if not ids:
        return 0
    groups = list(
        CardSample.objects.filter(pk__in=ids)
        .annotate(hour=TruncHour("at", tzinfo=UTC))
        .values("card_id", "hour")
        .annotate(
            n=Count("pk"),
            util_n=Count("utilization_pct"),
            util_sum=Sum("utilization_pct"),
            util_max=Max("utilization_pct"),
            mem_max=Max("memory_used_mb"),
            temp_max=Max("temperature_c"),
            power_n=Count("power_w"),
            power_sum=Sum("power_w"),
            power_max=Max("power_w"),
        )
        .order_by()
    )
    existing = {
        (row.card_id, row.hour): row
        for row in CardHourly.objects.select_for_update().filter(
            card_id__in={group["card_id"] for group in groups},
            hour__in={group["hour"] for group in groups},
        )
    }
    rows = [_merge(existing.get((group["card_id"], group["hour"])), group) for group in groups]
    CardHourly.objects.bulk_create(
        rows,
        update_conflicts=True,
        unique_fields=["card", "hour"],
        update_fields=[
            "samples",
            "utilization_avg",
            "utilization_max",
            "memory_used_max_mb",
            "temperature_max_c",
            "power_avg_w",
            "power_max_w",
        ],
    )
    CardSample.objects.filter(pk__in=ids).delete()
    return len(ids)


def telemetry_summarise(*, before: datetime) -> int:
    """Roll the samples of whole hours (UTC) before *before* into CardHourly and delete them;
    returns how many samples were rolled up.

    Safe to run twice or concurrently: each sample is counted once, because it is deleted in
    the transaction that counts it; a row already in CardHourly for that hour is merged with.
    Takes a bounded batch (SUMMARY_CHUNK × SUMMARY_MAX_CHUNKS samples); the next run goes on.
    """
    cutoff = before.astimezone(UTC).replace(minute=0, second=0, microsecond=0)
    total = 0
    for _chunk in range(SUMMARY_MAX_CHUNKS):
        done = _summarise_chunk(cutoff, SUMMARY_CHUNK)
        total += done
        if done < SUMMARY_CHUNK:
            break
    return total
