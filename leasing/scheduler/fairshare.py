"""Fair share between teams: each team's recent use against its share, as one factor per team
that orders the queue inside a priority class (``queueplan.service_key``).

**Use** is a team's card-time weighted by the card's list price (an H800 hour counts what an
H800 hour costs, not what a T4 hour does), decayed with a half-life: use *t* ago counts
``2 ** (-t / half_life)``. **Share** is the team's weight over the weights of every team.

**Factor** (Slurm's classic fair-share factor): ``2 ** (-U / S)``, U the team's fraction of
all decayed use, S its fraction of the weights: 1 for a team that used nothing, 0.5 for one
exactly at its share, towards 0 the further it is above. Rounded to ``LEVEL`` so teams a
hair apart share a level and are served by virtual submit time; a team with no recorded
factor has 1 (it used nothing yet). docs/decisions.md says why this formula.

**Work ahead** (``ahead``): a waiting lease is passed by the newcomers of every team ahead
of it in the order, and the order moves at each recomputation (two teams above their share
trade places as their use decays), so the start it is told (``eta.told_start``) leaves room
for the work of every other team: each one's recent demand (the card-hours its leases asked
for, decayed with ``ARRIVALS_HALF_LIFE``, per hour, as a fraction of the pool), at most its
share (fair share takes a team above its share down the order again), summed, at most
``AHEAD_MAX``. A wait *w* planned today is told as ``w / (1 - ahead)``: while it waits, that
fraction of the pool may go to work that passes it.

Pure (no database): the recomputation (``leasing.teams.fairshare``), the replay bench and the
property tests call the same functions. The factors change only when they are recomputed,
at fixed times, and a recomputation moves the plan's version (the keys change), so between
two recomputations no key changes while a lease waits.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

HALF_LIFE = timedelta(days=7)  # the default half-life of use
EVERY = timedelta(minutes=5)  # the default time between two recomputations
LEVEL = 0.01  # factors are kept to this step
NO_USE = 1.0  # the factor of a team that used nothing (or was never computed)
ARRIVALS_HALF_LIFE = timedelta(hours=12)  # how far back a team's demand counts (``ahead``)
AHEAD_MAX = 0.9  # at most this fraction of the pool is counted as work passing a lease
# Reclaim (``reclaim``): a team below its share whose first waiting lease is not planned to
# start within RECLAIM_AFTER takes cards back from teams above theirs, from leases with at
# least RECLAIM_MIN_LEFT still to run that have run RECLAIM_MIN_RUN since they (re)started.
RECLAIM_AFTER = timedelta(minutes=5)
RECLAIM_MIN_LEFT = timedelta(hours=6)
RECLAIM_MIN_RUN = timedelta(hours=1)


def level(factor: float) -> float:
    """*factor* to ``LEVEL`` (what the key and every page show)."""
    return round(round(factor / LEVEL) * LEVEL, 6)


def decayed(start: datetime, end: datetime, now: datetime, half_life: timedelta) -> float:
    """Hours of [start, end) (cut at *now*) each weighted by ``2 ** (-age / half_life)``."""
    end = min(end, now)
    if end <= start:
        return 0.0
    h = half_life / timedelta(hours=1)
    a = (now - start) / timedelta(hours=1)
    b = (now - end) / timedelta(hours=1)
    return h / math.log(2) * (2 ** (-b / h) - 2 ** (-a / h))


def decay(value: float, elapsed: timedelta, half_life: timedelta) -> float:
    """*value* of decayed use, *elapsed* later."""
    return value * 2 ** (-(elapsed / half_life))


def factors(use: Mapping[int | str, float], weights: Mapping[int | str, float]) -> dict:
    """Each team's factor (``level``-ed) from its decayed *use* and share *weights* (every team
    with a weight; a team missing from *use* used nothing)."""
    total_weight = sum(weights.values())
    total_use = sum(max(0.0, use.get(t, 0.0)) for t in weights)
    out = {}
    for team, weight in weights.items():
        if total_use <= 0 or total_weight <= 0:
            out[team] = NO_USE
            continue
        u = max(0.0, use.get(team, 0.0)) / total_use
        s = weight / total_weight
        out[team] = level(2 ** (-u / s))
    return out


def ahead(demand: Mapping[int | str, float], weights: Mapping[int | str, float]) -> dict:
    """Each team's work ahead (see the module): every other team's *demand* (a fraction of
    the pool per hour, decayed; missing: none) up to its share of *weights*, summed, at most
    ``AHEAD_MAX``. One value per team of *weights*."""
    total_weight = sum(weights.values())
    if total_weight <= 0:
        return {team: 0.0 for team in weights}
    part = {
        team: min(max(0.0, demand.get(team, 0.0)), w / total_weight) for team, w in weights.items()
    }
    everyone = sum(part.values())
    return {team: round(min(AHEAD_MAX, everyone - part[team]), 6) for team in weights}


def stretched(wait: timedelta, work_ahead: float) -> timedelta:
    """A planned *wait* with room for the work ahead (``ahead``) that will pass it."""
    if wait <= timedelta(0) or work_ahead <= 0:
        return wait
    return wait / (1 - min(work_ahead, AHEAD_MAX))


def due(last: datetime | None, now: datetime, every: timedelta) -> bool:
    """Whether a recomputation is due at *now*: the fixed times are the multiples of *every*
    since the epoch; due when one has passed since *last*."""
    if last is None:
        return True
    step = every.total_seconds()
    return math.floor(now.timestamp() / step) > math.floor(last.timestamp() / step)


class Ledger:
    """Decayed use kept up to date as cards are taken and given back (the replay bench): the
    same ``decay`` as the recomputation, without reading every lease again; and each team's
    decayed demand (``asked``, ``demand``)."""

    def __init__(self, half_life: timedelta, start: datetime):
        self.half_life = half_life
        self.at = start
        self.use: dict = {}
        self.rate: dict = {}  # team -> price-weighted cards held now
        self.asked: dict = {}  # team -> card-hours asked, decayed to ``asked_at``
        self.asked_at = start

    def ask(self, team, card_hours: float, now: datetime) -> None:
        """*team* submitted work of *card_hours* at *now*."""
        self._age_asked(now)
        self.asked[team] = self.asked.get(team, 0.0) + card_hours

    def demand(self, now: datetime, pool: float) -> dict:
        """Each team's demand at *now*: decayed card-hours asked per hour over *pool*."""
        self._age_asked(now)
        h = ARRIVALS_HALF_LIFE / timedelta(hours=1)
        return {t: v * math.log(2) / h / pool for t, v in self.asked.items()} if pool else {}

    def _age_asked(self, now: datetime) -> None:
        if now > self.asked_at:
            keep = decay(1.0, now - self.asked_at, ARRIVALS_HALF_LIFE)
            self.asked = {t: v * keep for t, v in self.asked.items()}
            self.asked_at = now

    def move(self, now: datetime) -> None:
        elapsed = now - self.at
        if elapsed <= timedelta(0):
            return
        h = self.half_life / timedelta(hours=1)
        hours = elapsed / timedelta(hours=1)
        keep = 2 ** (-hours / h)
        added = h / math.log(2) * (1 - keep)  # one card held over *elapsed*, decayed to now
        for team in set(self.use) | set(self.rate):
            self.use[team] = self.use.get(team, 0.0) * keep + self.rate.get(team, 0.0) * added
        self.at = now

    def hold(self, team, cards: float, now: datetime) -> None:
        """*team* holds *cards* more (negative: gives them back) from *now*."""
        self.move(now)
        self.rate[team] = self.rate.get(team, 0.0) + cards


@dataclass(frozen=True)
class Holding:
    """A running lease as ``reclaim`` sees it: its team, cards, when it (re)started and when
    it is planned to end."""

    lease_id: int
    team: int | str
    count: int
    started: datetime
    end: datetime


def shares_of(pool: int, weights: Mapping[int | str, float], active: Iterable) -> dict:
    """Each *active* team's share of a *pool* of cards: the pool split by weight among the
    teams holding or waiting for its cards (a team missing from *weights* weighs 1)."""
    active = list(active)
    total = sum(weights.get(t, 1.0) for t in active)
    return {t: pool * weights.get(t, 1.0) / total for t in active} if total > 0 else {}


def reclaim(
    *,
    team,
    need: int,
    pool: int,
    held: Mapping,
    weights: Mapping,
    waiting: Iterable,
    holdings: Iterable[Holding],
    now: datetime,
    floor: Mapping | None = None,
) -> list[Holding]:
    """Fair share's reclaim: which running leases give their cards back so that *team*,
    below its share and waiting for *need* cards more than the free ones, gets them.

    Shares (``shares_of``) are of the teams holding cards (*held*: team -> cards) or with work
    *waiting*. Only a team above its share gives back, never so much that it falls below
    it nor below its *floor* (team -> cards: a guaranteed share); only leases with
    ``RECLAIM_MIN_LEFT`` still to run that have run ``RECLAIM_MIN_RUN`` since they
    (re)started (so no lease is taken back twice in a row, nor one about to end); the
    youngest first (the least work to save). Empty when *team* is not below its share or
    when the leases that may give back do not cover *need*: nobody is stopped for nothing.
    The caller decides which of these the placement needs (``preemption.take_back``)."""
    if need <= 0:
        return []
    active = {t for t, n in held.items() if n > 0} | set(waiting) | {team}
    share = shares_of(pool, weights, active)
    if held.get(team, 0) >= share[team]:
        return []
    floor = floor or {}
    left = {t: held.get(t, 0) - max(share[t], floor.get(t, 0)) for t in active if t != team}
    chosen, covered = [], 0
    for h in sorted(holdings, key=lambda h: (h.started, h.lease_id), reverse=True):
        if covered >= need:
            break
        if h.team == team or h.team not in left or left[h.team] < h.count:
            continue
        if h.end - now < RECLAIM_MIN_LEFT or now - h.started < RECLAIM_MIN_RUN:
            continue
        chosen.append(h)
        left[h.team] -= h.count
        covered += h.count
    return chosen if covered >= need else []
