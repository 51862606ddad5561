"""`karpenter` (simulated): Karpenter launching spot nodes for pending pods, one region after another.

Read from Karpenter's AWS provider (github.com/aws/karpenter-provider-aws at 1d92708), not copied:

- **Launch** (pkg/providers/instance/instance.go, `launchInstance`): one CreateFleet of type
  instant, spot, price-capacity-optimized, an override per offering (zone, type) not marked
  unavailable, for the pods still pending; it launches what it can.
- **ICE cache** (`updateUnavailableOfferingsCache`, pkg/cache/unavailableofferings.go): every
  override the fleet answers InsufficientInstanceCapacity for is marked unavailable under
  `<capacity type>:<type>:<zone>` for UnavailableOfferingsTTL, 3 minutes (pkg/cache/cache.go);
  the cache is swept every UnavailableOfferingsCleanupInterval, 10 s. When every offering is
  unavailable the launch fails with an InsufficientCapacityError and the pods stay pending until
  an offering leaves the cache.
- **Batching** (Karpenter's settings, bench/latency.json): each provisioning round waits out
  BATCH_IDLE_DURATION (1 s) first.

- **Tagging** (pkg/controllers/nodeclaim/tagging/controller.go, `tagInstance`): once a node has
  registered, Karpenter reads its instance (DescribeInstances, skipping its cache) and tags it
  (CreateTags: Name, the nodeclaim, the cluster), two calls per node launched. Counted as gpufill's
  own reads of its instances are; the garbage collection's DescribeInstances every 2 minutes
  (pkg/controllers/nodeclaim/garbagecollection) runs whether or not anything is pending, and is
  left out.

Karpenter runs in one cluster, in one region: the baseline is a Karpenter per region, asked in
classic score order, each going on while it launches, as the static bench's karpenter does.
Nodes EC2 reclaims are seen (the pods go pending again) and replaced. It sees only the public view.
"""

from __future__ import annotations

import math

from bench.costs import KARPENTER_BATCH_IDLE_SECONDS
from bench.dynamic.generate import HORIZON_SECONDS, DynamicCase
from bench.dynamic.market import Ec2
from bench.market import PublicView

ICE_TTL_SECONDS = 180
ICE_SWEEP_SECONDS = 10
SCORING_CALLS_PER_REGION = 2
TAG_CALLS_PER_NODE = ("DescribeInstances", "CreateTags")


def run(case: DynamicCase) -> Ec2:
    view, ec2 = PublicView(case.start), Ec2(case)
    regions = list(dict.fromkeys(region for region, _ in view.classic_order()))
    ec2.calls["DescribeInstanceTypeOfferings"] += len(regions)
    ec2.calls["DescribeSpotPriceHistory"] += len(regions)
    unavailable: dict[tuple[str, str, str], float] = {}  # (region, zone, type) -> marked at
    while ec2.now < HORIZON_SECONDS:
        for region in regions:
            while case.count - ec2.running() > 0:
                offerings = [
                    (zone, itype)
                    for itype in view.types
                    for zone, _ in view.offers(region, itype)
                    if ec2.now - unavailable.get((region, zone, itype), -math.inf) >= ICE_TTL_SECONDS
                ]
                if not offerings:
                    break
                ec2.wait(KARPENTER_BATCH_IDLE_SECONDS)
                answer = ec2.create_fleet(region, offerings, case.count - ec2.running())
                # Each node launched is read and tagged once it registers (counted, not timed).
                for api in TAG_CALLS_PER_NODE:
                    ec2.calls[api] += answer.count
                for (zone, itype), error in answer.errors.items():
                    if error == "capacity":
                        unavailable[(region, zone, itype)] = ec2.now
                if not answer.count:
                    break
        if case.count - ec2.running() <= 0:
            return ec2
        # Pods stay pending until the sweep after the first entry's TTL runs out.
        soonest = min(unavailable.values(), default=ec2.now - ICE_TTL_SECONDS) + ICE_TTL_SECONDS
        ec2.wait(max(ICE_SWEEP_SECONDS, math.ceil((soonest - ec2.now) / ICE_SWEEP_SECONDS) * ICE_SWEEP_SECONDS))
    return ec2
