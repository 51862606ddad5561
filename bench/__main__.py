"""`python -m bench`: run every strategy on the seeded markets of several seeds and the examples; print
and write per-seed and pooled results."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from pathlib import Path

from bench import analysis, leak, plot, pooled, report
from bench.engine_runs import ENGINE_STRATEGIES
from bench.generate import DEFAULT_SCENARIOS, DEFAULT_SCORE_NOISE, DEFAULT_SEED, examples, generated
from bench.outcome import STRATEGIES, Outcome
from bench.runner import SIMULATORS, run_sets
from bench.tables import as_text
from bench.targets import judge

RESULTS = Path(__file__).parent / "results"
DEFAULT_SEEDS = 5
# --quick: two seeds, one generated case per request size (tiers plenty, ample, tight, scarce), no examples.
QUICK_SEEDS = 2
QUICK_CASES = (0, 6, 12, 18)


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


def _tagged(rows: list[analysis.Row], seed: int) -> list[analysis.Row]:
    """The rows with each case named after its seed too, so cases of different seeds stay apart when pooled."""
    out = []
    for r in rows:
        case = dataclasses.replace(r.case, name=f"s{seed}/{r.case.name}")
        out.append(dataclasses.replace(r, case=case))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED, help=f"first market generator seed (default {DEFAULT_SEED})")
    parser.add_argument("--seeds", type=int, default=DEFAULT_SEEDS, help="seeds, from --seed on (default %(default)s)")
    parser.add_argument("--scenarios", type=int, default=DEFAULT_SCENARIOS, help="generated markets per seed (default %(default)s)")
    parser.add_argument(
        "--score-noise", type=float, default=DEFAULT_SCORE_NOISE, help="placement score error, in doublings (default %(default)s)"
    )
    parser.add_argument("--quick", action="store_true", help=f"CI-sized: {QUICK_SEEDS} seeds, {len(QUICK_CASES)} markets each, no examples")
    parser.add_argument("--no-examples", action="store_true", help="leave out the markets in examples/")
    parser.add_argument("--workers", type=int, default=min(2, os.cpu_count() or 1), help="engine processes (default %(default)s)")
    parser.add_argument("--out", type=Path, default=RESULTS, help="where the reports, scarcity.png and each seed's outcomes go")
    parser.add_argument(
        "--gpufill-launch-mode", choices=["partial", "exact", "fleet"], default=None,
        help="the launch_mode gpufill's runs ask for (default: the request default), to compare modes",
    )
    parser.add_argument(
        "--gpufill-scoring", choices=["price-capacity", "blended", "classic"], default=None,
        help="the scoring gpufill's runs ask for (default: the request default), to compare them",
    )
    parser.add_argument(
        "--judge-iam", action="store_true",
        help="judge every call of the state-machine runs by the deployed IAM policies (twice the CPU; same figures)",
    )
    parser.add_argument(
        "--render-only", action="store_true", help="rewrite the reports from OUT/seed-N/outcomes.json, running no state machine"
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.seeds, args.no_examples = min(args.seeds, QUICK_SEEDS), True

    started = time.monotonic()
    seeds = [args.seed + i for i in range(args.seeds)]
    per_seed: dict[int, list[analysis.Row]] = {}
    example_rows: list[analysis.Row] = []
    seed_cases: dict[int, list] = {}  # the generated markets of each seed
    run_cases: dict[int, list] = {}  # what runs with each seed: its markets, and the examples with the first
    for n, seed in enumerate(seeds):
        cases = generated(seed, args.scenarios, args.score_noise)
        if args.quick:
            cases = [c for i, c in enumerate(cases) if i in QUICK_CASES]
        seed_cases[seed] = cases
        # The hand-written markets do not depend on the seed: once is enough.
        run_cases[seed] = cases + examples() if n == 0 and not args.no_examples else cases
    if args.render_only:
        outcomes_of = {
            seed: _saved_outcomes(args.out / f"seed-{seed}" / "outcomes.json", seed, cases)
            for seed, cases in run_cases.items()
        }
    else:
        total = 2 * sum(len(cases) for cases in run_cases.values())
        print(f"gpufill bench: seeds {seeds[0]}–{seeds[-1]}, {total // 2} markets, {args.workers} worker(s)",
              file=sys.stderr)
        done = 0

        def progress(seed: int, outcome, seconds: float) -> None:
            nonlocal done
            done += 1
            print(f"  [{done}/{total}] {seed} {outcome.strategy:8} {outcome.case:26} {seconds:5.1f} s wall",
                  file=sys.stderr, flush=True)

        outcomes_of = run_sets(run_cases, workers=args.workers, on_done=progress,
                               launch_mode=args.gpufill_launch_mode, scoring=args.gpufill_scoring, judge_iam=args.judge_iam)
    for seed, cases in run_cases.items():
        outcomes = outcomes_of[seed]
        seed_dir = args.out / f"seed-{seed}"
        seed_dir.mkdir(parents=True, exist_ok=True)
        if not args.render_only:
            (seed_dir / "outcomes.json").write_text(
                json.dumps({"seed": seed, "outcomes": [o.to_json() for o in outcomes.values()]}, indent=1) + "\n"
            )
        gen_names = {c.name for c in seed_cases[seed]}
        rows = analysis.rows(cases, outcomes)
        sources = {c.name: c.source for c in cases if c.source != "generated"}
        (seed_dir / "report.md").write_text(report.render(rows, seed=seed, generated_names=gen_names, sources=sources))
        per_seed[seed] = _tagged([r for r in rows if r.case.name in gen_names], seed)
        example_rows += [r for r in rows if r.case.name not in gen_names]

    pooled_rows = [r for rows in per_seed.values() for r in rows]
    gen_cases = [c for cases in seed_cases.values() for c in cases]
    signals = {
        "score": leak.score_auc(gen_cases),
        "returned": leak.score_auc(gen_cases, as_returned=True),
        "advisor": leak.advisor_auc(gen_cases),
        "region": leak.region_score_auc(gen_cases),
        "per_seed": {seed: leak.score_auc(cases) for seed, cases in seed_cases.items()},
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "report.md").write_text(
        report.render_pooled(per_seed, example_rows, signals=signals, score_noise=args.score_noise, quick=args.quick)
    )
    label = f"{len(seeds)} seeds from {seeds[0]}, {len(pooled_rows) // len(STRATEGIES)} markets"
    plot.draw(pooled_rows, args.out / "scarcity.png", label)

    print(f"\nPooled over {len(seeds)} seeds ({', '.join(map(str, seeds))}), generated markets: median (IQR, range)\n")
    print(as_text(*pooled.headline_table(pooled_rows)))
    print("\nPer count bucket: median [IQR]\n")
    print(as_text(*pooled.bucket_table(pooled_rows)))
    print("\nPer seed\n")
    print(as_text(*pooled.seed_table(per_seed)))
    print(
        f"\nWhat the public signals give away (AUC for 'pool has capacity', 0.5 = none): placement score "
        f"{signals['score']:.2f} as generated, {signals['returned']:.2f} as returned (cap, top 10); "
        f"Spot Advisor tier {signals['advisor']:.2f}; region-level score as returned, for 'the region holds the "
        f"request': {signals['region']:.2f}"
    )
    print("\nTargets (generated set, pooled)\n")
    for verdict in judge(pooled_rows):
        print(f"  {verdict.word:6}  {verdict.target}: {verdict.margin}")
    broken = report.broken_runs(pooled_rows + example_rows)
    if broken:
        print(f"\n{len(broken)} engine run(s) broke: " + ", ".join(f"{r.outcome.strategy}/{r.case.name}" for r in broken))
    print(f"\nwrote {args.out / 'report.md'}, {args.out / 'scarcity.png'}, and per seed {args.out}/seed-N/")
    print(f"took {time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
