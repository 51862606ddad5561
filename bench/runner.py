"""Runs every strategy on every case: the simulators in this process, the engine runs on a worker pool.

Each worker process runs one engine at a time (moto's mock is process-global), and
the results are put back in case order, so the output does not depend on scheduling.
One pool serves every seed: a worker's imports, first engine start and parsed definition
are paid once, and the biggest requests of every seed go first, so no long run is left
alone at the end of a seed while the other worker idles.
"""

from __future__ import annotations

import multiprocessing
import time
from collections.abc import Callable, Hashable

from bench import broker, engine_runs, karpenter, oracle
from bench.cases import Case
from bench.outcome import STRATEGIES, Outcome

SIMULATORS = {"broker": broker.run, "karpenter": karpenter.run, "oracle": oracle.run}


def _engine_job(job: tuple[Hashable, Case, str, str | None, str | None, bool]) -> tuple[Hashable, Outcome, float]:
    key, case, strategy, launch_mode, scoring, judge_iam = job
    started = time.monotonic()
    outcome = engine_runs.run(case, strategy, launch_mode, scoring, judge_iam=judge_iam)
    return key, outcome, time.monotonic() - started


def run_sets(
    case_sets: dict[Hashable, list[Case]],
    *,
    workers: int = 2,
    on_done: Callable[[Hashable, Outcome, float], None] | None = None,
    launch_mode: str | None = None,
    scoring: str | None = None,
    judge_iam: bool = False,
) -> dict[Hashable, dict[tuple[str, str], Outcome]]:
    """Every set of cases (a seed's markets; names are unique within a set only) on one pool.
    `launch_mode`, `scoring`: what gpufill's runs ask for instead of the request defaults;
    `judge_iam`: see engine_runs.run."""
    outcomes: dict[Hashable, dict[tuple[str, str], Outcome]] = {key: {} for key in case_sets}
    for key, cases in case_sets.items():
        for case in cases:
            for strategy, simulate in SIMULATORS.items():
                outcomes[key][(case.name, strategy)] = simulate(case)
    order = {key: n for n, key in enumerate(case_sets)}
    # The biggest requests first, so no long run is left alone at the end.
    jobs = sorted(
        ((key, case, s, launch_mode, scoring, judge_iam)
         for key, cases in case_sets.items() for case in cases for s in engine_runs.ENGINE_STRATEGIES),
        key=lambda job: (-job[1].count, order[job[0]], job[1].name, job[2]),
    )
    if workers <= 1:
        _collect(map(_engine_job, jobs), outcomes, on_done)
    else:
        # spawn, not fork: a forked child would inherit the parent's threads and patched modules.
        with multiprocessing.get_context("spawn").Pool(workers) as pool:
            _collect(pool.imap_unordered(_engine_job, jobs), outcomes, on_done)
    return {
        key: {(case.name, s): outcomes[key][(case.name, s)] for case in cases for s in STRATEGIES}
        for key, cases in case_sets.items()
    }


def run_all(
    cases: list[Case],
    *,
    workers: int = 2,
    on_done: Callable[[Outcome, float], None] | None = None,
    launch_mode: str | None = None,
    scoring: str | None = None,
    judge_iam: bool = False,
) -> dict[tuple[str, str], Outcome]:
    """One set of cases: run_sets with a single set."""
    done = (lambda _key, outcome, seconds: on_done(outcome, seconds)) if on_done else None
    return run_sets({None: cases}, workers=workers, on_done=done, launch_mode=launch_mode, scoring=scoring,
                    judge_iam=judge_iam)[None]


def _collect(results, outcomes: dict, on_done) -> None:
    for key, outcome, seconds in results:
        outcomes[key][(outcome.case, outcome.strategy)] = outcome
        if on_done:
            on_done(key, outcome, seconds)
