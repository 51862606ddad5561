"""`python -m bench`: run every strategy on the seeded markets and the examples, print and write the results."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from bench import analysis, leak, plot, report
from bench.generate import DEFAULT_SCENARIOS, DEFAULT_SCORE_NOISE, DEFAULT_SEED, all_cases
from bench.outcome import Outcome
from bench.engine_runs import ENGINE_STRATEGIES
from bench.runner import SIMULATORS, run_all
from bench.tables import as_text, calls_table, summary_table
from bench.targets import judge

RESULTS = Path(__file__).parent / "results"


def _saved_outcomes(path: Path, seed: int, cases) -> dict:
    """The state-machine runs from `path`; the simulators run again (they take no time and see the same market)."""
    saved = json.loads(path.read_text())
    if saved["seed"] != seed:
        raise SystemExit(f"{path} holds seed {saved['seed']}, not {seed}")
    outcomes = {
        (o["case"], o["strategy"]): Outcome(**o) for o in saved["outcomes"] if o["strategy"] in ENGINE_STRATEGIES
    }
    for case in cases:
        for strategy, simulate in SIMULATORS.items():
            outcomes[(case.name, strategy)] = simulate(case)
    missing = [c.name for c in cases if (c.name, "gpufill") not in outcomes]
    if missing:
        raise SystemExit(f"{path} has no outcomes for {', '.join(missing)}")
    return outcomes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED, help=f"market generator seed (default {DEFAULT_SEED})")
    parser.add_argument("--scenarios", type=int, default=DEFAULT_SCENARIOS, help="generated markets (default %(default)s)")
    parser.add_argument(
        "--score-noise", type=float, default=DEFAULT_SCORE_NOISE, help="placement score error, in doublings (default %(default)s)"
    )
    parser.add_argument("--no-examples", action="store_true", help="leave out the markets in examples/")
    parser.add_argument("--workers", type=int, default=min(2, os.cpu_count() or 1), help="engine processes (default %(default)s)")
    parser.add_argument("--out", type=Path, default=RESULTS, help="where report.md, scarcity.png and outcomes.json go")
    parser.add_argument(
        "--render-only", action="store_true", help="rewrite the report and plot from OUT/outcomes.json, running nothing"
    )
    args = parser.parse_args(argv)

    started = time.monotonic()
    cases = all_cases(args.seed, args.scenarios, with_examples=not args.no_examples, score_noise=args.score_noise)
    generated = {c.name for c in cases if c.source == "generated"}
    engine_runs = 2 * len(cases)
    done = 0

    def progress(outcome, seconds: float) -> None:
        nonlocal done
        done += 1
        print(f"  [{done}/{engine_runs}] {outcome.strategy:8} {outcome.case:26} {seconds:5.1f} s wall", file=sys.stderr, flush=True)

    if args.render_only:
        outcomes = _saved_outcomes(args.out / "outcomes.json", args.seed, cases)
    else:
        print(f"gpufill bench: seed {args.seed}, {len(cases)} markets, {args.workers} worker(s)", file=sys.stderr)
        outcomes = run_all(cases, workers=args.workers, on_done=progress)
    rows = analysis.rows(cases, outcomes)
    gen_rows = [r for r in rows if r.case.name in generated]

    args.out.mkdir(parents=True, exist_ok=True)
    sources = {c.name: c.source for c in cases if c.source != "generated"}
    (args.out / "report.md").write_text(report.render(rows, seed=args.seed, generated_names=generated, sources=sources))
    plot.draw(gen_rows, args.out / "scarcity.png", args.seed)
    if not args.render_only:
        (args.out / "outcomes.json").write_text(
            json.dumps({"seed": args.seed, "outcomes": [o.to_json() for o in outcomes.values()]}, indent=1) + "\n"
        )

    print("\nRunInstances calls per case (fill in brackets when short)\n")
    print(as_text(*calls_table(rows)))
    print(f"\nAggregate over the {len(generated)} generated markets\n")
    print(as_text(*summary_table(analysis.aggregate(gen_rows))))
    gen_cases = [c for c in cases if c.name in generated]
    print(
        f"\nWhat the public signals give away (AUC for 'pool has capacity', 0.5 = none): placement score "
        f"{leak.score_auc(gen_cases):.2f} as generated, {leak.score_auc(gen_cases, as_returned=True):.2f} as "
        f"returned (cap, top 10); Spot Advisor tier {leak.advisor_auc(gen_cases):.2f}"
    )
    print("\nTargets (generated set)\n")
    for verdict in judge(gen_rows):
        print(f"  {verdict.word:6}  {verdict.target}: {verdict.margin}")
    broken = report.broken_runs(rows)
    if broken:
        print(f"\n{len(broken)} engine run(s) broke: " + ", ".join(f"{r.outcome.strategy}/{r.case.name}" for r in broken))
    print(f"\nwrote {args.out / 'report.md'}, {args.out / 'scarcity.png'}, {args.out / 'outcomes.json'}")
    print(f"took {time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
