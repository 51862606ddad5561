"""The state a provisioning run carries from one state-machine step to the next."""

from __future__ import annotations

from typing import Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, field_validator

from gpufill.constants import (
    WAIT_FIRST_DELAY_SECONDS,
    WAIT_LONGEST_DELAY_SECONDS,
    WAIT_MAX_DELAY_SECONDS,
    WAIT_MIN_DELAY_SECONDS,
)

MarketName = Literal["spot", "on-demand"]
# What an instance runs as: a pool's market, or a Capacity Block (bought once, MarketType capacity-block).
InstanceMarket = Literal["spot", "on-demand", "capacity-block"]
Outcome = Literal["launched", "capacity", "quota", "throttled", "error"]
# What the state machine does after a step: launch again in this region, prepare the next region
# (or the same one with a fresh AMI), stop because the fill is done, the market is exhausted or
# EC2 rejected the launch itself; after the fill, wait for the instances to run.
# A gang (placement, all_or_nothing) adds: roll back what this run launched, then try elsewhere or
# end GANG_NOT_PLACED, or with wait_for_capacity "await_capacity" (everything handed back, wait for
# the next try). With wait_for_capacity, an exhausted market leads to "retry" (wait, then try
# again), "handover" (wait, then continue as a new execution), "expired" (the deadline passed) or
# "stopped" (torn down); after the wait, "rank" starts a try that ranks by the facts the run holds.
WhereNext = Literal[
    "launch", "prepare", "refresh", "done", "exhausted", "rejected", "wait", "ready", "rollback", "not_placed",
    "retry", "handover", "expired", "stopped", "continued", "handover_failed", "await_capacity", "rank",
]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ZoneOffer(_Model):
    availability_zone: str
    zone_id: str | None = None
    spot_price: float | None = None
    placement_score: int | None = None


class TypeFacts(_Model):
    """What one region offers of one instance type."""

    instance_type: str
    zones: list[ZoneOffer] = Field(default_factory=list)
    advisor_tier: int | None = None
    on_demand_price: float | None = None

    @property
    def spot_price(self) -> float | None:
        prices = [z.spot_price for z in self.zones if z.spot_price is not None]
        return min(prices) if prices else None


class RegionFacts(_Model):
    """ScoreRegion's answer for one region: the facts, or why the region is out."""

    region: str
    types: list[TypeFacts] = Field(default_factory=list)
    error: str | None = None


class RegionScore(_Model):
    region: str
    instance_type: str
    spot_price: float | None = None
    az_count: int = 0
    advisor_tier: int | None = None
    placement_score: float | None = None
    # price-capacity scoring: the spot price discounted by the region-level placement score (lower first).
    price_per_fill: float | None = None
    points: dict[str, int] = Field(default_factory=dict)
    score: int = 0
    rank: str = "C"
    dropped: str | None = None


class Pool(_Model):
    """One place to ask for capacity: a region, an AZ, an instance type, a market."""

    region: str
    availability_zone: str
    instance_type: str
    market: MarketName
    price: float | None = None
    note: str | None = None
    # Found empty by another run moments ago (the capacity cache): tried last; a fleet asks for it apart.
    deferred: bool = False
    # An On-Demand Capacity Reservation this pool launches into (market on-demand), and how many
    # instances the plan gives it (policy/reservations.py): never more than it had room for.
    capacity_reservation_id: str | None = None
    reserved: int | None = None
    # The reservation is a Capacity Block for ML: launches say MarketType capacity-block.
    capacity_block: bool = False
    # A Capacity Block's upfront fee: paid once when it was bought, not by the instance-hour.
    upfront_fee: float | None = None

    @property
    def key(self) -> str:
        base = f"{self.market}/{self.region}/{self.availability_zone}/{self.instance_type}"
        return f"{base}/{self.capacity_reservation_id}" if self.capacity_reservation_id else base


class Attempt(_Model):
    number: int | None = None  # across the whole run; the ClientToken is derived from it
    region: str
    availability_zone: str
    instance_type: str
    market: MarketName
    batch: int
    launched: int
    outcome: Outcome
    reason: str | None = None
    note: str | None = None
    capacity_reservation_id: str | None = None


class Instance(_Model):
    instance_id: str
    region: str
    availability_zone: str
    instance_type: str
    market: InstanceMarket
    hourly_price: float | None = None
    # The On-Demand Capacity Reservation the instance runs in, when it runs in one.
    capacity_reservation_id: str | None = None
    # The upfront fee of the Capacity Block the instance runs in: its spend, paid once per block.
    capacity_block_fee: float | None = None
    state: str | None = None
    private_ip: str | None = None
    connect: str | None = None
    # ready_timeout: the last step startup.sh reported (tag gpufill:startup-step), and the verdict
    # once the run stops looking (serving unset: not checked, e.g. ready_timeout PT0S).
    startup_step: str | None = None
    serving: bool | None = None
    serving_reason: str | None = None


class ReservationSeen(_Model):
    """An On-Demand Capacity Reservation as the plan found it, and what the plan gives it."""

    capacity_reservation_id: str
    region: str
    availability_zone: str
    instance_type: str
    available: int
    match: str  # EC2's InstanceMatchCriteria: "open" or "targeted"
    planned: int = 0
    why_not: str | None = None


class Plan(_Model):
    request_id: str
    status: Literal["PLANNED"] = "PLANNED"
    market: MarketName
    scoring: str = "classic"
    regions: list[RegionScore] = Field(default_factory=list)
    pools: list[Pool] = Field(default_factory=list)
    pools_total: int | None = None  # set when a plan's output lists only the first pools
    reservations: list[ReservationSeen] = Field(default_factory=list)


class PlanRef(_Model):
    """What the run state carries of a plan: the pools stay in the table under `key`.

    The state stays small whatever the number of regions x types x AZs; `regions` holds each
    region's best score only, for the console.
    """

    request_id: str
    market: MarketName
    scoring: str = "classic"
    key: str
    pools: int
    regions: list[RegionScore] = Field(default_factory=list)
    # The capacity reservations the run found, used or not (capacity_reservations "open"/"only").
    reservations: list[ReservationSeen] = Field(default_factory=list)


class RegionLaunch(_Model):
    """A region's launch parameters, fixed in the run before any call so a retried step sends the same request."""

    region: str
    image_id: str
    root_volume_gib: int
    security_group_id: str | None = None
    subnets: dict[str, str] = Field(default_factory=dict)
    ami_refreshed: bool = False


class TemplateVersion(_Model):
    """A launch template version the run made in a region (launch_mode "fleet"): every fleet of the
    run there launches from it while what it holds is unchanged, and it is deleted when the run
    ends (policy/template_versions.py)."""

    region: str
    # The ClientToken it was made with, derived from the request, the run and its contents: a fleet
    # whose contents hash to the same token launches from it without asking EC2 again.
    token: str
    template_id: str
    version: str
    # EC2 answered with the template's default version, which is never deleted (EC2 refuses it too).
    default: bool = False


class Gang(_Model):
    """Where a gang landed and where it could not complete (policy/gang.py).

    `anchor` is the place ("region" or "region/az") of the first instance; the pools tried
    after it must share it. `resume` is where the cursor goes back to after a rollback: the
    pools before it were tried before the anchor was set. `excluded` holds "market:place" of
    each gang rolled back. The ids rolled back are in the table.
    """

    anchor: str | None = None
    market: MarketName | None = None  # where the anchor's instance landed
    resume: int = 0
    excluded: list[str] = Field(default_factory=list)
    rolled_back: int = 0


class Waiting(_Model):
    """wait_for_capacity's progress, carried in the run (and into a continued execution).

    The deadline is absolute, fixed once when the request was accepted, so a continued
    execution keeps it; `tries` counts the fills made so far across the whole chain.
    """

    deadline: str
    deadline_epoch: float
    tries: int = 1
    tries_here: int = 1  # in this execution: the continue-as-new threshold counts these
    generation: int = 0  # 0 for the original execution, n for `<request>-c<n>`
    attempts_before: int = 0  # the run's attempts_total when the current try started
    events_here: int = 0  # a bound on this execution's history events so far (policy/waiting.py)
    delay_seconds: int = 0
    next_try_at: str | None = None
    successor: str | None = None  # the execution this one hands over to
    # When the facts the run ranks by (ScoreRegions' answers, the reservations) were last read,
    # epoch seconds: a try reuses them while they are younger than WAIT_FACTS_TTL_SECONDS.
    facts_read_at: float | None = None
    # The backoff, fixed when the request was accepted (the request's, else the deployment's):
    # the first wait, doubling after each try up to the cap. Bounded as the request's fields are,
    # so a hand-written continuation cannot make the wait spin.
    first_delay_seconds: int = Field(default=WAIT_FIRST_DELAY_SECONDS, ge=WAIT_MIN_DELAY_SECONDS, le=WAIT_LONGEST_DELAY_SECONDS)
    max_delay_seconds: int = Field(default=WAIT_MAX_DELAY_SECONDS, ge=WAIT_MIN_DELAY_SECONDS, le=WAIT_LONGEST_DELAY_SECONDS)


class Run(_Model):
    """The fill loop's cursor and what it holds so far.

    Attempts are numbered across the whole run (the number goes into the ClientToken); only
    the last step's attempts ride in the state, the full log is in the table.
    """

    cursor: int = 0
    batch: int
    remaining: int
    launched: int = 0
    next: WhereNext = "prepare"
    attempts_total: int = 0
    step_attempts: list[Attempt] = Field(default_factory=list)
    instances: list[Instance] = Field(default_factory=list)
    hourly_cost: float = 0.0
    # "market/region" (the region is out: unreachable or unusable), "market/region/quota group",
    # a fleet's "market/region/tier" or one pool's "market/region/AZ/type[/reservation]" (policy/fill.py).
    blocked: list[str] = Field(default_factory=list)
    launch: RegionLaunch | None = None
    # With wait_for_capacity: each region's launch parameters as an earlier try of this run fixed
    # them. A later try enters the region with them (no image lookup again) until the run reads
    # the regions' facts again (policy/waiting.next_try_route), which clears them.
    prepared: list[RegionLaunch] = Field(default_factory=list)
    # The launch template versions the run's fleets launch from, deleted when the run ends.
    template_versions: list[TemplateVersion] = Field(default_factory=list)
    cause: str | None = None
    lost: list[Instance] = Field(default_factory=list)
    boot_rounds: int = 0
    # For fleets too large to list a command per instance: the command with REGION and INSTANCE_ID to fill in.
    connect_template: str | None = None
    gang: Gang | None = None
    wait: Waiting | None = None
    # ready_timeout: when the run stops waiting for the model servers (epoch seconds), how many
    # checks it made, and how long it pauses before the next one.
    ready_deadline: float | None = None
    ready_rounds: int = 0
    ready_pause: int | None = None
    # launch_mode "fleet": the calls made again in this region for pools EC2 did not answer for
    # (RequestLimitExceeded, InternalError per override), bounded by policy/fleet_moves.py.
    fleet_retries: int = 0
    # Instances this plan put in each capacity reservation (id -> count): a reservation pool takes
    # at most what the plan gave it. Cleared when the plan is done (the next try plans afresh).
    reserved_taken: dict[str, int] = Field(default_factory=dict)
    # The Capacity Block the run bought and launches into: its reservation, AZ, start and end, fee.
    capacity_block: dict | None = None
    # When the run was accepted (epoch seconds, the handlers' clock): a continued execution keeps
    # it, so the time to fill counts from the request's start, not from its latest execution.
    started_at: float | None = None

    @field_validator("blocked")
    @classmethod
    def _market_named_once(cls, keys: list[str]) -> list[str]:
        """A pool's key once named its market twice ("spot/spot/us-west-2/..."), and a run state
        written then (an execution running across a deploy, a continued wait) still blocks the
        same pool: such a key is read with the market once. No other key repeats its first part."""
        return list(dict.fromkeys(_market_once(key) for key in keys))


def _market_once(key: str) -> str:
    market, _, rest = key.partition("/")
    return rest if market in get_args(MarketName) and rest.startswith(f"{market}/") else key


class LaunchResult(_Model):
    """What one launch call came back with for one pool, already classified."""

    outcome: Outcome
    reason: str | None = None
    message: str | None = None
    instances: list[Instance] = Field(default_factory=list)
    note: str | None = None


class PoolAnswer(_Model):
    """What a fleet launch said of one of its pools: `index` is the pool's place in the plan."""

    index: int
    result: LaunchResult


class FleetAnswer(_Model):
    """What one CreateFleet came back with: an answer per pool it launched in or could not
    launch in, or one error for the whole call (`failure`), which EC2 gives before launching."""

    answers: list[PoolAnswer] = Field(default_factory=list)
    failure: LaunchResult | None = None
    # The run's launch template version the fleet launched from, made for it or made by an
    # earlier fleet of the run in the region. None when the call never reached a version.
    template_version: TemplateVersion | None = None
