"""`broker` (simulated): the static bench's spot broker (bench.broker), run again on a schedule.

Each pass is bench.broker.decide unchanged: regions and types in classic score order, one
RunInstances with no AZ named for everything still missing, a failed (region, type) left for
the rest of the pass. The broker has no wait of its own; here a scheduler starts a pass every
PASS_INTERVAL_SECONDS while instances are missing (counted from what is running, so it replaces
what EC2 reclaims). It sees only the public view.
"""

from __future__ import annotations

import copy

from bench import broker
from bench.dynamic.generate import HORIZON_SECONDS, DynamicCase
from bench.dynamic.market import Ec2
from bench.market import PublicView

PASS_INTERVAL_SECONDS = 300
SCORING_CALLS_PER_REGION = broker.SCORING_CALLS_PER_REGION


def run(case: DynamicCase) -> Ec2:
    view, ec2 = PublicView(case.start), Ec2(case)
    while ec2.now < HORIZON_SECONDS:
        started = ec2.now
        ec2.calls["DescribeInstanceTypeOfferings"] += len(view.regions)
        ec2.calls["DescribeSpotPriceHistory"] += len(view.regions)
        missing = copy.copy(view)
        missing.count = case.count - ec2.running()
        broker.decide(missing, ec2)
        if case.count - ec2.running() <= 0:
            return ec2
        ec2.wait(started + PASS_INTERVAL_SECONDS - ec2.now)
    return ec2
