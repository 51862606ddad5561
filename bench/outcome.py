"""What one strategy did on one case, in the units the report compares."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

STRATEGIES = ("broker", "karpenter", "classic", "gpufill", "oracle")
SIMULATED = frozenset({"broker", "karpenter", "oracle"})
LAUNCH_APIS = ("RunInstances", "CreateFleet")  # the calls that launch instances


@dataclass
class WarmRun:
    """A run in a deployment whose facts are warm: its time to fill (cold starts included) and what
    it launched, beside the first run after deploy. A default deployment refreshes its facts on a
    schedule, so this is the figure its users meet (engine_runs.DEFAULT_DEPLOYMENT_FIGURE)."""

    modelled_seconds: float
    cold_start_seconds: float
    launched: int
    launch_calls: int
    hourly_cost: float
    scored: bool  # False when it ranked from warm facts (no ScoreRegions)
    prepared: bool  # False when it entered its first region from warm launch settings


@dataclass
class Outcome:
    case: str
    strategy: str
    requested: int
    launched: int
    run_instances: int
    ec2_calls: int
    hourly_cost: float
    modelled_seconds: float
    status: str = ""
    # None for the simulators: they have no state machine and no Lambdas to count.
    transitions: int | None = None
    lambda_invocations: int | None = None
    orchestration_usd: float | None = None
    history_events: int | None = None  # the execution's history (Step Functions caps one at 25,000)
    lambda_by_function: dict[str, int] | None = None  # invocations per handler
    cold_start_seconds: float | None = None  # of modelled_seconds, the Lambda cold starts on the way to the fill
    # Launch answers by outcome ("launched", "capacity", "quota", ...): one per RunInstances call, one per pool
    # a fleet answered for; and how many RunInstances launched a full batch.
    answers: dict[str, int] = field(default_factory=dict)
    full_batches: int = 0
    ec2_by_api: dict[str, int] = field(default_factory=dict)
    regions_used: list[str] = field(default_factory=list)  # where the fleet landed, in launch order
    # gpufill only: the same request again in the same deployment right after this run (its
    # instances terminated, capacity back in the market), with the warm facts this run left.
    warm: WarmRun | None = None

    def __post_init__(self) -> None:
        if isinstance(self.warm, dict):  # read back from outcomes.json
            self.warm = WarmRun(**self.warm)

    @property
    def simulated(self) -> bool:
        return self.strategy in SIMULATED

    @property
    def launch_calls(self) -> int:
        """Launch calls of any kind: RunInstances, and CreateFleet (one fleet call counts 1)."""
        return self.run_instances + self.ec2_by_api.get("CreateFleet", 0)

    @property
    def launch_calls_by_api(self) -> dict[str, int]:
        """Launch calls under the API that made them."""
        return {api: n for api in LAUNCH_APIS if (n := self.ec2_by_api.get(api, 0))}

    @property
    def launch_label(self) -> str:
        """What this run's launch calls were: "CreateFleet", "RunInstances", or both with counts."""
        return launch_label([self])

    @property
    def fill(self) -> float:
        return self.launched / self.requested if self.requested else 0.0

    def to_json(self) -> dict:
        return asdict(self)


def launch_label(outcomes) -> str:
    """The launch APIs behind a set of outcomes' launch calls, as a label."""
    totals: dict[str, int] = {}
    for o in outcomes:
        for api, n in o.launch_calls_by_api.items():
            totals[api] = totals.get(api, 0) + n
    if len(totals) == 1:
        return next(iter(totals))
    if not totals:
        return "launch calls"
    return " + ".join(f"{totals[api]} {api}" for api in LAUNCH_APIS if api in totals)
