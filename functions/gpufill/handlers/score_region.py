"""ScoreRegion: one Map branch. Gathers what one region offers; the ranking compares regions later.

The facts go to the table and the branch returns only whether the region is in: the Map's
output stays small however many regions, types and AZs a request names. They are also kept as
warm facts (adapters/warm_facts.py), so the deployment's next run within their TTL skips this Map.
"""

from __future__ import annotations

from aws_lambda_powertools.utilities.parser import parse
from aws_lambda_powertools.utilities.typing import LambdaContext
from botocore.exceptions import BotoCoreError, ClientError, ConnectTimeoutError, EndpointConnectionError

from gpufill import catalog
from gpufill.adapters import clock, ec2, run_store, spot_advisor, warm_facts
from gpufill.adapters.aws import is_transient
from gpufill.handlers.events import ScoreRegionEvent
from gpufill.handlers.observability import logger, metrics, tracer, transient_aws_errors
from gpufill.models.run import RegionFacts, TypeFacts, ZoneOffer


@logger.inject_lambda_context(correlation_id_path="request_id")
@tracer.capture_lambda_handler
@metrics.log_metrics
@transient_aws_errors
def handler(event: dict, context: LambdaContext) -> dict:
    step = parse(event=event, model=ScoreRegionEvent)
    scored_at = clock.epoch()
    blended = step.scoring == "blended"
    facts = region_facts(step.region, step.instance_types, want_zone_ids=blended)
    if facts.error is None:
        run_store.save_facts(step.request_id, facts)
        # Kept for the deployment's next runs, stamped with when the asking began (the older end).
        warm_facts.save_scored(facts, written_at=scored_at, zone_ids=blended)
    return RegionFacts(region=facts.region, error=facts.error).model_dump(mode="json", exclude_none=True)


def region_facts(region: str, instance_types: list[str], *, want_zone_ids: bool) -> RegionFacts:
    try:
        zones = ec2.zones_offering(region, instance_types)
        prices = ec2.spot_prices(region, instance_types) if any(zones.values()) else {}
        ids = ec2.zone_ids(region) if want_zone_ids and any(zones.values()) else {}
    except (ClientError, BotoCoreError) as error:
        if is_transient(error) and not isinstance(error, (EndpointConnectionError, ConnectTimeoutError)):
            raise  # throttled or briefly broken: the state retries; an unreachable region is dropped below
        # An opted-out region or a denied call drops the region, with the reason kept for the ranking.
        logger.warning("region dropped", extra={"region": region, "error": str(error)})
        return RegionFacts(region=region, error=f"{type(error).__name__}: {error}")
    return RegionFacts(
        region=region,
        types=[
            TypeFacts(
                instance_type=t,
                zones=[
                    ZoneOffer(availability_zone=az, zone_id=ids.get(az), spot_price=prices.get((t, az)))
                    for az in zones.get(t, [])
                ],
                advisor_tier=spot_advisor.tier(region, t),
                on_demand_price=catalog.on_demand_price(t, region),
            )
            for t in instance_types
        ],
    )
