"""`python -m bench.dynamic.backoff`: the wait's cap (and all_or_nothing) measured on the dynamic
markets, for docs/benchmark.md's "Waiting: backoff and cap": gpufill's strategy alone, once per
cap, with and without all_or_nothing; per setting the markets filled, the median and p90 time to
N, the dollars (and of them, idle before the fleet was complete) and the EC2 calls."""

from __future__ import annotations

import argparse
import sys
import time
from statistics import median

from bench.dynamic import generate, gpufill, karpenter
from bench.dynamic.measure import Outcome, outcome
from bench.dynamic.report import duration, quantile
from bench.tables import as_text

DEFAULT_CAPS = (120, 300, 900)


def measure(cases, caps, all_or_nothing=(False, True)) -> dict[tuple[int, bool], list[Outcome]]:
    found = {}
    for whole in all_or_nothing:
        for cap in caps:
            asked = gpufill.Asked(max_delay=cap, first_delay=min(cap, gpufill.WAIT_FIRST_DELAY_SECONDS), all_or_nothing=whole)
            found[(cap, whole)] = [outcome(case, "gpufill", gpufill.run(case, "gpufill", asked=asked)) for case in cases]
    return found


def table(found: dict[tuple[int, bool], list[Outcome]], reference: list[Outcome] | None = None) -> tuple[list[str], list[list[str]]]:
    """A row per setting; `reference` (Karpenter-style on the same markets) last, for scale."""
    header = ["cap", "all_or_nothing", "filled", "median time to N", "p90", "Σ time to N", "Σ $", "of it idle", "EC2 calls Σ"]
    rows = []
    settings = [(duration(cap), "yes" if whole else "no", mine) for (cap, whole), mine in found.items()]
    if reference:
        settings.append(("karpenter-style", "", reference))
    for cap, whole, mine in settings:
        times = [o.time_to_n if o.filled else generate.HORIZON_SECONDS for o in mine]
        rows.append([
            cap, whole, f"{sum(o.filled for o in mine)}/{len(mine)}",
            duration(median(times)), duration(quantile(times, 0.9)), duration(sum(times)),
            f"{sum(o.dollars for o in mine):.2f}", f"{sum(o.idle_dollars for o in mine):.2f}",
            str(sum(o.ec2_calls for o in mine)),
        ])
    return header, rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.dynamic.backoff", description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=generate.DEFAULT_SEED)
    parser.add_argument("--seeds", type=int, default=1)
    parser.add_argument("--markets", type=int, default=generate.DEFAULT_SCENARIOS, help="markets per seed")
    parser.add_argument("--caps", default=",".join(str(c) for c in DEFAULT_CAPS), help="caps in seconds, comma-separated")
    args = parser.parse_args(argv)
    started = time.monotonic()
    cases = [c for n in range(args.seeds) for c in generate.generated(args.seed + n, args.markets)]
    found = measure(cases, [int(c) for c in args.caps.split(",")])
    reference = [outcome(case, "karpenter", karpenter.run(case)) for case in cases]
    print(f"gpufill on {len(cases)} dynamic markets of {args.seeds} seed(s) from {args.seed}, by the wait's cap\n")
    print(as_text(*table(found, reference)))
    print(f"\ntook {time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
