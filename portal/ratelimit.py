"""A count of uses per key in a sliding window, kept in the shared cache (settings.CACHES).

The read-and-write of a key's history runs under a lock taken with ``cache.add`` — atomic in
Redis and in Django's DatabaseCache — so parallel requests in any process cannot all slip
through. A lock that cannot be had within a second counts as "limit reached" (fail closed).
Sign-in limits are allauth's (ACCOUNT_RATE_LIMITS); this serves the portal's own actions.
"""

from __future__ import annotations

import hashlib
import time

from django.core.cache import cache
from django.core.exceptions import ImproperlyConfigured

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
LOCK_SECONDS = 10
LOCK_WAIT_SECONDS = 1.0


def parse_rate(rate: str) -> tuple[int, float]:
    """``"5/h"`` or ``"10/15m"`` → (5, 3600.0) / (10, 900.0); fails loudly when malformed."""
    amount, _sep, period = rate.strip().partition("/")
    try:
        count = int(amount)
        unit = _UNITS[period[-1:]]
        length = float(period[:-1] or 1)
    except (ValueError, KeyError):
        raise ImproperlyConfigured(f"{rate!r} is not a rate like 5/h or 10/15m") from None
    if count < 0 or length <= 0:
        raise ImproperlyConfigured(f"{rate!r} is not a rate like 5/h or 10/15m")
    return count, length * unit


def _lock(key: str) -> bool:
    deadline = time.monotonic() + LOCK_WAIT_SECONDS
    while not cache.add(key, 1, timeout=LOCK_SECONDS):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.02)
    return True


def rate_consume(*, scope: str, key: str, rate: str) -> bool:
    """Count one use of ``scope`` by ``key``; False (nothing counted) when ``rate`` is spent."""
    amount, window = parse_rate(rate)
    digest = hashlib.sha256(key.encode()).hexdigest()
    cache_key = f"cardpool:rl:{scope}:{digest}"
    lock_key = f"{cache_key}:lock"
    if not _lock(lock_key):
        return False
    try:
        now = time.time()
        history = [t for t in cache.get(cache_key, []) if t > now - window]
        if len(history) >= amount:
            return False
        history.append(now)
        cache.set(cache_key, history, timeout=int(window) + 1)
        # DatabaseCache drops a write it cannot make (SQLite busy under parallel writers)
        # without a word; a use whose count was not kept is refused, not let through.
        return cache.get(cache_key) == history
    finally:
        cache.delete(lock_key)
