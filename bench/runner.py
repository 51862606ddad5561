"""Runs every strategy on every case: the simulators in this process, the engine runs on a worker pool.

Each worker process runs one engine at a time (moto's mock is process-global), and
the results are put back in case order, so the output does not depend on scheduling.
"""

from __future__ import annotations

import multiprocessing
import time
from collections.abc import Callable

from bench import broker, engine_runs, karpenter, oracle
from bench.cases import Case
from bench.outcome import STRATEGIES, Outcome

SIMULATORS = {"broker": broker.run, "karpenter": karpenter.run, "oracle": oracle.run}


def _engine_job(job: tuple[Case, str, str | None, str | None]) -> tuple[Outcome, float]:
    case, strategy, launch_mode, scoring = job
    started = time.monotonic()
    outcome = engine_runs.run(case, strategy, launch_mode, scoring)
    return outcome, time.monotonic() - started


def run_all(
    cases: list[Case],
    *,
    workers: int = 2,
    on_done: Callable[[Outcome, float], None] | None = None,
    launch_mode: str | None = None,
    scoring: str | None = None,
) -> dict[tuple[str, str], Outcome]:
    """`launch_mode`, `scoring`: what gpufill's runs ask for instead of the request defaults."""
    outcomes: dict[tuple[str, str], Outcome] = {}
    for case in cases:
        for strategy, simulate in SIMULATORS.items():
            outcomes[(case.name, strategy)] = simulate(case)
    # The biggest requests first, so no long run is left alone at the end.
    jobs = sorted(
        ((case, s, launch_mode, scoring) for case in cases for s in engine_runs.ENGINE_STRATEGIES),
        key=lambda job: (-job[0].count, job[0].name, job[1]),
    )
    if workers <= 1:
        results = map(_engine_job, jobs)
        _collect(results, outcomes, on_done)
    else:
        # spawn, not fork: a forked child would inherit the parent's threads and patched modules.
        with multiprocessing.get_context("spawn").Pool(workers) as pool:
            _collect(pool.imap_unordered(_engine_job, jobs), outcomes, on_done)
    return {(case.name, s): outcomes[(case.name, s)] for case in cases for s in STRATEGIES}


def _collect(results, outcomes: dict, on_done) -> None:
    for outcome, seconds in results:
        outcomes[(outcome.case, outcome.strategy)] = outcome
        if on_done:
            on_done(outcome, seconds)
