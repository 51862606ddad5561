"""`python -m bench.dynamic`: every strategy on the dynamic markets of several seeds; prints the
tables and the targets, writes them with the plots and every outcome to bench/results/dynamic/,
and regenerates the dynamic-markets section of docs/benchmark.md."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from bench.dynamic import broker, generate, goals, gpufill, karpenter, levers, plot, skypilot
from bench.dynamic.measure import outcome
from bench.dynamic.render import DOCS, render, splice
from bench.dynamic.report import STRATEGIES, bucket_table, headline, judge, paired_table
from bench.tables import as_text

RESULTS = Path(__file__).resolve().parents[1] / "results" / "dynamic"
RUNS = {
    "skypilot": skypilot.run,
    "karpenter": karpenter.run,
    "broker": broker.run,
    "classic": lambda case: gpufill.run(case, "classic"),
    "gpufill": gpufill.run,
}
assert tuple(RUNS) == STRATEGIES
QUICK_SEEDS, QUICK_CASES = 1, (3, 8, 13, 18)  # one seed, the scarce market of each request size


HELD_OUT = 5  # seeds the generator makes on the spot for the goals, besides the committed ones


def run_all(cases) -> list:
    return [outcome(case, s, RUNS[s](case)) for case in cases for s in STRATEGIES]


def held_out_seeds(n: int) -> list[int]:
    """`n` seeds nobody chose: drawn from os.urandom, above the committed ones' range."""
    return [int.from_bytes(os.urandom(4), "big") for _ in range(n)]


def run_seeds(seeds: list[int], scenarios: int, quick: bool, label: str = "") -> tuple[list, list, list]:
    """(every strategy's outcomes, the cases, gpufill's outcomes with all_or_nothing) on the seeds' markets."""
    outcomes, cases_run, aon = [], [], []
    for seed in seeds:
        cases = generate.generated(seed, scenarios)
        if quick:
            cases = [c for n, c in enumerate(cases) if n in QUICK_CASES]
        print(f"gpufill dynamic bench: {label}seed {seed}, {len(cases)} markets", file=sys.stderr, flush=True)
        cases_run += cases
        for o in run_all(cases):
            o.case = f"s{seed}/{o.case}"
            outcomes.append(o)
        for case in cases:
            o = outcome(case, "gpufill", gpufill.run(case, asked=gpufill.Asked(all_or_nothing=True)))
            o.case = f"s{seed}/{o.case}"
            aon.append(o)
    return outcomes, cases_run, aon


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.dynamic", description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=generate.DEFAULT_SEED)
    parser.add_argument("--seeds", type=int, default=generate.DEFAULT_SEEDS)
    parser.add_argument("--scenarios", type=int, default=generate.DEFAULT_SCENARIOS, help="markets per seed")
    parser.add_argument("--quick", action="store_true", help=f"{QUICK_SEEDS} seed, {len(QUICK_CASES)} scarce markets")
    parser.add_argument("--held-out", type=int, default=None, metavar="N",
                        help=f"also judge the goals on N seeds drawn from os.urandom (default {HELD_OUT}, 0 with --quick)")
    parser.add_argument("--held-out-seeds", default=None, metavar="S,S,...",
                        help="the held-out seeds to use instead of drawing them (to rerun a report's)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--docs", type=Path, default=None, help=f"the doc whose section to regenerate (default {DOCS} "
                        "when writing to the default --out, none otherwise)")
    args = parser.parse_args(argv)
    if args.quick:
        args.seeds = QUICK_SEEDS
    started = time.monotonic()
    seeds = [args.seed + n for n in range(args.seeds)]
    outcomes, cases, aon = run_seeds(seeds, args.scenarios, args.quick)
    if args.held_out_seeds:
        held = [int(s) for s in args.held_out_seeds.split(",")]
    else:
        held = held_out_seeds(args.held_out if args.held_out is not None else (0 if args.quick else HELD_OUT))
    held_outcomes, _, held_aon = run_seeds(held, args.scenarios, args.quick, "held-out ")
    found = {} if args.quick else levers.measure(cases)  # a run per setting: left to the full run
    seconds = time.monotonic() - started
    caption = f"{len(seeds)} seed{'s' * (len(seeds) > 1)} from {seeds[0]}, {len(outcomes) // len(STRATEGIES)} markets"
    sets = [(f"committed seeds ({len(outcomes) // len(STRATEGIES)} markets)", outcomes, aon)]
    if held_outcomes:
        sets.append((f"held-out seeds {', '.join(map(str, held))} ({len(held_outcomes) // len(STRATEGIES)} markets)",
                     held_outcomes, held_aon))
    kept = [o for o in outcomes if o.strategy == "karpenter"]
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "outcomes.json").write_text(json.dumps({
        "seeds": seeds, "outcomes": [o.to_json() for o in outcomes],
        "held_out": {"seeds": held, "outcomes": [o.to_json() for o in held_outcomes]},
    }, indent=1) + "\n")
    plot.time_to_n(outcomes, args.out / "time-to-n.png", caption)
    plot.dollars(outcomes, args.out / "dollars.png", caption)
    text = render(outcomes, caption=caption, seconds=seconds, quick=args.quick, goal_sets=sets, held_out=held,
                  levers=levers.table(found, kept) if found else None)
    (args.out / "report.md").write_text(text)
    docs = args.docs if args.docs is not None else (DOCS if args.out == RESULTS and not args.quick else None)
    if docs is not None:
        splice(docs, text)

    print(f"\nDynamic markets, {caption}: pooled\n")
    print(as_text(*headline(outcomes)))
    print("\nPer request size\n")
    print(as_text(*bucket_table(outcomes)))
    print("\ngpufill against each baseline, market by market\n")
    print(as_text(*paired_table(outcomes)))
    print("\nTargets\n")
    for v in judge(outcomes):
        print(f"  {v.word:6}  {v.target}: {v.margin}")
    for name, mine, mine_aon in sets:
        print(f"\nGoals on the {name}\n")
        for g in goals.judge(mine, mine_aon):
            print(f"  {g.word:6}  {g.goal}: {g.figure}; {g.test}")
    if found:
        print("\nThe wait's calls by setting\n")
        print(as_text(*levers.table(found, kept)))
    print(f"\nwrote {args.out}/report.md, time-to-n.png, dollars.png, outcomes.json" + (f"; regenerated {docs}" if docs else ""))
    print(f"took {seconds:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
