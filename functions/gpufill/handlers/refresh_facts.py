"""RefreshFacts: run by EventBridge Scheduler every `facts_refresh_every` minutes, outside the state machine.

It reads what runs used (adapters/warm_facts.load_used) and the warm facts as kept, asks
policy/facts_refresh what is about to go stale, and scores and prepares exactly that again with
ScoreRegion's and PrepareRegion's own look-ups, which keep what they find as warm facts. A run
after an idle spell then ranks from warm facts and enters its first region without ScoreRegions
or PrepareRegion. A region that cannot be refreshed now is left to the next pass (or to the next
run, which scores it as if nothing were kept): the refresh changes nothing a run relies on.
"""

from __future__ import annotations

from aws_lambda_powertools.utilities.typing import LambdaContext
from botocore.exceptions import BotoCoreError, ClientError

from gpufill.adapters import clock, network, warm_facts
from gpufill.constants import (
    FACTS_REFRESH_DEFAULT_MINUTES,
    FACTS_REFRESH_MAX_MINUTES,
    FACTS_REFRESH_MIN_MINUTES,
    METRIC_FACTS_REFRESHED,
)
from gpufill.handlers.observability import count, logger, metrics, tracer, transient_aws_errors
from gpufill.handlers.prepare_region import look_up_launch
from gpufill.handlers.score_region import region_facts
from gpufill.policy import facts_refresh


# Scheduler fills in its own execution id (a context attribute of the schedule's Input): each pass's logs share it.
@logger.inject_lambda_context(correlation_id_path="scheduler_execution")
@tracer.capture_lambda_handler
@metrics.log_metrics
@transient_aws_errors
def handler(event: dict, context: LambdaContext) -> dict:
    now = clock.epoch()
    usage = warm_facts.load_used()
    regions = sorted({r for r, _ in usage.scored})
    types = sorted({t for _, t in usage.scored})
    scored = warm_facts.load_scored(regions, types) if regions else {}
    prepared = {r: p for r in sorted(usage.launched) if (p := warm_facts.load_prepared(r)) is not None}
    every = _every_seconds(event)
    plan = facts_refresh.to_refresh(usage, scored, prepared, now=now, every_seconds=every)
    done = {"scoring": [], "launch": [], "skipped": []}
    for region, (instance_types, zone_ids) in sorted(plan.scoring.items()):
        started = clock.epoch()
        try:
            facts = region_facts(region, list(instance_types), want_zone_ids=zone_ids)
        except (ClientError, BotoCoreError) as error:  # throttled now: the next pass, or the next run, asks again
            done["skipped"].append({"region": region, "kind": "scoring", "reason": f"{type(error).__name__}: {error}"})
            continue
        if facts.error is not None:
            done["skipped"].append({"region": region, "kind": "scoring", "reason": facts.error})
            continue
        warm_facts.save_scored(facts, written_at=started, zone_ids=zone_ids)
        done["scoring"].append({"region": region, "instance_types": list(instance_types)})
    for region, zones in sorted(plan.launch.items()):
        try:
            look_up_launch(region, list(zones))
        except (network.NetworkSetupError, ClientError, BotoCoreError) as error:
            done["skipped"].append({"region": region, "kind": "launch", "reason": f"{type(error).__name__}: {error}"})
            continue
        done["launch"].append({"region": region})
    for kind in ("scoring", "launch"):
        if done[kind]:
            count(METRIC_FACTS_REFRESHED, len(done[kind]), kind=kind)
    logger.info("facts refreshed", extra={k: v for k, v in done.items() if v} or {"nothing": "no run used facts due now"})
    return done


def _every_seconds(event: dict) -> float:
    """The schedule's interval as its Input names it; anything else (an invocation by hand) is
    taken as the default's, clamped to what the deploy setting allows."""
    every = event.get("every_seconds") if isinstance(event, dict) else None
    if isinstance(every, bool) or not isinstance(every, (int, float)):
        return FACTS_REFRESH_DEFAULT_MINUTES * 60.0
    return float(min(max(every, FACTS_REFRESH_MIN_MINUTES * 60), FACTS_REFRESH_MAX_MINUTES * 60))
