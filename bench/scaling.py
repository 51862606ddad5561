"""`python -m bench.scaling`: what one gpufill run costs to orchestrate as the request grows.

One axis at a time from a base request (16 instances, 5 regions, 1 type) on an ample
market (a fifth of the pools sold out, four times the request in stock, no quotas):
count, regions, instance types. Each point is gpufill's defaults through the real state
machine on the local engine: state transitions, Lambda invocations, history events
(Step Functions Standard caps an execution at 25,000) and orchestration dollars
(Step Functions Standard $0.025 per 1,000 transitions, Lambda arm64 requests and
GB-seconds; bench/prices.json), next to the hourly price of the fleet it bought, and the
modelled time to fill. Writes bench/results/scaling.md.
"""

from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path

from bench import engine_runs
from bench.cases import Case
from bench.generate import ORIGIN, REGION_ZONES, SCARCITY, _pools, _region, _spread
from bench.tables import as_markdown, as_text
from gpufill import constants

RESULTS = Path(__file__).parent / "results"
TYPES = ("g6.xlarge", "g5.xlarge", "g6e.xlarge")  # 4 vCPUs each
BASE = {"count": 16, "regions": 5, "types": 1}
AXES = {"count": (1, 4, 16, 64, 128), "regions": (2, 5, 8, 11), "types": (1, 2, 3)}


def scaling_case(count: int, regions: int, types: int, seed: int = 1) -> Case:
    rng = random.Random(f"scaling-{seed}-{count}-{regions}-{types}")
    names = sorted(REGION_ZONES)[:regions]
    kinds = list(TYPES[:types])
    sold_out, depth = SCARCITY["ample"]
    pools = _pools(rng, names, kinds, sold_out)
    _spread(rng, pools, total=round(max(count, 8) * depth))
    scenario = {"description": f"scaling: {count} x {types} type(s) over {regions} regions", "regions": {}}
    for region in names:
        market = _region(rng, region, kinds, pools, count, 1.0, {t: 0.05 for t in kinds})
        market.pop("quota", None)
        scenario["regions"][region] = market
    request = {"action": "provision", "instance_types": kinds, "count": count, "market": "spot",
               "regions": names, "origin_region": ORIGIN}
    return Case(name=f"scale-n{count}-r{regions}-t{types}", scenario=scenario, request=request, tier="ample")


def points(quick: bool = False) -> list[tuple[str, dict]]:
    found = []
    for axis, values in AXES.items():
        for value in values[:2] if quick else values:
            found.append((axis, {**BASE, axis: value}))
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.scaling", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="two points per axis")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    header = ["axis", "count", "regions", "types", "fill", "launch calls", "transitions", "Lambda invocations",
              "history events", "% of 25,000", "orchestration $", "$ per instance", "fleet $/h", "time s"]
    body, seen = [], {}
    for axis, p in points(args.quick):
        case = scaling_case(p["count"], p["regions"], p["types"])
        if case.name not in seen:  # the base point sits on every axis: run it once
            seen[case.name] = engine_runs.run(case, "gpufill")
            print(f"  {case.name}: {seen[case.name].status}", file=sys.stderr, flush=True)
        o = seen[case.name]
        body.append([
            axis, str(p["count"]), str(p["regions"]), str(p["types"]), f"{o.fill:.0%}", str(o.launch_calls),
            str(o.transitions), str(o.lambda_invocations), str(o.history_events),
            f"{(o.history_events or 0) / constants.HISTORY_EVENTS_LIMIT:.1%}", f"{o.orchestration_usd:.5f}",
            f"{o.orchestration_usd / o.launched:.6f}" if o.launched else "—", f"{o.hourly_cost:.2f}",
            f"{o.modelled_seconds:.1f}",
        ])
    print(as_text(header, body))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "scaling.md").write_text(
        "# gpufill orchestration cost against request size\n\n"
        + (__doc__ or "").split("\n\n", 1)[1].replace("Writes bench/results/scaling.md.", "")
        + f"\nBase: {BASE['count']} instances, {BASE['regions']} regions, {BASE['types']} type; one axis varied per block. "
        "Reproduce with `python -m bench.scaling`.\n\n" + as_markdown(header, body) + "\n"
    )
    print(f"wrote {args.out / 'scaling.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
