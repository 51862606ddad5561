"""`python -m bench.dynamic.engine_check`: the gpufill replay against the real state machine on the
local engine, on dynamic markets whose changes only restock (the engine's scenario `restock`;
drains and reclaims have no scenario field), so the replay's shortcut can be checked.

For each market it prints where each run's instances landed (pool by pool), its time to N, its
fleets (CreateFleet calls) and how many times it read the regions' facts (DescribeSpotPriceHistory
per region: the first try, then every WAIT_FACTS_TTL_SECONDS). The engine's clock moves with Wait states only, so its launch times leave out the tries' own
call latencies (seconds, against waits of minutes). A run takes a minute or more of wall time:
this is a check to run by hand, not part of `make bench`.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import io
import time
import warnings
from collections import Counter

from gpufill.local.engine import LocalEngine
from gpufill.local.scenario import MarketScenario

from bench.costs import complete_engine_model
from bench.dynamic import generate, gpufill
from bench.dynamic.generate import DynamicCase
from bench.dynamic.measure import time_to_n

QUICK = (3, 8, 13)  # seed's scarce markets of 1, 4 and 16


def restock_only(case: DynamicCase) -> DynamicCase:
    return dataclasses.replace(case, changes=tuple(c for c in case.changes if c.delta > 0))


# Wall seconds the engine may spend on one execution of the chain. engine.run stops a run still
# going after its timeout (600 s by default) and reports it FAILED with LocalTimeout: that, not the
# chain's hand-over (engine.run follows `continued_as` to the last execution), is why the scarce
# markets' runs of 12 modelled hours once printed no instance.
RUN_TIMEOUT_SECONDS = 3 * 3600


def on_engine(case: DynamicCase, timeout: float = RUN_TIMEOUT_SECONDS) -> tuple[Counter, float | None, int, int, str]:
    """(instances per pool, time to N, fleets, facts reads, how the run ended) of the state
    machine with wait_for_capacity PT12H."""
    warnings.filterwarnings("ignore", message="No application metrics to publish")
    complete_engine_model()
    scenario = {**case.start.scenario, "restock": [
        {"at_seconds": c.at, "zone": c.zone, "type": c.instance_type, "spot": c.delta} for c in case.changes
    ]}
    request = {**case.start.request, "wait_for_capacity": {"deadline": "PT12H"}, "maintain": True}
    launches: list[tuple[float, int]] = []
    with contextlib.redirect_stdout(io.StringIO()), LocalEngine(MarketScenario.model_validate(scenario)) as engine:
        admit = engine.market.admit

        def counted(backend, region, zone, itype, market, instances, **options):
            launches.append((engine.elapsed, len(instances)))
            return admit(backend, region, zone, itype, market, instances, **options)

        engine.market.admit = counted
        execution = engine.run(request, name=f"check-{case.name}", timeout=timeout)
        scans = engine.calls.calls.count("ec2:DescribeSpotPriceHistory")
        fleets = engine.calls.calls.count("ec2:CreateFleet")
    output = execution.output if isinstance(execution.output, dict) else {}
    pools = Counter((i["availability_zone"], i["instance_type"]) for i in output.get("instances", []))
    held, reached = 0, None
    for at, n in launches:
        held += n
        if held >= case.count and reached is None:
            reached = at
    ended = execution.status if execution.error is None else f"{execution.status} {execution.error}"
    return pools, reached, fleets, scans // len(case.start.regions()), f"{ended} after {len(execution.continued_from) + 1} execution(s)"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.dynamic.engine_check", description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=generate.DEFAULT_SEED)
    parser.add_argument("--cases", type=int, nargs="*", default=list(QUICK), help="market indexes of the seed")
    parser.add_argument("--timeout", type=float, default=RUN_TIMEOUT_SECONDS, help="wall seconds per execution")
    args = parser.parse_args(argv)
    cases = generate.generated(args.seed)
    print("| market | same pools | time to N: replay / engine | fleets: replay / engine | facts reads: replay / engine "
          "| engine run | engine wall s |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for index in args.cases:
        case = restock_only(cases[index])
        ec2 = gpufill.run(case, request_id=f"check-{case.name}")  # the same jitter as the engine's run
        mine = Counter((i.zone, i.instance_type) for i in ec2.instances)
        reads = ec2.calls["DescribeSpotPriceHistory"] // len(case.start.regions())
        started = time.monotonic()
        pools, reached, engine_fleets, engine_reads, ended = on_engine(case, args.timeout)
        wall = time.monotonic() - started
        replay_t = time_to_n(ec2.instances, case.count)
        show = lambda t: "—" if t is None else f"{t:.0f} s"  # noqa: E731
        print(f"| {case.name} | {'yes' if pools == mine else f'no: {dict(mine)} / {dict(pools)}'} | "
              f"{show(replay_t)} / {show(reached)} | {ec2.calls['CreateFleet']} / {engine_fleets} | {reads} / {engine_reads} "
              f"| {ended} | {wall:.0f} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
