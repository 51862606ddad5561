"""`python -m bench.dynamic.engine_check`: the gpufill replay (bench.dynamic.gpufill) against the
real state machine on the local engine, on whole dynamic markets: restocks (scenario `restock`),
drains that reclaim (scenario `drain`), the Spot Advisor rate's reclaims (scenario-free: scheduled
on the engine as each instance launches, from the same seeded draw as bench.dynamic.market), and
the refill run `maintain: true` starts for each reclaim.

The engine runs the request (`wait_for_capacity: PT12H`, `maintain: true`) to its end, then lets
modelled time pass to the end of the replay's window (the fleet's hour of work after time to N, or
the 12 hours), change by change, following every refill run StartRefill starts to its end. Per
market it prints what both did: the pools of every instance, instances, time to N, fleets, EC2
calls by action (the launch template version calls apart), dollars as bench.dynamic.measure bills
them; `--out FILE` writes the same as JSON.

Where they cannot agree, by construction:
- the engine's clock moves with Wait states only, the replay's also with each call's modelled
  latency (seconds a try), so the engine makes its tries a little earlier in modelled time;
- the engine's clock is one for every execution, and each Wait state adds its seconds to it: a
  refill run that waits while the request's run waits makes modelled time pass twice as fast
  (the "overlap" column names the markets where a refill ran beside the request's run);
- the refill run's name holds the reclaimed instance's id (random on the engine), and its
  jitter is seeded by the name: both sides here draw the jitter from the try number alone.

A run of 12 modelled hours takes minutes of wall time: a check to run by hand (`make
bench-agreement`), not part of `make bench`.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import time
import warnings
from collections import Counter
from dataclasses import dataclass, field
from types import SimpleNamespace
from unittest import mock

from gpufill import constants
from gpufill.adapters import clock
from gpufill.local import interruptions
from gpufill.local.engine import LocalEngine
from gpufill.local.scenario import MarketScenario
from gpufill.policy import waiting

from bench.costs import complete_engine_model
from bench.dynamic import generate, gpufill, market
from bench.dynamic.generate import HORIZON_SECONDS, DynamicCase
from bench.dynamic.market import SPOT_NOTICE_SECONDS, Instance, lifetime
from bench.dynamic.measure import WORK_SECONDS, Outcome, outcome, time_to_n

# Seed 20261204's markets that fill within minutes of wall time, every tier and count up to 64,
# with drains (all), reclaims and refills (d01, d11), and tens of tries (d04, d09).
QUICK = (0, 1, 2, 4, 5, 6, 7, 9, 10, 11)
# Wall seconds the engine may spend on one execution of a chain. engine.run stops a run still
# going after its timeout (600 s by default) and reports it FAILED with LocalTimeout: that, not
# the chain's hand-over (engine.run follows `continued_as` to the last execution), is why the
# scarce markets' runs of 12 modelled hours once printed no instance.
RUN_TIMEOUT_SECONDS = 3 * 3600
# The two calls another count is being changed for (one version per request and region): shown apart.
TEMPLATE_VERSIONS = ("CreateLaunchTemplateVersion", "DeleteLaunchTemplateVersions")


def pinned_jitter(request_id: str, tries: int) -> float:
    """The jitter of a try, the same for every run (the module docstring says why)."""
    return _jitter("engine-check", tries)


_jitter = waiting.jitter


@dataclass
class Side:
    outcome: Outcome
    instances: list[Instance]
    ended: str = ""
    overlap: bool = False
    wall: float = 0.0
    refills: list[str] = field(default_factory=list)

    def pools(self) -> Counter:
        return Counter((i.zone, i.instance_type) for i in self.instances)


def scenario_of(case: DynamicCase) -> dict:
    """The market as the engine's scenario: hour 0, then every change as a restock or a drain."""
    def event(c):
        return {"at_seconds": c.at, "zone": c.zone, "type": c.instance_type, "spot": abs(c.delta)}

    return {
        **case.start.scenario,
        "restock": [event(c) for c in case.changes if c.delta > 0],
        "drain": [event(c) for c in case.changes if c.delta < 0],
    }


def replay(case: DynamicCase, engine_clock: bool = True) -> Side:
    """The replay's run; on the engine's clock (`engine_clock`) its calls take no modelled time,
    as on the engine, where only Wait states move the clock."""
    with contextlib.ExitStack() as stack:
        stack.enter_context(mock.patch.object(waiting, "jitter", pinned_jitter))
        if engine_clock:
            stack.enter_context(mock.patch.object(market, "api_seconds", lambda api: 0.0))
            stack.enter_context(mock.patch.object(gpufill, "scoring_seconds", lambda: 0.0))
        ec2 = gpufill.run(case, request_id=f"check-{case.name}")
    return Side(outcome(case, "gpufill", ec2), list(ec2.instances))


def on_engine(case: DynamicCase, timeout: float = RUN_TIMEOUT_SECONDS) -> Side:
    warnings.filterwarnings("ignore", message="No application metrics to publish")
    complete_engine_model()
    started = time.monotonic()
    request = {**case.start.request, "wait_for_capacity": {"deadline": "PT12H"}, "maintain": True}
    mine: dict[str, Instance] = {}  # moto instance id -> the instance as bench.dynamic.measure bills it
    per_pool: Counter = Counter()
    due: list[float] = []  # when the advisor rate reclaims an instance
    tiers = {(r, t): tier for r, m in case.start.scenario["regions"].items() for t, tier in m.get("advisor_tier", {}).items()}
    # The handlers' clock is the wall clock plus the modelled waits; the interpreter's own wall
    # seconds (one to three a try) would age every capacity-cache entry past what the modelled
    # tries say, and flip which pools a try leaves out (WAIT_SKIP_FULL_SECONDS). Held still here, so
    # the handlers read modelled time alone, from a whole second as the cache's seen_at keeps it.
    base = float(int(time.time()))
    still = SimpleNamespace(time=lambda: base)
    with contextlib.redirect_stdout(io.StringIO()), mock.patch.object(waiting, "jitter", pinned_jitter), \
            mock.patch.object(clock, "time", still), LocalEngine(MarketScenario.model_validate(scenario_of(case))) as engine:
        admit = engine.market.admit

        def counted(backend, region, zone, itype, market, instances, **options):
            admit(backend, region, zone, itype, market, instances, **options)
            first = len(engine.market._launched) - len(instances) + 1  # the account's launch number of the first
            for k, instance in enumerate(instances):
                tier = tiers.get((region, itype), 4)
                mine[instance.id] = Instance(region, zone, itype, engine.market.price(region, zone, itype, market),
                                             engine.elapsed, tier=tier)
                # The advisor rate's reclaim of the pool's n-th instance, drawn as the replay's market draws it.
                at = engine.elapsed + lifetime(case.name, zone, itype, per_pool[(zone, itype)], tier)
                per_pool[(zone, itype)] += 1
                if at < HORIZON_SECONDS + WORK_SECONDS:
                    due.append(at)
                    engine.at_later(at, lambda at=at, n=first + k: interruptions.reclaim(
                        engine, interruptions.Reclaim(at_seconds=at, instance=n)))

        engine.market.admit = counted
        execution = engine.run(request, name=f"check-{case.name}", timeout=timeout)
        ended = execution.status if execution.error is None else f"{execution.status} {execution.error}"
        ended += f" after {len(execution.continued_from) + 1} execution(s)"
        # A refill StartRefill started while the request's run still ran shared the clock with it.
        overlap = any(constants.REFILL_NAME_INFIX in n for n in engine.executions())
        followed: list[str] = []
        # The fleet's hour of work (or the rest of the 12 hours), change by change: each reclaim's
        # refill run is followed to its end before the clock moves on.
        _ended(engine, mine)
        reached = time_to_n(list(mine.values()), case.count)
        end = HORIZON_SECONDS if reached is None else min(HORIZON_SECONDS, reached + WORK_SECONDS)
        while True:
            engine.settle()
            refills = [n for n in engine.executions() if constants.REFILL_NAME_INFIX in n and n not in followed]
            for name in refills:
                engine.follow(name, timeout=timeout)
                followed.append(name)
                engine.settle()
            if refills:
                continue
            moments = sorted(m for m in {c.at for c in case.changes} | set(due) | {end} if m > engine.elapsed)
            if not moments or engine.elapsed >= end:
                break
            engine.advance(min(moments[0], end) - engine.elapsed)
        _ended(engine, mine)
        calls = Counter(c.split(":", 1)[1] for c in engine.calls.calls if c.startswith("ec2:"))
    instances = sorted(mine.values(), key=lambda i: i.launched_at)
    shim = SimpleNamespace(instances=instances, calls=calls, launch_calls=calls["RunInstances"] + calls["CreateFleet"],
                           wait_until=lambda at: None)
    return Side(outcome(case, "gpufill", shim), instances, ended, overlap, time.monotonic() - started, followed)


def _ended(engine: LocalEngine, mine: dict[str, Instance]) -> None:
    """Each spot instance EC2 reclaimed ends two minutes after its warning, as the replay's market ends it."""
    for reclaim in engine.reclaims:
        gone = mine.get(reclaim.instance_id or "")
        if gone is not None and gone.ended_at is None and reclaim.market == "spot":
            gone.ended_at, gone.interrupted = reclaim.at_seconds + SPOT_NOTICE_SECONDS, True


def compared(case: DynamicCase, mine: Side, theirs: Side, timed: Side | None = None, seed: int | None = None) -> dict:
    """`mine` the replay on the engine's clock, `theirs` the engine, `timed` the replay as the
    benchmark runs it (its calls' modelled latencies in its clock)."""
    a, b = mine.outcome, theirs.outcome
    differ = {api: [a.by_api.get(api, 0), b.by_api.get(api, 0)] for api in sorted(set(a.by_api) | set(b.by_api))
              if api not in TEMPLATE_VERSIONS and a.by_api.get(api, 0) != b.by_api.get(api, 0)}
    return {
        "market": case.name, "seed": seed, "same_pools": mine.pools() == theirs.pools(),
        "pools": [{f"{z} {t}": n for (z, t), n in sorted(s.pools().items())} for s in (mine, theirs)],
        "instances": [a.launched, b.launched], "interrupted": [a.interrupted, b.interrupted],
        "time_to_n": [a.time_to_n, b.time_to_n], "fleets": [a.by_api.get("CreateFleet", 0), b.by_api.get("CreateFleet", 0)],
        "ec2_calls": [a.ec2_calls, b.ec2_calls], "calls_differ": differ,
        "template_versions": {api: [a.by_api.get(api, 0), b.by_api.get(api, 0)] for api in TEMPLATE_VERSIONS},
        "dollars": [a.dollars, b.dollars], "refills": len(theirs.refills), "overlap": theirs.overlap,
        "engine_run": theirs.ended, "engine_wall_seconds": round(theirs.wall),
        "replay_with_latencies": None if timed is None else {
            "time_to_n": timed.outcome.time_to_n, "fleets": timed.outcome.by_api.get("CreateFleet", 0),
            "dollars": timed.outcome.dollars, "same_pools": timed.pools() == theirs.pools()},
    }


def row(found: dict) -> str:
    show = lambda t: "—" if t is None else f"{t:,.0f}"  # noqa: E731
    pair = lambda key, f=str: " / ".join(f(v) for v in found[key])  # noqa: E731
    differ = ", ".join(f"{api} {r}/{e}" for api, (r, e) in found["calls_differ"].items()) or "none"
    versions = ", ".join(f"{r}/{e}" for r, e in found["template_versions"].values())
    timed = found["replay_with_latencies"]
    latencies = "" if timed is None else f" ({show(timed['time_to_n'])}, {timed['fleets']} fleets with latencies)"
    name = found["market"] if found["seed"] in (None, generate.DEFAULT_SEED) else f"{found['market']} (seed {found['seed']})"
    return (f"| {name} | {'yes' if found['same_pools'] else 'no'} | {pair('instances')} ({pair('interrupted')} reclaimed, "
            f"{found['refills']} refill{'s' if found['refills'] != 1 else ''}{', overlap' if found['overlap'] else ''}) | "
            f"{pair('time_to_n', show)}{latencies} | {pair('fleets')} | {pair('ec2_calls')}: {differ} | {versions} | "
            f"{pair('dollars', lambda d: f'{d:.2f}')} | {found['engine_wall_seconds']} |")


HEADER = ("| market | same pools | instances: replay / engine | time to N s | fleets | EC2 calls (actions that differ) "
          "| template versions made, deleted | $ | engine wall s |\n| --- | --- | --- | --- | --- | --- | --- | --- | --- |")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.dynamic.engine_check", description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=generate.DEFAULT_SEED)
    parser.add_argument("--markets", nargs="*", default=[str(i) for i in QUICK],
                        help="market indexes of the seed, or SEED:INDEX for another seed's")
    parser.add_argument("--timeout", type=float, default=RUN_TIMEOUT_SECONDS, help="wall seconds per execution")
    parser.add_argument("--out", help="write every market's comparison here as JSON")
    args = parser.parse_args(argv)
    print(HEADER, flush=True)
    found = []
    for named in args.markets:
        seed, _, index = named.rpartition(":")
        case = generate.generated(int(seed or args.seed))[int(index)]
        found.append(compared(case, replay(case), on_engine(case, args.timeout), replay(case, engine_clock=False),
                              seed=int(seed or args.seed)))
        print(row(found[-1]), flush=True)
        if args.out:
            with open(args.out, "w") as out:
                json.dump({"markets": found}, out, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
