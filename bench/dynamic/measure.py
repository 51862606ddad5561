"""What a strategy's run on a dynamic market cost and gave, read from the account's instances.

- **time to N**: the first modelled second at which `count` instances run at once; None when
  that never happened within the 12 hours (a fleet EC2 took instances from is short again).
- **$ of instances**: every instance launched, billed at its spot price from launch to its end,
  within the run's window: until the fleet was complete plus one hour of it working (so a
  dearer fleet shows), or the 12 hours when it never was. Instances reclaimed or given up
  before that are billed too.
- **instance-hours wasted**: instance-hours before the fleet was complete (held idle, waiting
  for the rest), including instances reclaimed meanwhile; the whole 12 hours of every
  instance when it never was.
- **calls**: every EC2 call made, and of them the launch calls (RunInstances, CreateFleet).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from bench.dynamic.generate import HORIZON_SECONDS, DynamicCase
from bench.dynamic.market import Ec2

WORK_SECONDS = 3600  # the fleet's first hour of work, billed to every strategy alike


@dataclass
class Outcome:
    case: str
    strategy: str
    tier: str
    requested: int
    time_to_n: float | None
    dollars: float
    idle_dollars: float  # of `dollars`, what instances cost before the fleet was complete
    wasted_hours: float
    launch_calls: int
    ec2_calls: int
    launched: int  # instances launched, over the whole run
    interrupted: int
    by_api: dict[str, int] = field(default_factory=dict)

    @property
    def filled(self) -> bool:
        return self.time_to_n is not None

    def to_json(self) -> dict:
        return asdict(self)


def time_to_n(instances, count: int) -> float | None:
    edges = sorted([(i.launched_at, 1) for i in instances] + [(i.ended_at, -1) for i in instances if i.ended_at is not None])
    running = 0
    for at, step in edges:
        running += step
        if running >= count and at <= HORIZON_SECONDS:
            return at
    return None


def _hours(instance, until: float) -> float:
    end = until if instance.ended_at is None else min(instance.ended_at, until)
    return max(0.0, end - instance.launched_at) / 3600


def outcome(case: DynamicCase, strategy: str, ec2: Ec2) -> Outcome:
    reached = time_to_n(ec2.instances, case.count)
    billed_until = reached + WORK_SECONDS if reached is not None else HORIZON_SECONDS
    ec2.wait_until(billed_until)  # what EC2 reclaims during the fleet's hour of work is billed as it ends
    idle_until = reached if reached is not None else HORIZON_SECONDS
    return Outcome(
        case=case.name,
        strategy=strategy,
        tier=case.tier,
        requested=case.count,
        time_to_n=None if reached is None else round(reached, 1),
        dollars=round(sum(i.price * _hours(i, billed_until) for i in ec2.instances), 4),
        idle_dollars=round(sum(i.price * _hours(i, idle_until) for i in ec2.instances), 4),
        wasted_hours=round(sum(_hours(i, idle_until) for i in ec2.instances), 3),
        launch_calls=ec2.launch_calls,
        ec2_calls=sum(ec2.calls.values()),
        launched=len(ec2.instances),
        interrupted=sum(1 for i in ec2.instances if i.interrupted),
        by_api=dict(sorted(ec2.calls.items())),
    )
