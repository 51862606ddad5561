"""The dynamic market as EC2 answers it: a clock, the pools' free capacity as it changes, and the
account's own instances from launch to their end.

A strategy gets an Ec2 to call and the hour-0 public view (bench.market.PublicView), never the
capacity: the market is kept in private attributes and only launch calls' answers come out of it.
Every call is counted and moves the clock by its latency (the engine's latency model, as in the
static bench); a strategy's wait moves it by the wait. Launches are answered as the static
bench's Ec2 answers them, from the capacity free at the call's modelled second: RunInstances
in one AZ (named, or EC2's pick of the deepest), CreateFleet by the local engine's allocation
model (gpufill.local.fleet_allocation).

Interruptions: a drain larger than the pool's free capacity makes EC2 take capacity back from
running spot instances. EC2 spreads that over every account in the pool, so one drain reclaims
at most one of this account's instances there (the newest not already warned), which ends two
minutes later, after the interruption notice; it is billed until then. The local engine's scenario
field `drain` does the same (docs/local-engine.md, "Drains").

Besides drains, EC2 reclaims each running spot instance at its pool's Spot Advisor rate: the
advisor's "frequency of interruption" is the share of a type's spot capacity in a region EC2
reclaimed over the trailing month, in bands of <5 %, 5-10 %, 10-15 %, 15-20 % and >20 % (tiers
0 to 4). Each instance's reclaim time is drawn at launch from an exponential lifetime at its
band's middle (25 % for the open top band) spread over a month of 730 hours, from a stream
seeded by the market, the pool and how many launched there before it, so every strategy that
launches its n-th instance in a pool meets the same fate there.
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass

from gpufill import catalog
from gpufill.local.fleet_allocation import Pool as AllocationPool
from gpufill.local.fleet_allocation import allocate
from gpufill.local.market import DEFAULT_VCPUS

from bench.costs import api_seconds
from bench.dynamic.generate import DynamicCase
from bench.market import Launched

SPOT_NOTICE_SECONDS = 120  # EC2's interruption notice for spot instances
# Spot Advisor tier -> the share of capacity reclaimed in a month (the band's middle; 25 % for >20 %).
MONTHLY_RECLAIM_SHARE = {0: 0.025, 1: 0.075, 2: 0.125, 3: 0.175, 4: 0.25}
MONTH_SECONDS = 730 * 3600


def lifetime(market: str, zone: str, instance_type: str, nth: int, tier: int) -> float:
    """Seconds from its launch until EC2 reclaims the `nth` instance (0-based) launched in a pool of
    the market at its Spot Advisor tier's rate (the module docstring); engine_check draws the same."""
    share = MONTHLY_RECLAIM_SHARE.get(tier, MONTHLY_RECLAIM_SHARE[4])
    return random.Random(f"reclaim-{market}-{zone}-{instance_type}-{nth}").expovariate(share / MONTH_SECONDS)


@dataclass
class Instance:
    region: str
    zone: str
    instance_type: str
    price: float
    launched_at: float
    ended_at: float | None = None
    interrupted: bool = False
    tier: int = 4  # its pool's Spot Advisor tier (public), 4 when the advisor lists none
    reclaim_at: float | None = None  # when its pool's advisor rate has EC2 reclaim it, if it still runs

    def running(self, at: float) -> bool:
        return self.launched_at <= at and (self.ended_at is None or self.ended_at > at)


class Ec2:
    """The launch APIs a dynamic strategy calls, with the modelled clock (`now`)."""

    def __init__(self, case: DynamicCase):
        self.now = 0.0
        self.calls: Counter[str] = Counter()
        self.instances: list[Instance] = []  # this account's, in launch order
        self.reclaims: list[Instance] = []  # the interruption notices EC2 sent this account, in order
        self.set_up: set[str] = set()  # regions and zones the account's launches have prepared (network, template)
        # By region, the account's instances (indexes in `instances`) no DescribeInstances there has
        # passed since their launch: EC2 does not describe them yet (the local engine's visibility
        # delay of one call, gpufill.local.market), so a read naming one fails InvalidInstanceID.NotFound.
        self.__hidden: dict[str, set[int]] = {}
        # The deployment's warm facts: when its regions were last scored ("scoring") and each region's
        # launch settings last looked up (by region), as the instances table keeps them.
        self.warm: dict[str, float] = {}
        self.__prices: dict[tuple[str, str, str], float] = {}
        self.__free: dict[tuple[str, str, str], int] = {}
        self.__tiers: dict[tuple[str, str], int] = {}
        self.__launched: Counter[tuple[str, str, str]] = Counter()
        self.__market = case.name
        for region, market in case.start.scenario["regions"].items():
            for itype, tier in market.get("advisor_tier", {}).items():
                self.__tiers[(region, itype)] = tier
            for zone, types in market["zones"].items():
                for itype, stock in types.items():
                    key = (region, zone, itype)
                    self.__free[key] = stock.get("spot", 0)
                    self.__prices[key] = stock.get("spot_price") or catalog.on_demand_price(itype, region) or 0.0
        self.__changes = case.changes
        self.__applied = 0

    # --- the clock ----------------------------------------------------------------------

    def wait(self, seconds: float) -> None:
        self.now += max(0.0, seconds)
        self.__catch_up()

    def wait_until(self, at: float) -> None:
        self.wait(at - self.now)

    def call(self, api: str, times: int = 1) -> None:
        """Calls that learn nothing about capacity (scoring, launch templates): counted and timed."""
        self.calls[api] += times
        self.wait(api_seconds(f"ec2:{api}") * times)

    def __catch_up(self) -> None:
        for instance in self.instances:
            if instance.ended_at is None and instance.reclaim_at is not None and instance.reclaim_at <= self.now:
                instance.ended_at, instance.interrupted = instance.reclaim_at + SPOT_NOTICE_SECONDS, True
                self.reclaims.append(instance)
        while self.__applied < len(self.__changes) and self.__changes[self.__applied].at <= self.now:
            change = self.__changes[self.__applied]
            self.__applied += 1
            free = self.__free[change.pool] + change.delta
            if free < 0:
                self.__reclaim(change.pool, change.at)
            self.__free[change.pool] = max(0, free)

    def __reclaim(self, pool: tuple[str, str, str], at: float) -> None:
        # One already warned is going anyway: EC2 takes the next newest (as the local engine's `drain`).
        mine = [i for i in self.instances if (i.region, i.zone, i.instance_type) == pool and i.running(at) and not i.interrupted]
        if mine:
            newest = mine[-1]
            newest.ended_at, newest.interrupted = at + SPOT_NOTICE_SECONDS, True
            self.reclaims.append(newest)

    def next_reclaim_at(self) -> float:
        """The next moment EC2 could reclaim one of the account's instances (a drain to come, or a
        running instance's advisor-rate end); the horizon's end when none. The replay's maintenance
        watch sleeps until then: EventBridge would deliver the notice within seconds of it."""
        drains = (c.at for c in self.__changes[self.__applied:] if c.delta < 0)
        ends = (i.reclaim_at for i in self.instances if i.ended_at is None and i.reclaim_at is not None)
        return min((t for t in (*drains, *ends) if t > self.now), default=float("inf"))

    # --- what the account may know of its own instances ------------------------------------

    def wait_until_running(self, mine: list[int]) -> None:
        """WaitUntilRunning's DescribeInstances over a run's instances `mine` (indexes), as the local
        engine answers them: a round reads every region the run holds instances in, one call each
        (by the instance-id filter, adapters.ec2.instance_states); where EC2 does not describe one of
        them yet it is left out and asked once more at once, which finds it: the first call in a
        region passes every instance's delay there."""
        regions: dict[str, list[int]] = {}
        for n in mine:
            regions.setdefault(self.instances[n].region, []).append(n)
        for region, held in sorted(regions.items()):
            self.calls["DescribeInstances"] += 1
            if self.__unseen(region) & set(held):
                self.__hidden[region] = set()
                self.calls["DescribeInstances"] += 1

    def __unseen(self, region: str) -> set[int]:
        """The account's instances EC2 does not describe yet in `region`. StartRefill reads a
        reclaimed instance's state once it has ended (DescribeInstances in its region), which
        passes the delay of every instance launched there before."""
        ended = [r.ended_at for r in self.reclaims if r.region == region and r.ended_at is not None and r.ended_at <= self.now]
        if ended:
            self.__hidden[region] = {n for n in self.__hidden.get(region, set()) if self.instances[n].launched_at > max(ended)}
        return self.__hidden.get(region, set())

    def running(self) -> int:
        """The account's instances not yet ended or warned (DescribeInstances, or a node watch)."""
        return sum(1 for i in self.instances if i.ended_at is None)

    # --- launches ------------------------------------------------------------------------

    def _launch(self, region: str, zone: str, itype: str, count: int) -> float:
        self.__free[(region, zone, itype)] -= count
        price = self.__prices[(region, zone, itype)]
        for _ in range(count):
            self.__hidden.setdefault(region, set()).add(len(self.instances))
            self.instances.append(Instance(region, zone, itype, price, self.now, tier=self.__tiers.get((region, itype), 4),
                                           reclaim_at=self.now + self.__lifetime(region, zone, itype)))
        return count * price

    def __lifetime(self, region: str, zone: str, itype: str) -> float:
        """Seconds until EC2 reclaims the pool's next instance at its advisor tier's rate."""
        nth = self.__launched[(region, zone, itype)]
        self.__launched[(region, zone, itype)] += 1
        return lifetime(self.__market, zone, itype, nth, self.__tiers.get((region, itype), 4))

    def run_instances(
        self, region: str, instance_type: str, max_count: int, min_count: int = 1, zone: str | None = None
    ) -> Launched:
        """RunInstances in `zone`, or with no subnet named in EC2's pick of an AZ (the static bench's
        model: the AZ that can launch the most). Fewer than MinCount free fails on capacity."""
        self.calls["RunInstances"] += 1
        self.wait(api_seconds("ec2:RunInstances"))
        zones = [z for (r, z, t) in self.__free if r == region and t == instance_type and (zone is None or z == zone)]
        if not zones:
            return Launched({}, {(zone or region, instance_type): "unsupported"}, 0.0)
        best = min(zones, key=lambda z: (-self.__free[(region, z, instance_type)], self.__prices[(region, z, instance_type)], z))
        take = min(max_count, self.__free[(region, best, instance_type)])
        if take < min_count:
            return Launched({}, {(best if zone else region, instance_type): "capacity"}, 0.0)
        price = self._launch(region, best, instance_type, take)
        return Launched({(best, instance_type): take}, {}, round(price, 4))

    def create_fleet(self, region: str, overrides: list[tuple[str, str]], target: int) -> Launched:
        """CreateFleet (instant, spot, price-capacity-optimized), one override per (AZ, type)."""
        self.calls["CreateFleet"] += 1
        self.wait(api_seconds("ec2:CreateFleet"))
        pools = [
            AllocationPool(key=o, left=self.__free[(region, *o)], price=self.__prices[(region, *o)],
                           vcpus=catalog.vcpus(o[1]) or DEFAULT_VCPUS)
            for o in overrides
            if (region, *o) in self.__free
        ]
        allocation = allocate(pools, target, "price-capacity-optimized", quota_vcpus=None)
        price = sum(self._launch(region, zone, itype, n) for (zone, itype), n in allocation.counts.items())
        return Launched(dict(allocation.counts), dict(allocation.errors), round(price, 4))

    def terminate(self, instances: list[Instance]) -> None:
        """TerminateInstances, one call per region: billed until now, and the capacity free in its
        pool again, as on EC2 (a spot pool's capacity is its hosts; a terminated instance frees one)
        and on the local engine (gpufill.local.market.SimulatedMarket.freed)."""
        for _ in sorted({i.region for i in instances}):
            self.calls["TerminateInstances"] += 1
            self.wait(api_seconds("ec2:TerminateInstances"))
        for instance in instances:
            if instance.ended_at is None:
                instance.ended_at = self.now
                self.__free[(instance.region, instance.zone, instance.instance_type)] += 1

    @property
    def launch_calls(self) -> int:
        return self.calls["RunInstances"] + self.calls["CreateFleet"]
