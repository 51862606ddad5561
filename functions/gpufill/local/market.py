"""A simulated EC2 market on top of moto: capacity, quotas, spot prices and ClientToken idempotency.

moto launches whatever it is asked for; these patches make it answer as a scarce
market does, from a MarketScenario, at moto's response layer so callers see real
EC2 error codes through boto3.
"""

from __future__ import annotations

import threading
from contextlib import ExitStack
from datetime import UTC, datetime
from unittest import mock

from moto.core.responses import ActionResult
from moto.ec2.exceptions import EC2ClientError
from moto.ec2.models.instance_types import InstanceTypeOfferingBackend
from moto.ec2.responses import EC2Response
from moto.ec2.responses.instances import InstanceResponse
from moto.ec2.responses.spot_instances import SpotInstances

from gpufill import catalog
from gpufill.local.scenario import MarketScenario

DEFAULT_VCPUS = 4


class SimulatedMarket:
    def __init__(self, scenario: MarketScenario):
        self.scenario = scenario
        self._stock = {
            (region, zone, itype, market): getattr(stock, "spot" if market == "spot" else "on_demand")
            for region, rm in scenario.regions.items()
            for zone, types in rm.zones.items()
            for itype, stock in types.items()
            for market in ("spot", "on-demand")
        }
        self._reclaims = {
            (region, zone, itype): stock.reclaimed_at_launch
            for region, rm in scenario.regions.items()
            for zone, types in rm.zones.items()
            for itype, stock in types.items()
        }
        self._tokens: dict[str, tuple[tuple, ActionResult]] = {}
        self._launched: list[tuple[str, str, int, object]] = []  # (region, market, vcpus, moto instance)
        self._lock = threading.Lock()
        self.placement_scores_denied = False  # tests set it to see the classic fallback

    def left(self, region: str, zone: str, instance_type: str, market: str) -> int:
        return self._stock.get((region, zone, instance_type, market), 0)

    # --- what moto's responses call -------------------------------------------------

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

    def placement_scores(self, instance_types: list[str], regions: list[str], zone_id) -> list[dict]:
        """AZ-level scores: the zone's own score, else its region's score for the type, else none."""
        if self.placement_scores_denied:
            raise EC2ClientError(
                "UnauthorizedOperation", "You are not authorized to perform: ec2:GetSpotPlacementScores"
            )
        found = []
        for region in regions:
            market = self.scenario.regions.get(region)
            for zone, types in sorted((market.zones if market else {}).items()):
                scores = [
                    stock.placement_score or market.placement_score.get(t)
                    for t, stock in types.items()
                    if t in instance_types
                ]
                scores = [s for s in scores if s]
                if scores:
                    found.append({"Region": region, "AvailabilityZoneId": zone_id(region, zone), "Score": min(scores)})
        return found

    def launch(self, response: InstanceResponse, launch_in_moto) -> ActionResult:
        region = response.region
        params = {
            key: response._get_param(key)
            for key in ("InstanceType", "MinCount", "MaxCount", "ImageId", "SubnetId", "ClientToken")
        }
        zone = response._get_param("Placement.AvailabilityZone")
        if params["SubnetId"]:
            zone = response.ec2_backend.get_subnet(params["SubnetId"]).availability_zone
        market = "spot" if response._get_param("InstanceMarketOptions.MarketType") == "spot" else "on-demand"
        itype, low, high = params["InstanceType"], int(params["MinCount"]), int(params["MaxCount"])
        fingerprint = (region, zone, itype, market, low, high, params["ImageId"])
        token = params["ClientToken"]
        with self._lock:
            if token and token in self._tokens:
                seen, result = self._tokens[token]
                if seen != fingerprint:
                    raise EC2ClientError(
                        "IdempotentParameterMismatch",
                        f"Arguments on this idempotent request are inconsistent with arguments used in previous request(s) with client token {token}.",
                    )
                return result
            self._check_quota(region, market, itype, high)
            left = self.left(region, zone, itype, market)
            if left < low or left == 0:
                raise EC2ClientError(
                    "InsufficientInstanceCapacity",
                    f"We currently do not have sufficient {itype} capacity in the Availability Zone you requested ({zone}).",
                )
            count = min(high, left)
            self._stock[(region, zone, itype, market)] = left - count
            result = launch_in_moto(count)
            if market == "spot" and self._reclaims.get((region, zone, itype)):
                doomed = [i.id for i in result.result.instances][: self._reclaims[(region, zone, itype)]]
                self._reclaims[(region, zone, itype)] -= len(doomed)
                response.ec2_backend.terminate_instances(doomed)
            vcpus = catalog.vcpus(itype) or DEFAULT_VCPUS
            self._launched.extend((region, market, vcpus, i) for i in result.result.instances)
            if token:
                self._tokens[token] = (fingerprint, result)
            return result

    def _check_quota(self, region: str, market: str, itype: str, count: int) -> None:
        quota = self.scenario.regions.get(region)
        limit = None
        if quota is not None:
            limit = quota.quota.spot_vcpus if market == "spot" else quota.quota.on_demand_vcpus
        if limit is None:
            return
        running = sum(
            vcpus
            for r, m, vcpus, instance in self._launched
            if r == region and m == market and instance.state not in ("terminated", "shutting-down")
        )
        wanted = count * (catalog.vcpus(itype) or DEFAULT_VCPUS)
        if running + wanted > limit:
            code = "MaxSpotInstanceCountExceeded" if market == "spot" else "VcpuLimitExceeded"
            raise EC2ClientError(
                code,
                f"You have requested more vCPU capacity than your current {market} vCPU limit of {limit} allows for {region}.",
            )

    # --- installing the patches ------------------------------------------------------

    def patches(self) -> ExitStack:
        market = self
        original_run = InstanceResponse.run_instances

        def run_instances(response: InstanceResponse) -> ActionResult:
            def launch_in_moto(count: int) -> ActionResult:
                plain_get = response._get_param
                response._get_param = lambda key, if_none=None: (  # moto reads MinCount as "how many"
                    str(count) if key == "MinCount" else plain_get(key, if_none)
                )
                try:
                    return original_run(response)
                finally:
                    del response._get_param

            return market.launch(response, launch_in_moto)

        def describe_spot_price_history(response: SpotInstances) -> ActionResult:
            types = response._get_param("InstanceTypes", [])
            return ActionResult({"SpotPriceHistory": market.price_history(response.region, types)})

        def describe_instance_type_offerings(backend, location_type=None, filters=None):
            location_type = location_type or "region"
            return [
                o
                for o in market.offerings(backend.region_name, location_type)
                if backend.matches_filters(o, filters or {}, location_type)
            ]

        def get_spot_placement_scores(response) -> ActionResult:
            from moto.ec2.models import ec2_backends

            def zone_id(region: str, zone: str) -> str:
                backend = ec2_backends[response.current_account][region]
                return next(z.zone_id for z in backend.describe_availability_zones() if z.name == zone)

            scores = market.placement_scores(
                response._get_param("InstanceTypes", []), response._get_param("RegionNames", []), zone_id
            )
            return ActionResult({"SpotPlacementScores": scores})

        stack = ExitStack()
        stack.enter_context(
            mock.patch.object(EC2Response, "get_spot_placement_scores", get_spot_placement_scores, create=True)
        )
        stack.enter_context(mock.patch.object(InstanceResponse, "run_instances", run_instances))
        stack.enter_context(mock.patch.object(SpotInstances, "describe_spot_price_history", describe_spot_price_history))
        stack.enter_context(
            mock.patch.object(InstanceTypeOfferingBackend, "describe_instance_type_offerings", describe_instance_type_offerings)
        )
        return stack
