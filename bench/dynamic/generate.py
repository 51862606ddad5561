"""Seeded dynamic markets: a static market at hour 0 (bench.generate's regions, zones, prices,
tiers and placement scores) and the changes its spot pools go through over the next 12 hours.

Each pool's free capacity is what other accounts leave: it **drains** (their launches take
it), **restocks** (their instances end and hand it back) and comes back in **regional waves**
(a large job somewhere ends and frees a region's zones at once). A drain larger than what is
free makes EC2 take capacity back from running spot instances: that is an **interruption**,
and it can hit the instances a strategy holds (bench.dynamic.market). Changes come from a
stream of their own, seeded by the seed and the case, so the same seed always gives the same
markets, and the hour-0 market (all a strategy's public signals are drawn from) says nothing
about them beyond what the capacity at hour 0 does.

What a strategy may know is what AWS tells any account, as in the static bench: offered zones
and types, spot prices, Spot Advisor tiers and placement scores drawn at hour 0 with the
static generator's noise (bench.generate.placement_score). No capacity, and nothing about
the changes.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from bench import generate
from bench.cases import TIERS, Case

HORIZON_SECONDS = 12 * 3600  # the longest a request waits (wait_for_capacity PT12H)
COUNTS = generate.COUNTS  # 1, 4, 16, 64 instances (g6.xlarge and g5.xlarge carry one GPU each)
DEFAULT_SEED = 20261204
DEFAULT_SEEDS = 5
DEFAULT_SCENARIOS = 20  # one case per (tier, count) per seed

# Per tier: market-wide changes per hour, and the share of them that hand capacity back.
CHANGES_PER_HOUR = {"plenty": 4.0, "ample": 4.0, "tight": 3.0, "scarce": 3.0, "nearly sold out": 2.0}
RESTOCK_SHARE = {"plenty": 0.5, "ample": 0.5, "tight": 0.55, "scarce": 0.6, "nearly sold out": 0.6}
# Per tier: the share of the static market's capacity still free at hour 0 (others have drained
# the rest); it comes back through the changes.
HOUR0_SHARE = {"plenty": 1.0, "ample": 0.6, "tight": 0.4, "scarce": 0.25, "nearly sold out": 0.1}
# Regional waves over the 12 hours: a region's zones get capacity back together.
WAVES = (1, 3)


@dataclass(frozen=True)
class Change:
    """At `at` seconds, a pool's free capacity moves by `delta` instances (other accounts' doing)."""

    at: float
    region: str
    zone: str
    instance_type: str
    delta: int

    @property
    def pool(self) -> tuple[str, str, str]:
        return (self.region, self.zone, self.instance_type)


@dataclass(frozen=True)
class DynamicCase:
    """`start` is the market at hour 0 as a market scenario (docs/architecture.md, "The local
    engine"), its hidden `spot` counts the capacity then; `changes` what happens to it, in time order."""

    start: Case
    changes: tuple[Change, ...]

    @property
    def name(self) -> str:
        return self.start.name

    @property
    def count(self) -> int:
        return self.start.count

    @property
    def tier(self) -> str:
        return self.start.tier


def generated(
    seed: int = DEFAULT_SEED, scenarios: int = DEFAULT_SCENARIOS, score_noise: float = generate.DEFAULT_SCORE_NOISE
) -> list[DynamicCase]:
    """Tiers cycle fastest and counts next, as in the static set: 20 cases cover every (tier, count)."""
    cases = []
    for static in generate.generated(seed, scenarios, score_noise):
        name = f"d{static.name[1:]}"
        scenario = _drained(static, random.Random(f"dynamic-scores-{seed}-{name}"), score_noise)
        start = Case(name=name, scenario=scenario, request=static.request, tier=static.tier, notes=static.notes)
        cases.append(DynamicCase(start=start, changes=tuple(_changes(random.Random(f"dynamic-{seed}-{name}"), start))))
    return cases


def _drained(static: Case, rng: random.Random, noise: float) -> dict:
    """The static market at hour 0 with HOUR0_SHARE of its capacity left, scored afresh from what is
    left (AZ and region scores alike, with the static generator's noise). Its spot quotas are left
    out: a quota is an account's, not the market's, and over hours it would decide the race."""
    share, count = HOUR0_SHARE[static.tier], static.count
    regions = {}
    for region, market in sorted(static.scenario["regions"].items()):
        zones = {
            zone: {t: {**stock, "spot": int(stock.get("spot", 0) * share)} for t, stock in sorted(types.items())}
            for zone, types in sorted(market["zones"].items())
        }
        for types in zones.values():
            for stock in types.values():
                stock["placement_score"] = generate.placement_score(rng, stock["spot"], count, noise)
        totals = {t: sum(types[t]["spot"] for types in zones.values() if t in types) for t in market["placement_score"]}
        regions[region] = {
            **{k: v for k, v in market.items() if k not in ("quota", "zones", "placement_score")},
            "placement_score": {t: generate.placement_score(rng, n, count, noise) for t, n in totals.items()},
            "zones": zones,
        }
    return {**static.scenario, "regions": regions}


def _unit(case: Case) -> int:
    """The size of one change: a share of the request, never under one instance."""
    return max(1, round(max(case.count, generate.DEPTH_FLOOR) * 0.15))


def _changes(rng: random.Random, case: Case) -> list[Change]:
    pools = [
        (region, zone, itype)
        for region, market in sorted(case.scenario["regions"].items())
        for zone, types in sorted(market["zones"].items())
        for itype in sorted(types)
    ]
    unit, tier = _unit(case), case.tier
    assert tier in TIERS
    changes: list[Change] = []
    t = 0.0
    while True:
        t += rng.expovariate(CHANGES_PER_HOUR[tier] / 3600)
        if t >= HORIZON_SECONDS:
            break
        region, zone, itype = rng.choice(pools)
        size = max(1, round(unit * rng.paretovariate(1.5)))
        sign = 1 if rng.random() < RESTOCK_SHARE[tier] else -1
        changes.append(Change(round(t, 1), region, zone, itype, sign * size))
    regions = sorted({p[0] for p in pools})
    for _ in range(rng.randint(*WAVES)):
        at = round(rng.uniform(0.5, 11.0) * 3600, 1)
        region = rng.choice(regions)
        for _, zone, itype in (p for p in pools if p[0] == region):
            if rng.random() < 0.6:
                changes.append(Change(at, region, zone, itype, max(1, round(unit * rng.uniform(1.0, 3.0)))))
    changes.sort(key=lambda c: (c.at, c.pool))
    return changes


def capacity_at(case: DynamicCase, seconds: float) -> dict[tuple[str, str, str], int]:
    """Every pool's free capacity at `seconds` with nobody else launching: hour 0's plus the changes,
    never below zero (what the honesty checks compare the public signals with)."""
    free = {
        (region, zone, itype): stock.get("spot", 0)
        for region, market in case.start.scenario["regions"].items()
        for zone, types in market["zones"].items()
        for itype, stock in types.items()
    }
    for change in case.changes:
        if change.at > seconds:
            break
        free[change.pool] = max(0, free[change.pool] + change.delta)
    return free
