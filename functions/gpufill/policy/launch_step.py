"""A LaunchBatch step in three movements: decide (here), call (adapters/launch_calls.py), read (here).

`decide` turns the run, the plan's pools and the request into one value, `LaunchStep`: the call
the step makes next (CreateFleet or RunInstances, its pools, its ClientToken, the cluster
placement groups to ensure first, its target and minimum, the fleet's allocation strategy), what
the instances are launched with, and what every instance it launches is recorded with.
`read` turns what AWS answered into the next run state (cursor, batch, blocked pools, outcome
counts) and names the pools found empty. It reads by the step's value alone: the request's part
it needs, the four fill rules (policy/rules.py), was decided with the call.

With launch_mode "fleet" a step is one CreateFleet over every open pool of the region
(policy/fleet_moves.py). Otherwise a step is up to fill.MAX_PROBES_PER_STEP RunInstances calls,
one pool at a time: each probe's pool and batch follow from the answer before it (policy/fill.py),
so the calls are decided one after another, decide → call → read each time, until decide says
the step makes no more. A step that launches into a Capacity Block uses RunInstances, which is
how EC2 takes a block's launches.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Literal

from gpufill.models.request import ResolvedRequest
from gpufill.models.run import FleetAnswer, LaunchResult, Pool, Run
from gpufill.policy import fill, fleet_moves, gang, rules
from gpufill.policy.tokens import client_token

CREATE_FLEET = "CreateFleet"
RUN_INSTANCES = "RunInstances"


@dataclass(frozen=True)
class LaunchCall:
    """One launch call, everything it sends decided."""

    api: Literal["CreateFleet", "RunInstances"]
    region: str
    market: str
    # The plan's pools it may launch in (their plan indices); RunInstances: one.
    pools: tuple[tuple[int, Pool], ...]
    token: str
    # RunInstances' MaxCount, a fleet's TotalTargetCapacity.
    target: int
    # RunInstances' MinCount, a fleet's MinTargetCapacity (None: the fleet takes what it gets).
    min_target: int | None
    # AZ -> subnet: every subnet of the region for a fleet, the pool's for RunInstances (none: NoSubnet).
    subnets: dict[str, str]
    # AZ -> the cluster placement group made before the call and launched into.
    placement_groups: dict[str, str] = field(default_factory=dict)
    # A fleet's allocation strategy (RunInstances has none).
    strategy: str | None = None
    single_zone: bool = False
    capacity_reservation_id: str | None = None
    # capacity_reservations "none": On-Demand launches keep out of open reservations.
    reservations_off: bool = False


@dataclass(frozen=True)
class Settings:
    """What every instance of the request is launched with (the region's part is in run.launch)."""

    owner_id: str
    tags: dict[str, str]
    image: str
    model_id: str


@dataclass(frozen=True)
class Records:
    """What each launched instance is recorded with, and the names the step's records go under."""

    request_id: str  # this execution's run (its attempts, its placement groups)
    owner_id: str  # the request that owns the instances (a refill's is the request it refills)
    maintain: bool
    replaces: str | None
    expires_at: str | None


@dataclass(frozen=True)
class LaunchStep:
    """The step's next call, decided; `call` None: the step makes no more calls."""

    run: Run
    call: LaunchCall | None
    settings: Settings
    records: Records
    # How the answer is read (policy/rules.py).
    rules: rules.Rules


@dataclass(frozen=True)
class Read:
    """The run after an answer, and the pools the answer found empty (plan index, EC2's reason)."""

    run: Run
    found_empty: tuple[tuple[int, str], ...] = ()


def decide(run: Run, pools: list[Pool], request: ResolvedRequest, *, made: int, state_machine: str, deployment: str) -> LaunchStep:
    """The step's next call after `made` calls: a fleet step makes one, a probing step up to
    fill.MAX_PROBES_PER_STEP while the run stays on "launch"."""
    step = LaunchStep(
        run=run,
        call=None,
        settings=Settings(owner_id=request.owner_id, tags=dict(request.tags), image=request.image, model_id=request.model_id),
        records=Records(
            request_id=request.request_id,
            owner_id=request.owner_id,
            maintain=request.maintain,
            replaces=request.refill.replaces if request.refill else None,
            expires_at=request.expires_at,
        ),
        rules=rules.of(request),
    )
    # One attempt number per call, so one token: a retried step sends the same calls with the same tokens.
    if request.launch_mode == "fleet" and not any(p.capacity_block for p in pools):  # a block takes RunInstances only
        if made:
            return step
        run = fleet_moves.begin_call(run, pools[run.cursor])
        return replace(step, run=run, call=_fleet_call(run, pools, request, deployment, state_machine))
    if run.next != "launch" or made >= fill.MAX_PROBES_PER_STEP:
        return step
    return replace(step, call=_probe(run, pools[run.cursor], request, deployment, state_machine))


def _fleet_call(run: Run, pools: list[Pool], request: ResolvedRequest, deployment: str, state_machine: str) -> LaunchCall:
    """One CreateFleet over the region's open pools, for everything still missing."""
    here = pools[run.cursor]
    strategy = fleet_moves.allocation_strategy(here.market, request)
    single_zone = fleet_moves.single_zone(request)
    min_target = fleet_moves.min_target(run, request)
    indices = fleet_moves.overrides(run, pools, request)
    groups: dict[str, str] = {}
    for index in indices:
        group = gang.cluster_group(request, pools[index], deployment)
        if group and pools[index].availability_zone not in groups:
            groups[pools[index].availability_zone] = group
    return LaunchCall(
        api=CREATE_FLEET,
        region=here.region,
        market=here.market,
        pools=tuple((index, pools[index]) for index in indices),
        token=client_token(state_machine, request.request_id, run.attempts_total + 1),
        target=run.batch,
        min_target=min_target,
        subnets=dict(run.launch.subnets),
        placement_groups=groups,
        strategy=strategy,
        single_zone=single_zone,
        capacity_reservation_id=here.capacity_reservation_id,
        reservations_off=request.capacity_reservations == "none" and here.market == "on-demand",
    )


def _probe(run: Run, pool: Pool, request: ResolvedRequest, deployment: str, state_machine: str) -> LaunchCall:
    """One RunInstances for the pool under the cursor: the whole batch, or (partial) whatever it has."""
    subnet = run.launch.subnets.get(pool.availability_zone)
    # No subnet, no call: the group would be made for nothing.
    group = gang.cluster_group(request, pool, deployment) if subnet else None
    return LaunchCall(
        api=RUN_INSTANCES,
        region=pool.region,
        market=pool.market,
        pools=((run.cursor, pool),),
        token=client_token(state_machine, request.request_id, run.attempts_total + 1),
        target=run.batch,
        min_target=1 if request.launch_mode == "partial" else run.batch,
        subnets={pool.availability_zone: subnet} if subnet else {},
        placement_groups={pool.availability_zone: group} if group else {},
        capacity_reservation_id=pool.capacity_reservation_id,
        reservations_off=request.capacity_reservations == "none",
    )


def read(step: LaunchStep, pools: list[Pool], answer: FleetAnswer | LaunchResult) -> Read:
    """The run after the call's answer; the pools it found empty (never a reservation's: its room
    is read afresh by every plan)."""
    call = step.call
    if call is None:
        raise ValueError("an answer read for a step that made no call")
    if call.api == CREATE_FLEET:
        if not isinstance(answer, FleetAnswer):
            raise TypeError("a CreateFleet is answered by a FleetAnswer")
        found = tuple((i, "capacity") for i in fleet_moves.pools_found_empty(answer) if pools[i].capacity_reservation_id is None)
        return Read(run=fleet_moves.after_fleet(step.run, pools, answer, step.rules), found_empty=found)
    if not isinstance(answer, LaunchResult):
        raise TypeError("a RunInstances is answered by a LaunchResult")
    [(index, pool)] = call.pools
    empty = fill.pool_found_empty(call.target, answer, step.rules) and pool.capacity_reservation_id is None
    found = ((index, answer.reason or "capacity"),) if empty else ()
    return Read(run=fill.after_attempt(step.run, pools, answer, step.rules), found_empty=found)


def launched(answer: FleetAnswer | LaunchResult) -> list:
    """Every instance the answer names, in its order."""
    if isinstance(answer, LaunchResult):
        return list(answer.instances)
    return [i for item in answer.answers for i in item.result.instances]
