"""`gpufill` and `classic` on a dynamic market: the state machine's wait_for_capacity loop, replayed
with gpufill's own policy code (functions/gpufill/policy) against bench.dynamic.market.Ec2.

The static bench runs these two on the local engine. Over 12 modelled hours a run makes dozens
of tries, which on the engine costs seconds of wall time each; the replay calls the same
decisions in process, as bench.replay does for region orders:

- a run's first try ranks from the deployment's warm facts when a try scored them less than
  WARM_SCORING_TTL_SECONDS ago (no offerings or prices asked, no scoring time), and a fleet goes
  without its image lookup when its region was looked up less than WARM_LAUNCH_TTL_SECONDS ago
  (docs/architecture.md, "Warm facts");
- any other try scores every region (DescribeInstanceTypeOfferings, DescribeSpotPriceHistory and
  DescribeCapacityReservations per region, side by side, as ScoreRegions and RankPools read
  them) when policy.waiting.next_try_route says its facts are due (the first try, then every
  WAIT_FACTS_TTL_SECONDS, and after a hand-over); otherwise it ranks by the facts it holds
  (RankKnownPools: no call; the markets hold no reservation, so policy.reservations.read_again
  reads none). It ranks the pools with policy.ranking: price-capacity regions with
  AWS's region-level placement scores for gpufill's default, which a ranking asks again
  (GetSpotPlacementScores) when no run asked them for the same count less than
  adapters.placement_scores.KEEP_SECONDS ago; classic points for `classic`;
- pools another try found empty in the capacity cache's window (DEFAULT_CAPACITY_CACHE_SECONDS)
  go last, through policy.ranking.defer_recently_full; a try that reuses its facts leaves out
  those found empty less than WAIT_SKIP_FULL_SECONDS ago (policy.ranking.leave_out_recently_full);
- gpufill launches one CreateFleet per policy.fill.fleet_key (a region's fresh pools, then its
  deferred ones apart) for everything still missing; a run makes its launch template version in a
  region before its first fleet there (CreateLaunchTemplateVersion; in a deployment's first
  region the call is refused once, the template made, and the call sent again), every later
  fleet of the run there launches from it, and the run's end deletes its versions
  (DeleteLaunchTemplateVersions per region, counted, not timed: policy.template_versions), and,
  the first time a run enters a
  region since it last read its facts, its image looked up (DescribeImages: run.prepared keeps
  each region's launch parameters for the later tries);
  the first fleet of a deployment in a region also finds its network and launch template
  (DescribeVpcs, DescribeSecurityGroups, CreateSecurityGroup, CreateLaunchTemplate) and the
  first in a zone its subnet (DescribeSubnets): the adapters keep these per region and zone;
  `classic` probes pool by pool with RunInstances of exactly the batch (at most 4), halving
  the batch on a capacity error, as the static bench's classic request does;
- a run that completes reads its instances while they boot and load the model (DescribeInstances,
  boot_watch: per region it holds instances in, until EC2 describes them running, then 5 while
  the model loads);
- a try that ends short waits policy.waiting.next_try's delay (60 s doubling to the cap, 2 min
  by default, with the request's jitter) until the deadline; a run keeps what it launched and
  counts it. With `all_or_nothing` (as RollBackGang does) a try that ends short terminates what it
  launched (TerminateInstances per region, billed until then; the capacity is free in its pool
  again) and the run waits holding nothing;
- the request has `maintain: true`: every instance EC2 reclaims starts a refill run of one
  instance with the same wait (policy.refill.refill_input carries wait_for_capacity), from the
  interruption notice (StartRefill marks the reclaimed pool full in the capacity cache), also after the fleet is complete, through its billed hour of work; the capacity cache is shared by every run, as its table is.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from types import SimpleNamespace

from gpufill.constants import (
    DEFAULT_CAPACITY_CACHE_SECONDS,
    DEFAULT_TRIES_PER_EXECUTION,
    WAIT_FACTS_TTL_SECONDS,
    WAIT_FIRST_DELAY_SECONDS,
    WAIT_MAX_DELAY_SECONDS,
    WAIT_SKIP_FULL_SECONDS,
    WARM_LAUNCH_TTL_SECONDS,
    WARM_SCORING_TTL_SECONDS,
)
from gpufill.adapters import placement_scores
from gpufill.policy import fill, ranking, waiting
from gpufill.policy import reservations as reservation_policy

from bench import leak, replay
from bench.costs import scoring_seconds
from bench.dynamic.generate import HORIZON_SECONDS, DynamicCase
from bench.dynamic.market import SPOT_NOTICE_SECONDS, Ec2
from bench.dynamic.measure import WORK_SECONDS, time_to_n

REQUEST_ID = "bench-dynamic"
SCORING_PER_REGION = ("DescribeInstanceTypeOfferings", "DescribeSpotPriceHistory", "DescribeCapacityReservations")
# A run's launch template version in a region, made before its first fleet there; deleted at its end.
VERSION = ("CreateLaunchTemplateVersion",)
RETIRE = "DeleteLaunchTemplateVersions"
# PrepareRegion's image lookup (the root volume's size), once per region until the run reads its facts again.
PREPARE = ("DescribeImages",)
# A deployment's first launch in a region or a zone: the adapters cache what these find (adapters.network).
REGION_SETUP = ("DescribeVpcs", "DescribeSecurityGroups", "CreateSecurityGroup", "CreateLaunchTemplate")
ZONE_SETUP = ("DescribeSubnets",)
CLASSIC_BATCH = 4
# DescribeInstances a complete run's CheckServing makes in each region it holds instances in: once a
# minute until the model servers answer (240 s after the launch on the local engine), after
# WaitUntilRunning's reads (bench.dynamic.market.Ec2.wait_until_running).
CHECK_SERVING_CALLS_PER_REGION = 5
# The request's reservations setting as the replay's runs have it (the default); the markets hold none.
OPEN_RESERVATIONS = SimpleNamespace(capacity_reservations="open", market="spot")


@dataclass(frozen=True)
class Asked:
    """What the request asks of the wait: its backoff (wait_for_capacity.first_delay / max_delay)
    and all_or_nothing."""

    first_delay: int = WAIT_FIRST_DELAY_SECONDS
    max_delay: int = WAIT_MAX_DELAY_SECONDS
    all_or_nothing: bool = False
    # The deployment's constants, here so the bench can measure others: how long a try reuses its
    # facts (0: every try scores every region) and how recently found full a pool it leaves out.
    facts_ttl: int = WAIT_FACTS_TTL_SECONDS
    skip_full: int = WAIT_SKIP_FULL_SECONDS


def run(case: DynamicCase, strategy: str = "gpufill", request_id: str = REQUEST_ID, asked: Asked = Asked()) -> Ec2:
    """The request's run, and a refill run (count 1, the same wait) for every instance EC2 reclaims
    (`maintain: true`). Runs take turns by their next try's modelled second; a try is not interleaved."""
    ec2 = Ec2(case)
    cache: dict[str, float] = {}  # the capacity cache's table: pool key -> when a run found it empty
    runs: list[tuple[float, int, object]] = [(0.0, 0, _wait_loop(ec2, cache, case, strategy, case.count, request_id, asked=asked))]
    refills = 0
    while True:
        if runs:
            runs.sort(key=lambda r: r[:2])
            at, n, loop = runs.pop(0)
            ec2.wait_until(at)
            delay = next(loop, None)
            if delay is not None:
                runs.append((ec2.now + delay, n, loop))
        else:
            # No run is waiting: the fleet works and maintenance watches it through the billed hour
            # of work (bench.dynamic.measure), so a reclaim then starts a refill as on EC2, at its
            # notice (EventBridge delivers it to StartRefill within seconds).
            reached = time_to_n(ec2.instances, case.count)
            end = HORIZON_SECONDS if reached is None else min(HORIZON_SECONDS, reached + WORK_SECONDS)
            if ec2.now >= end:
                return ec2
            ec2.wait_until(min(end, ec2.next_reclaim_at()))
        for reclaimed in ec2.reclaims[refills:]:
            refills += 1
            notice = reclaimed.ended_at - SPOT_NOTICE_SECONDS
            if notice < HORIZON_SECONDS:
                # StartRefill marks the reclaimed pool full in the capacity cache, so it goes last.
                cache[f"spot/{reclaimed.region}/{reclaimed.zone}/{reclaimed.instance_type}"] = math.floor(notice)
                started = max(notice, ec2.now) if not runs else notice
                refill = _wait_loop(ec2, cache, case, strategy, 1, f"{request_id}-refill-{refills}", started, asked=asked)
                runs.append((started, refills, refill))


def _wait_loop(
    ec2: Ec2, cache: dict[str, float], case: DynamicCase, strategy: str, count: int, request_id: str, started: float = 0.0,
    asked: Asked = Asked(),
):
    """One execution chain of wait_for_capacity: yields the wait before each next try."""
    start = case.start
    facts, request = replay._facts(start), replay._request(start)
    regions = start.regions()
    region_scores = leak.returned_region_scores(start) if strategy == "gpufill" else {}
    launched, attempts = 0, 0
    wait = waiting.begin(
        int(min(HORIZON_SECONDS - started, HORIZON_SECONDS)), started, first_delay=asked.first_delay, max_delay=asked.max_delay
    )
    route = "prepare"  # the first try scores every region
    held: list[int] = []  # this run's instances (indexes in ec2.instances)
    versions: set[str] = set()  # the regions this run made its launch template version in
    first = True
    while True:
        known = route == "rank" and asked.facts_ttl > 0
        scored = False
        if (first or route == "handover") and _fresh(ec2, "scoring", WARM_SCORING_TTL_SECONDS):
            # An execution's first try (a run's, or a continued one's after a hand-over) ranks from the
            # deployment's warm facts while they are fresh (RankFromWarmFacts); RankPools still reads
            # the reservations.
            scoring: tuple[str, ...] = ("DescribeCapacityReservations",)
        elif known:
            # A try that reuses its facts (RankKnownPools) scores nothing; the market has no reservations,
            # so it reads none either (policy.reservations.read_again with none found before).
            scoring = tuple(
                api for api in SCORING_PER_REGION if api == "DescribeCapacityReservations"
                and reservation_policy.read_again(OPEN_RESERVATIONS, "spot", 0)
            )
        else:
            ec2.warm["scoring"] = ec2.now
            scoring, scored = SCORING_PER_REGION, True
        first = False
        for api in scoring:
            ec2.calls[api] += len(regions)
        if scored:
            ec2.wait(scoring_seconds())
        scores = ranking.score_all(facts, request)
        if strategy == "gpufill":
            # Every ranking reads the region scores AWS gave for this count: the answer any run got
            # less than KEEP_SECONDS ago (the container's, or the capacity table's), else a new one.
            configuration = f"placement#{count}"
            if not _fresh(ec2, configuration, placement_scores.KEEP_SECONDS):
                ec2.warm[configuration] = ec2.now
                ec2.call("GetSpotPlacementScores")
            pools = ranking.price_capacity_pools(facts, ranking.with_region_scores(scores, region_scores), request)
        else:
            pools = ranking.spot_pools(facts, scores, request)
        full = {k: at for k, at in cache.items() if ec2.now - at < DEFAULT_CAPACITY_CACHE_SECONDS}
        pools = ranking.defer_recently_full(pools, full, ec2.now)
        if known:
            pools = ranking.leave_out_recently_full(pools, full, ec2.now, asked.skip_full)
        if not known:
            prepared = set()  # a try that reads the facts fixes each region's launch parameters again
        before = len(ec2.instances)
        if strategy == "gpufill":
            got, logged = _fleets(ec2, cache, pools, count - launched, prepared, versions)
        else:
            got, logged = _probe(ec2, cache, pools, count - launched)
        launched, attempts = launched + got, attempts + logged
        held += range(before, len(ec2.instances))
        if launched >= count:
            # WaitUntilRunning and CheckServing read the run's instances in each region they are in
            # (counted, not timed: the watch runs over the boot's minutes, after time to N).
            boot_watch(ec2, held)
            ec2.calls[RETIRE] += len(versions)  # ReportResult deletes the run's versions
            return
        if asked.all_or_nothing and got:
            ec2.terminate(ec2.instances[before:])  # RollBackGang: hand the short try back
            launched, held = 0, []
        verdict, wait = waiting.next_try(
            wait, now=ec2.now, spread=waiting.jitter(request_id, wait.tries),
            tries_per_execution=DEFAULT_TRIES_PER_EXECUTION, regions=len(regions), attempts_total=attempts,
        )
        if verdict == "expired":
            ec2.calls[RETIRE] += len(versions)  # so does PlanNextTry when the wait expires
            return
        yield wait.delay_seconds
        wait = waiting.begin_try(wait, handover=verdict == "handover", attempts_total=attempts)
        route, wait = waiting.next_try_route(wait, now=ec2.now, handover=verdict == "handover", ttl=asked.facts_ttl)


def boot_watch(ec2: Ec2, held: list[int]) -> None:
    """DescribeInstances of a complete run's startup watch over its instances `held`: WaitUntilRunning
    until EC2 describes them running (Ec2.wait_until_running), then CHECK_SERVING_CALLS_PER_REGION."""
    ec2.wait_until_running(held)
    ec2.calls["DescribeInstances"] += CHECK_SERVING_CALLS_PER_REGION * len({ec2.instances[n].region for n in held})


def _fleets(
    ec2: Ec2, cache: dict[str, float], pools, missing: int, prepared: set[str], versions: set[str]
) -> tuple[int, int]:
    """(instances launched, attempts logged) of a try's fleets."""
    got, calls = 0, 0
    groups: dict[str, list] = {}
    for pool in pools:
        groups.setdefault(fill.fleet_key(pool), []).append(pool)
    for group in groups.values():
        if got >= missing:
            break
        region = group[0].region
        # The image is looked up once per region while the run holds its facts, and not at all while
        # the deployment's launch settings for the region are warm.
        lookup = region not in prepared and not _fresh(ec2, region, WARM_LAUNCH_TTL_SECONDS)
        if lookup:
            ec2.warm[region] = ec2.now
        setup = _setup(ec2, region, [p.availability_zone for p in group])
        # The version call a new deployment's region refuses (no template yet) before the template is made.
        refused = VERSION if "CreateLaunchTemplate" in setup else ()
        made = VERSION if region not in versions else ()
        for api in refused + setup + (PREPARE * lookup) + made:
            ec2.call(api)
        prepared.add(region)
        versions.add(region)
        answer = ec2.create_fleet(group[0].region, [(p.availability_zone, p.instance_type) for p in group], missing - got)
        # The run logs an attempt per pool EC2 answered for (policy.fleet_moves.after_fleet), and a
        # try's attempts decide when the execution hands over (policy.waiting.next_try's history bound).
        calls += len(answer.instances.keys() | answer.errors.keys())
        got += answer.count
        for (zone, itype), error in answer.errors.items():
            if error == "capacity":
                # The table keeps whole seconds (adapters.capacity_cache.remember_full's seen_at).
                cache[f"spot/{group[0].region}/{zone}/{itype}"] = math.floor(ec2.now)
    return got, calls


def _fresh(ec2: Ec2, fact: str, ttl: int) -> bool:
    return fact in ec2.warm and ec2.now - ec2.warm[fact] < ttl


def _setup(ec2: Ec2, region: str, zones: list[str]) -> tuple[str, ...]:
    """The one-off calls of a deployment's first launch in `region` and in each of `zones`."""
    known = ec2.set_up
    calls: tuple[str, ...] = ()
    for key, apis in [(region, REGION_SETUP), *((zone, ZONE_SETUP) for zone in zones)]:
        if key not in known:
            known.add(key)
            calls += apis
    return calls


def _probe(ec2: Ec2, cache: dict[str, float], pools, missing: int) -> tuple[int, int]:
    """(instances launched, attempts logged: one per RunInstances) of a try's probes."""
    got, calls = 0, 0
    for pool in pools:
        batch = min(CLASSIC_BATCH, missing - got)
        while batch > 0 and got < missing:
            for api in _setup(ec2, pool.region, [pool.availability_zone]):
                ec2.call(api)
            answer = ec2.run_instances(pool.region, pool.instance_type, batch, min_count=batch, zone=pool.availability_zone)
            calls += 1
            if answer.count:
                got += answer.count
                batch = min(CLASSIC_BATCH, missing - got)
            else:
                cache[pool.key] = math.floor(ec2.now)
                batch //= 2
        if got >= missing:
            break
    return got, calls
