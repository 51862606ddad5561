"""ScoreRegion: one Map branch. Gathers what one region offers; the ranking compares regions later."""

from __future__ import annotations

from aws_lambda_powertools.utilities.parser import parse
from aws_lambda_powertools.utilities.typing import LambdaContext
from botocore.exceptions import BotoCoreError, ClientError

from gpufill import catalog
from gpufill.adapters import ec2, spot_advisor
from gpufill.handlers.events import ScoreRegionEvent
from gpufill.handlers.observability import logger, metrics, tracer
from gpufill.models.run import RegionFacts, TypeFacts, ZoneOffer


@logger.inject_lambda_context(correlation_id_path="request_id")
@tracer.capture_lambda_handler
@metrics.log_metrics
def handler(event: dict, context: LambdaContext) -> dict:
    step = parse(event=event, model=ScoreRegionEvent)
    return region_facts(step.region, step.instance_types, want_zone_ids=step.scoring == "blended").model_dump(
        mode="json", exclude_none=True
    )


def region_facts(region: str, instance_types: list[str], *, want_zone_ids: bool) -> RegionFacts:
    try:
        zones = ec2.zones_offering(region, instance_types)
        prices = ec2.spot_prices(region, instance_types) if any(zones.values()) else {}
        ids = ec2.zone_ids(region) if want_zone_ids and any(zones.values()) else {}
    except (ClientError, BotoCoreError) as error:
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
