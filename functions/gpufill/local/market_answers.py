"""What the simulated EC2 says about its market, without launching anything: the instance type
offerings per region or AZ, the spot price history, and Spot placement scores as AWS's behave.

A part of SimulatedMarket (local/market.py), which holds the state these read: the scenario, the
lock, and the placement-score configurations asked for so far.
"""

from __future__ import annotations

from datetime import UTC, datetime

from moto.ec2.exceptions import EC2ClientError

from gpufill.constants import PLACEMENT_SCORE_REGIONS_PER_CALL

# GetSpotPlacementScores: AWS says scores for one or two instance types "will always be low";
# the local engine caps them at this value when fewer than 3 types are asked for.
FEW_TYPES_SCORE_CAP = 3
FEW_TYPES = 3
# GetSpotPlacementScores answers the top 10 Regions or Availability Zones.
PLACEMENT_TOP = 10
# Distinct placement-score configurations an account may ask for in 24 hours. AWS does not
# publish the number; this one is finite so that a run asking too many meets the error.
PLACEMENT_CONFIGURATIONS_PER_DAY = 50


class MarketAnswers:
    """DescribeInstanceTypeOfferings, DescribeSpotPriceHistory and GetSpotPlacementScores."""

    def offerings(self, region: str, location_type: str) -> list[dict]:
        zones = self.scenario.regions.get(region)
        if zones is None:
            return []
        if location_type == "region":
            types = sorted({t for z in zones.zones.values() for t in z})
            return [{"InstanceType": t, "Location": region, "LocationType": "region"} for t in types]
        return [
            {"InstanceType": t, "Location": zone, "LocationType": "availability-zone"}
            for zone, types in sorted(zones.zones.items())
            for t in sorted(types)
        ]

    def price_history(self, region: str, instance_types: list[str]) -> list[dict]:
        market = self.scenario.regions.get(region)
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.000Z")
        return [
            {
                "InstanceType": t,
                "ProductDescription": "Linux/UNIX",
                "SpotPrice": f"{stock.spot_price:.6f}",
                "AvailabilityZone": zone,
                "Timestamp": now,
            }
            for zone, types in sorted((market.zones if market else {}).items())
            for t, stock in sorted(types.items())
            if stock.spot_price is not None and (not instance_types or t in instance_types)
        ]

    def placement_scores(
        self, instance_types: list[str], regions: list[str], zone_id, configuration: tuple, *, single_zone: bool = True
    ) -> list[dict]:
        """Scores as AWS's behave: the scenario's explicit score, never derived from capacity, capped
        low when fewer than 3 types are asked for, the top 10 only, and a limit on distinct
        configurations per 24 hours. AZ level (SingleAvailabilityZone): the zone's own score, else
        its region's for the type. Region level: the region's score for the type; a region the
        scenario scores only per AZ takes its best AZ's, since a fleet free to use every AZ is at
        least as likely to succeed as in its best one."""
        if self.placement_scores_denied:
            raise EC2ClientError(
                "UnauthorizedOperation", "You are not authorized to perform: ec2:GetSpotPlacementScores"
            )
        if len(regions) > PLACEMENT_SCORE_REGIONS_PER_CALL:
            # EC2 checks the request's shape before anything else; botocore does not check the maximum.
            raise EC2ClientError(
                "InvalidParameterValue",
                f"The request contains {len(regions)} RegionNames; at most {PLACEMENT_SCORE_REGIONS_PER_CALL} are allowed.",
            )
        with self._lock:
            if configuration not in self._placement_configurations:
                if len(self._placement_configurations) >= self.placement_configurations_per_day:
                    raise EC2ClientError(
                        "MaxConfigLimitExceeded",
                        "You have exceeded your maximum allowed Spot placement configurations. You can retry "
                        "configurations that you used within the last 24 hours, or wait for 24 hours before "
                        "specifying a new configuration.",
                    )
                self._placement_configurations.add(configuration)
        cap = FEW_TYPES_SCORE_CAP if len(set(instance_types)) < FEW_TYPES else 10
        found = []
        for region in regions:
            market = self.scenario.regions.get(region)
            zones = self._zone_scores(market, instance_types)
            if single_zone:
                found.extend(
                    {"Region": region, "AvailabilityZoneId": zone_id(region, zone), "Score": min(score, cap)}
                    for zone, score in zones
                )
                continue
            # A fleet over every AZ may take any of the types: the region is as likely as its best type.
            scores = [market.placement_score[t] for t in instance_types if market and market.placement_score.get(t)]
            score = max(scores) if scores else max((s for _, s in zones), default=None)
            if score:
                found.append({"Region": region, "Score": min(score, cap)})
        found.sort(key=lambda s: -s["Score"])  # stable: ties keep the request's region order
        return found[:PLACEMENT_TOP]

    @staticmethod
    def _zone_scores(market, instance_types: list[str]) -> list[tuple[str, int]]:
        """(zone, score) where any asked type has a score: the lowest of the asked types' scores."""
        found = []
        for zone, types in sorted((market.zones if market else {}).items()):
            scores = [
                stock.placement_score or market.placement_score.get(t) for t, stock in types.items() if t in instance_types
            ]
            scores = [s for s in scores if s]
            if scores:
                found.append((zone, min(scores)))
        return found
