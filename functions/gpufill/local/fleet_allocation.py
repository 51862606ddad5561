"""How an EC2 Fleet of type instant spreads its target over its pools: a pure model (no moto,
plain inputs), so the simulated market and the benchmark's simulators answer the same way.
The allocation model (one call, one market):
- spot `price-capacity-optimized`: when some pools can hold the whole target, the cheapest
  of them takes it all; else the deepest pools first (most left), the cheapest among equals,
  until the target is met;
- spot `capacity-optimized`: deepest pools first; spot `lowest-price` and on-demand
  `lowest-price`: cheapest first; on-demand `prioritized`: lowest Priority number first, an
  override without one last; ties keep the order the overrides were sent in;
- partial fulfilment: the fleet launches what it can and lists an error per pool that
  could not give: `capacity` for a pool found empty, or emptied when the fleet fell short;
  `quota` for a pool the region's vCPU quota (for that market) cut short or refused;
- SingleAvailabilityZone / SingleInstanceType: the pools are grouped by zone (type); the
  group that can launch the most wins, the one the strategy prefers among equals; when it
  falls short, the pools of the other groups, which EC2 did not try, answer `untried`
  (UnfulfillableCapacity), never a capacity error nobody found;
- MinTargetCapacity: short of it, nothing launches and every pool answers `capacity`
  (or `quota` where the quota was what stopped it).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field

CAPACITY, QUOTA, UNTRIED = "capacity", "quota", "untried"
SPOT_STRATEGIES = ("price-capacity-optimized", "capacity-optimized", "lowest-price")
ON_DEMAND_STRATEGIES = ("lowest-price", "prioritized")


@dataclass(frozen=True)
class Pool:
    """One override as the allocation sees it: `left` instances it can still launch, its hourly
    price in the fleet's market, its Priority (None: lowest), the vCPUs of one instance, and
    its zone and type (for SingleAvailabilityZone / SingleInstanceType)."""

    key: Hashable
    left: int
    price: float = 0.0
    priority: float | None = None
    vcpus: int = 4
    zone: str | None = None
    instance_type: str | None = None


@dataclass
class Allocation:
    counts: dict[Hashable, int] = field(default_factory=dict)  # pool key -> instances, in launch order
    errors: dict[Hashable, str] = field(default_factory=dict)  # pool key -> CAPACITY | QUOTA | UNTRIED

    @property
    def total(self) -> int:
        return sum(self.counts.values())


def allocate(
    pools: Sequence[Pool],
    target: int,
    strategy: str,
    *,
    quota_vcpus: int | None = None,
    single_zone: bool = False,
    single_type: bool = False,
    min_target: int | None = None,
) -> Allocation:
    """How many instances each pool launches for `target`, and which pools answer an error.

    `strategy` is one of SPOT_STRATEGIES (spot prices) or ON_DEMAND_STRATEGIES (on-demand
    prices, `prioritized` by Priority); `quota_vcpus` is the room left under the region's vCPU
    quota for the market (None: no quota)."""
    order = {pool.key: n for n, pool in enumerate(pools)}
    if single_zone or single_type:
        groups: dict[tuple, list[Pool]] = {}
        for pool in pools:
            groups.setdefault((pool.zone if single_zone else None, pool.instance_type if single_type else None), []).append(pool)
        filled = {name: _fill(group, target, strategy, quota_vcpus, order) for name, group in groups.items()}
        best = max((a.total for a in filled.values()), default=0)
        if best == 0:
            result = _fill(pools, target, strategy, quota_vcpus, order)
        else:
            preferred = {p.key: n for n, p in enumerate(sorted(pools, key=lambda p: _preference(p, target, strategy, order)))}
            name = min(
                (name for name, a in filled.items() if a.total == best),
                key=lambda name: min(preferred[p.key] for p in groups[name]),
            )
            result = filled[name]
            if result.total < target:
                result.errors.update({p.key: UNTRIED for p in pools if p not in groups[name]})
    else:
        result = _fill(pools, target, strategy, quota_vcpus, order)
    if min_target is not None and result.total < min_target:
        return Allocation({}, {pool.key: result.errors.get(pool.key, CAPACITY) for pool in pools})
    return result


def _preference(pool: Pool, target: int, strategy: str, order: dict) -> tuple:
    """The strategy's order of pools, smallest first."""
    if strategy == "price-capacity-optimized":
        whole = pool.left >= target
        return (not whole, pool.price if whole else -pool.left, pool.price, order[pool.key])
    if strategy == "capacity-optimized":
        return (-pool.left, order[pool.key])
    if strategy == "prioritized":
        return (pool.priority is None, pool.priority or 0.0, order[pool.key])
    if strategy == "lowest-price":
        return (pool.price, order[pool.key])
    raise ValueError(f"unknown allocation strategy {strategy}")


def _fill(pools: Sequence[Pool], target: int, strategy: str, quota_vcpus: int | None, order: dict) -> Allocation:
    result = Allocation(errors={p.key: CAPACITY for p in pools if p.left == 0})
    ranked = sorted((p for p in pools if p.left > 0), key=lambda p: _preference(p, target, strategy, order))
    if strategy == "price-capacity-optimized":
        # The cheapest pool that holds the whole target, else the partial pools deepest first.
        whole = [p for p in ranked if p.left >= target]
        ranked = whole[:1] + [p for p in ranked if p.left < target]
    wanted, room_vcpus = target, quota_vcpus
    for pool in ranked:
        room = pool.left if room_vcpus is None else max(0, room_vcpus // pool.vcpus)
        if room == 0:
            result.errors[pool.key] = QUOTA
            continue
        take = min(wanted, pool.left, room)
        result.counts[pool.key] = take
        if room_vcpus is not None:
            room_vcpus -= take * pool.vcpus
        if take < min(wanted, pool.left):
            result.errors[pool.key] = QUOTA  # launched up to the quota, refused the rest
        wanted -= take
        if wanted == 0:
            break
    if wanted:  # short of the target: every pool now empty answers with an error
        result.errors.update({p.key: CAPACITY for p in pools if p.left - result.counts.get(p.key, 0) == 0})
    return result
