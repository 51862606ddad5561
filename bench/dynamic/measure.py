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
- **$ lost to reclaims**: each instance EC2 reclaims while the fleet works (after it was
  complete, within the billed window) costs RELOAD_MINUTES of its price (its replacement loads
  the model again) plus its price over the time the fleet runs short: from its end until the
  next instance launched after its notice (its replacement), or the window's end when none
  came. Reclaims before the fleet was complete lose no work (idle dollars bill them already).
- **$ a month of reclaims**: at Spot Advisor rates a working fleet meets few reclaims in one
  hour, so each strategy's fleet (the instances running when it was complete) is also priced
  over a 30-day month of work: every instance is reclaimed at its tier's monthly share
  (bench.dynamic.market.MONTHLY_RECLAIM_SHARE) and each reclaim costs RELOAD_MINUTES plus the
  strategy's own time to replace one on this market (the mean gap of its replaced reclaims in
  the run; the reload alone when it replaced none) of the instance's price. `priced_dollars`
  is `dollars` plus both.
- **calls**: every EC2 call made, and of them the launch calls (RunInstances, CreateFleet).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from bench.dynamic.generate import HORIZON_SECONDS, DynamicCase
from bench.dynamic.market import MONTHLY_RECLAIM_SHARE, SPOT_NOTICE_SECONDS, Ec2

WORK_SECONDS = 3600  # the fleet's first hour of work, billed to every strategy alike
# A reclaimed node's replacement pulls the image and loads the model's weights again before it
# serves: minutes for a model of tens of GB on one GPU, priced at the reclaimed instance's rate.
RELOAD_MINUTES = 15


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
    reclaim_dollars: float = 0.0  # lost to reclaims while the fleet worked: reload and time short
    month_reclaim_dollars: float = 0.0  # the complete fleet's expected reclaims over a month of work, priced
    by_api: dict[str, int] = field(default_factory=dict)

    @property
    def priced_dollars(self) -> float:
        return self.dollars + self.reclaim_dollars + self.month_reclaim_dollars

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


def reclaim_dollars(instances, reached: float | None, until: float) -> float:
    """What reclaims of a working fleet lost (module docstring, "$ lost to reclaims")."""
    if reached is None:
        return 0.0
    replaced: set[int] = set()
    lost = 0.0
    for gone in sorted((i for i in instances if i.interrupted and reached < i.ended_at <= until), key=lambda i: i.ended_at):
        notice = gone.ended_at - SPOT_NOTICE_SECONDS
        replacement = next((n for n, i in enumerate(instances) if n not in replaced and i is not gone
                            and i.launched_at >= notice), None)
        if replacement is not None:
            replaced.add(replacement)
        back = until if replacement is None else min(max(instances[replacement].launched_at, gone.ended_at), until)
        lost += gone.price * (RELOAD_MINUTES * 60 + back - gone.ended_at) / 3600
    return lost


def replacement_seconds(instances) -> float:
    """The mean time from a reclaimed instance's end to the next launch after its notice (0 if none)."""
    gaps, replaced = [], set()
    for gone in sorted((i for i in instances if i.interrupted), key=lambda i: i.ended_at):
        n = next((n for n, i in enumerate(instances) if n not in replaced and i is not gone
                  and i.launched_at >= gone.ended_at - SPOT_NOTICE_SECONDS), None)
        if n is not None:
            replaced.add(n)
            gaps.append(max(0.0, instances[n].launched_at - gone.ended_at))
    return sum(gaps) / len(gaps) if gaps else 0.0


def month_reclaim_dollars(instances, reached: float | None) -> float:
    """The complete fleet's expected reclaims over 30 days, priced (module docstring)."""
    if reached is None:
        return 0.0
    lost_hours = (RELOAD_MINUTES * 60 + replacement_seconds(instances)) / 3600
    fleet = [i for i in instances if i.running(reached)]
    return sum(MONTHLY_RECLAIM_SHARE[i.tier] * i.price * lost_hours for i in fleet)


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
        reclaim_dollars=round(reclaim_dollars(ec2.instances, reached, billed_until), 4),
        month_reclaim_dollars=round(month_reclaim_dollars(ec2.instances, reached), 4),
        by_api=dict(sorted(ec2.calls.items())),
    )
