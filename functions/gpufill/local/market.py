"""A simulated EC2 market on top of moto: capacity, quotas, spot prices and ClientToken idempotency.

moto launches whatever it is asked for; these patches make it answer as a scarce
market does, from a MarketScenario, at moto's response layer so callers see real
EC2 error codes through boto3.
"""

from __future__ import annotations

import threading
from contextlib import ExitStack
from collections.abc import Callable
from functools import partial
from unittest import mock

from moto.core.responses import ActionResult
from moto.ec2.exceptions import EC2ClientError
from moto.ec2.models.instance_types import InstanceTypeOfferingBackend
from moto.ec2.responses import EC2Response
from moto.ec2.responses._base_response import EC2BaseResponse
from moto.ec2.responses.instances import InstanceResponse
from moto.ec2.responses.spot_instances import SpotInstances

from gpufill.local import visibility
from gpufill.local.cluster_groups import ClusterGroups
from gpufill.local.fleet_api import FleetApi

from gpufill import catalog, constants
from gpufill.adapters import clock
from gpufill.constants import STARTUP_STEP_FAILED_PREFIX, TAG_STARTUP_STEP
from gpufill.local import filters
from gpufill.local import capacity_blocks
from gpufill.local.limits import MAX_TAGS_PER_RESOURCE, check_launch_values
from gpufill.local.market_answers import PLACEMENT_CONFIGURATIONS_PER_DAY, MarketAnswers
from gpufill.local.reservations import Reservations
from gpufill.local.scenario import STARTUP_TIMELINE, MarketScenario, Startup

DEFAULT_VCPUS = 4
# Parameters a reused ClientToken is not compared on (EC2: the same request in another AZ is the same request).
_NOT_COMPARED = {"Action", "Version", "ClientToken", "Placement.AvailabilityZone"}


def _check_launch_parameters(response: InstanceResponse) -> None:
    """EC2's own refusals of a RunInstances request: tags, user data, a root volume below the AMI's snapshot."""
    query = {k: v[0] if isinstance(v, list) and v else v for k, v in response.querystring.items()}
    specs: dict[str, dict[str, dict[str, str]]] = {}
    for key, value in query.items():
        parts = key.split(".")
        if parts[0] == "TagSpecification" and len(parts) == 5 and parts[2] == "Tag":
            specs.setdefault(parts[1], {}).setdefault(parts[3], {})[parts[4]] = value
    tags = {n: {t.get("Key", ""): t.get("Value", "") for t in spec.values()} for n, spec in specs.items()}
    volumes = [
        (device, query.get(key.replace(".DeviceName", ".Ebs.VolumeSize")))
        for key, device in query.items()
        if key.startswith("BlockDeviceMapping.") and key.endswith(".DeviceName")
    ]
    check_launch_values(
        response.ec2_backend, image_id=query.get("ImageId"), user_data=query.get("UserData"), tags=tags, volumes=volumes
    )


# The earliest startup.sh can report: the instance boots and runs its user data first.
STARTUP_FIRST_REPORT_SECONDS = 20.0


# may(region, instance, service, operation, params): whether the instance role lets the call through.
InstanceMay = Callable[[str, object, str, str, dict], bool]


def _report_step(backend, instance, step: str, may: InstanceMay | None = None) -> None:
    """CreateTags of gpufill:startup-step by the instance itself. EC2 refuses a 51st tag
    (TagLimitExceeded), IAM a tag the instance role does not grant; startup.sh goes on without
    the report, so the tag keeps its last value."""
    if instance.state in ("shutting-down", "terminated", "stopping", "stopped"):
        return
    region = backend.region_name
    params = {"Resources": [instance.id], "Tags": [{"Key": TAG_STARTUP_STEP, "Value": step}]}
    if may is not None and not may(region, instance, "ec2", "CreateTags", params):
        return
    tags = backend.tags.get(instance.id, {})
    # Keys that start with aws: (the fleet and launch template EC2 adds) do not count against the limit.
    counted = [key for key in tags if not key.lower().startswith("aws:")]
    if TAG_STARTUP_STEP not in tags and len(counted) >= MAX_TAGS_PER_RESOURCE:
        return
    # Written past moto's create_tags, which counts the aws: keys that EC2 does not.
    backend.tags[instance.id][TAG_STARTUP_STEP] = step


def _reclaimed_by_ec2(backend, instance_ids: list[str]) -> None:
    """EC2, not a caller, ended them: DescribeInstances shows the spot reason, as on AWS."""
    from moto.ec2.models.instances import StateReason

    for instance_id in instance_ids:
        backend.get_instance(instance_id).state_reason = StateReason(
            "Server.SpotInstanceTermination: Spot instance termination", "Server.SpotInstanceTermination"
        )


class SimulatedMarket(MarketAnswers):
    """The scenario's market as EC2 shows it (MarketAnswers) and as it launches: capacity, quotas,
    ClientToken idempotency, reservations and blocks, and each new instance's startup reports."""

    def __init__(self, scenario: MarketScenario, *, visibility_delay_calls: int = 1, deployment: str = ""):
        self.scenario = scenario
        # The account's On-Demand Capacity Reservations; `deployment` is whom the scenario's are tagged for.
        self.reservations = Reservations(scenario, deployment)
        self.blocks = capacity_blocks.for_market(self)  # Capacity Blocks for ML, in the same store
        # The instance's own calls (startup.sh), judged by its role when the engine sets these:
        # may(region, instance, service, operation, params) and the startup bucket of an instance.
        self.instance_may: InstanceMay | None = None
        self.startup_bucket: Callable[[object], str] | None = None
        self.default_vcpus = DEFAULT_VCPUS
        # EC2 is eventually consistent: a new instance is missing from the next
        # `visibility_delay_calls` DescribeInstances calls in its region (by id:
        # InvalidInstanceID.NotFound; by filter: absent).
        self.visibility_delay_calls = visibility_delay_calls
        self._hidden: dict[tuple[str, str], int] = {}  # (region, instance id) -> describe calls left
        self._token_instances: dict[tuple[str, str], list[str]] = {}  # (region, token) -> instance ids
        self._placement_configurations: set[tuple] = set()
        self.groups = ClusterGroups(scenario)
        self.placement_configurations_per_day = PLACEMENT_CONFIGURATIONS_PER_DAY
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
        self._tokens: dict[tuple[str, str], tuple[tuple, ActionResult]] = {}
        self._launched: list[tuple[str, str, int, object]] = []  # (region, market, vcpus, moto instance)
        self._lock = threading.RLock()  # launch() holds it while it hides the new instances
        self.placement_scores_denied = False  # tests set it to see the classic fallback
        self.faults = None  # the engine's fault rules (local/faults.py): a fleet's per-override errors
        self.groups.on_create = lambda region, name: self.faults and self.faults.created(region, "placement-group", name)
        # The engine's modelled clock: when startup.sh on a new instance reports each step.
        self.schedule = lambda seconds, action: None
        self.elapsed = lambda: 0.0

    def left(self, region: str, zone: str, instance_type: str, market: str) -> int:
        return self._stock.get((region, zone, instance_type, market), 0)

    def restock(self, zone: str, instance_type: str, *, spot: int = 0, on_demand: int = 0) -> None:
        """Capacity freed in a zone (the scenario's `restock`, at its modelled time)."""
        region = zone[:-1]
        with self._lock:
            for market, more in (("spot", spot), ("on-demand", on_demand)):
                key = (region, zone, instance_type, market)
                self._stock[key] = self._stock.get(key, 0) + more

    def drain(self, zone: str, instance_type: str, spot: int, spared: set[str] = frozenset()) -> int | None:
        """Other accounts launch `spot` in the pool (the scenario's `drain`): its free spot capacity
        falls, never below zero. Wanting more than is free, they take one of this account's running
        spot instances there, the newest not in `spared` (already warned): its launch number, or None."""
        region = zone[:-1]
        with self._lock:
            key = (region, zone, instance_type, "spot")
            left = self.left(*key)
            self._stock[key] = max(0, left - spot)
            if spot <= left:
                return None
            for number in range(len(self._launched), 0, -1):
                r, market, _, instance = self._launched[number - 1]
                if (r, market, instance.placement.zone, instance.instance_type) == (region, "spot", zone, instance_type) \
                        and instance.state not in ("shutting-down", "terminated") and instance.id not in spared:
                    return number
        return None

    # --- EC2's view of new instances ---------------------------------------------------

    def hide_new(self, region: str, instance_ids: list[str]) -> None:
        if self.visibility_delay_calls > 0:
            with self._lock:
                for instance_id in instance_ids:
                    self._hidden[(region, instance_id)] = self.visibility_delay_calls

    def hidden_now(self, region: str) -> set[str]:
        """The instances this DescribeInstances call in `region` does not see yet (each call counts down)."""
        with self._lock:
            hidden = {i for (r, i) in self._hidden if r == region}
            for instance_id in hidden:
                left = self._hidden[(region, instance_id)] - 1
                if left <= 0:
                    del self._hidden[(region, instance_id)]
                else:
                    self._hidden[(region, instance_id)] = left
            return hidden

    def launched_instance(self, number: int) -> tuple[str, str, object] | None:
        """(region, market, moto instance) of the `number`-th instance launched (1-based), or None."""
        with self._lock:
            if number > len(self._launched):
                return None
            region, market, _, instance = self._launched[number - 1]
            return region, market, instance

    def launched_with_token(self, region: str, token: str) -> list[str]:
        return list(self._token_instances.get((region, token), []))

    def roomiest_zone(self, region: str, instance_type: str, market: str) -> str | None:
        """The AZ a launch naming no subnet and no AZ lands in. EC2 picks one (a default subnet of
        the default VPC) and does not say how; the model picks the zone offering the type with the
        most instances left in that market, the cheapest then the first by name among equals."""
        offered = self.scenario.regions.get(region)
        zones = [z for z, types in sorted((offered.zones if offered else {}).items()) if instance_type in types]
        if not zones:
            return None
        return min(zones, key=lambda z: (-self.left(region, z, instance_type, market), self.price(region, z, instance_type, market)))

    def price(self, region: str, zone: str, instance_type: str, market: str) -> float:
        """An hour of one instance: the zone's spot price (at most on-demand when it lists none), or the
        catalog's on-demand price; 0.0 when neither is known (every such pool priced alike)."""
        on_demand = catalog.on_demand_price(instance_type, region)
        if market == "spot":
            offered = self.scenario.regions.get(region)
            stock = offered.zones.get(zone, {}).get(instance_type) if offered else None
            if stock is not None and stock.spot_price is not None:
                return stock.spot_price
        return on_demand or 0.0

    def launch(self, response: InstanceResponse, launch_in_moto) -> ActionResult:
        region = response.region
        params = {
            key: response._get_param(key)
            for key in ("InstanceType", "MinCount", "MaxCount", "ImageId", "SubnetId", "ClientToken")
        }
        market = "spot" if response._get_param("InstanceMarketOptions.MarketType") == "spot" else "on-demand"
        itype, low, high = params["InstanceType"], int(params["MinCount"]), int(params["MaxCount"])
        # Every parameter but the AZ: a retry with another image, user data or tags is another request.
        fingerprint = tuple(
            sorted((k, tuple(v) if isinstance(v, list) else v) for k, v in response.querystring.items() if k not in _NOT_COMPARED)
        )
        token = params["ClientToken"]
        with self._lock:
            if token and (region, token) in self._tokens:
                seen, result = self._tokens[(region, token)]
                if seen != fingerprint:
                    raise EC2ClientError(
                        "IdempotentParameterMismatch",
                        f"Arguments on this idempotent request are inconsistent with arguments used in previous request(s) with client token {token}.",
                    )
                return result
            zone = response._get_param("Placement.AvailabilityZone")
            if params["SubnetId"]:
                zone = response.ec2_backend.get_subnet(params["SubnetId"]).availability_zone
            _check_launch_parameters(response)
            group = response._get_param("Placement.GroupName")
            # What a launch names that was created a moment ago may not be visible to it yet.
            visibility.check(self.faults, region, "placement-group", group)
            for group_id in response._get_param("SecurityGroupIds", []) or []:
                visibility.check(self.faults, region, "security-group", group_id)
            self._check_quota(region, market, itype, high)
            target = response._get_param("CapacityReservationSpecification.CapacityReservationTarget.CapacityReservationId")
            self.blocks.check_launch(region, response.current_account, response._get_param("InstanceMarketOptions.MarketType"), target)
            if market == "on-demand" and target:
                return self._launch_reserved(response, launch_in_moto, target, zone, itype, low, high, token, fingerprint)
            zone = zone or self.roomiest_zone(region, itype, market)
            opted_out = response._get_param("CapacityReservationSpecification.CapacityReservationPreference") == "none"
            held = None if market == "spot" or opted_out else self.reservations.open_for(region, zone, itype)
            reserved = held.available() if held is not None else 0
            left = self.left(region, zone, itype, market) + reserved
            room = self.groups.room(region, group, zone, itype) if group else left
            if min(left, room) < low or min(left, room) == 0:
                raise EC2ClientError(
                    "InsufficientInstanceCapacity",
                    f"We currently do not have sufficient {itype} capacity in the Availability Zone you requested ({zone})"
                    + (f" for placement group {group}." if group and room < left else "."),
                )
            count = min(high, left, room)
            result = launch_in_moto(count, zone)
            if group:
                self.groups.joined(region, group, result.result.instances)
            if token:
                self._tokens[(region, token)] = (fingerprint, result)
                self._token_instances[(region, token)] = [i.id for i in result.result.instances]
            if held is not None and reserved:
                # EC2 fills the matching open reservation first, then the zone's ordinary capacity.
                self.reservations.attach(held, result.result.instances[:reserved])
            self.admit(response.ec2_backend, region, zone, itype, market, result.result.instances, reserved=min(reserved, count))
            return result

    def _launch_reserved(self, response, launch_in_moto, target: str, zone, itype: str, low: int, high: int, token, fingerprint):
        """A RunInstances naming a capacity reservation: it runs there or not at all."""
        region = response.region
        held = self.reservations.targeted(region, target, zone, itype)
        zone = held.zone
        room = held.available()
        if room == 0 or room < low:
            raise self.reservations.exceeded(held)
        result = launch_in_moto(min(high, room), zone)
        if token:
            self._tokens[(region, token)] = (fingerprint, result)
            self._token_instances[(region, token)] = [i.id for i in result.result.instances]
        self.reservations.attach(held, result.result.instances)
        self.admit(response.ec2_backend, region, zone, itype, "on-demand", result.result.instances, reserved=len(result.result.instances))
        return result

    def admit(
        self, backend, region: str, zone: str, instance_type: str, market: str, instances: list, *, reserved: int = 0
    ) -> None:
        """New instances of a launch (RunInstances or CreateFleet), as EC2 counts them: out of the
        zone's stock (but for the `reserved` ones, which run in a capacity reservation), against the
        region's quota, reclaimed at launch where the scenario says so, invisible for a while, and
        booting on the modelled clock."""
        with self._lock:
            key = (region, zone, instance_type, market)
            self._stock[key] = self.left(region, zone, instance_type, market) - (len(instances) - reserved)
            if market == "spot" and self._reclaims.get((region, zone, instance_type)):
                doomed = [i.id for i in instances][: self._reclaims[(region, zone, instance_type)]]
                self._reclaims[(region, zone, instance_type)] -= len(doomed)
                backend.terminate_instances(doomed)
                _reclaimed_by_ec2(backend, doomed)
            vcpus = catalog.vcpus(instance_type) or DEFAULT_VCPUS
            self._launched.extend((region, market, vcpus, i) for i in instances)
            self.hide_new(region, [i.id for i in instances])
            # EC2's LaunchTime is when the launch happened: on the modelled clock, as every other
            # time a run reads (moto stamps the wall clock, days before a block a run waited for).
            launched_at = clock.now().replace(tzinfo=None)  # moto keeps naive UTC times
            for instance in instances:
                instance.launch_time = launched_at
                self._boot(backend, instance, self.scenario.startup_for(zone, instance_type))

    def _boot(self, backend, instance, startup: Startup) -> None:
        """startup.sh on a new instance tags it with each step it reaches, on the modelled clock,
        as the instance role lets it on AWS; an instance that is off reports nothing more, and
        one whose role may not read startup.sh from the bucket never runs it."""
        may = self.instance_may
        if may is not None and self.startup_bucket is not None:
            key = {"Bucket": self.startup_bucket(instance), "Key": f"{constants.STARTUP_SCRIPTS_PREFIX}startup.sh"}
            if not may(backend.region_name, instance, "s3", "GetObject", key):
                return
        launched = self.elapsed()
        for n, (step, share) in enumerate(STARTUP_TIMELINE):
            at = launched + max(STARTUP_FIRST_REPORT_SECONDS, share * startup.serving_after_seconds)
            if startup.fails_at and n and STARTUP_TIMELINE[n - 1][0] == startup.fails_at:
                self.schedule(at, partial(_report_step, backend, instance, STARTUP_STEP_FAILED_PREFIX + startup.fails_at, may))
                return
            self.schedule(at, partial(_report_step, backend, instance, step, may))
            if step == startup.stalls_at:
                return

    def freed(self, region: str, instance_ids: list[str], launch) -> None:
        """A TerminateInstances of the account's own instances (`launch` makes the call): each one
        that was live frees its capacity in its pool, as on EC2, where a terminated instance's host
        is free for the pool again. One in a capacity reservation gives the reservation its slot
        back instead (local/reservations.py counts live instances); a reclaim is EC2 taking the
        capacity back, so it frees nothing (it does not come through here)."""
        asked = set(instance_ids)
        with self._lock:
            live = [
                (market, instance)
                for r, market, _, instance in self._launched
                if r == region and instance.id in asked and instance.state not in ("terminated", "shutting-down")
                and not getattr(instance, "capacity_reservation_id", None)
            ]
            result = launch()
            for market, instance in live:
                if instance.state in ("terminated", "shutting-down"):
                    key = (region, instance.placement.zone, instance.instance_type, market)
                    self._stock[key] = self.left(*key) + 1
        return result

    def quota_limit(self, region: str, market: str) -> int | None:
        offered = self.scenario.regions.get(region)
        if offered is None:
            return None
        return offered.quota.spot_vcpus if market == "spot" else offered.quota.on_demand_vcpus

    def quota_room_vcpus(self, region: str, market: str) -> int | None:
        """vCPUs the region's quota for the market still allows (None: no quota)."""
        limit = self.quota_limit(region, market)
        if limit is None:
            return None
        running = sum(
            vcpus
            for r, m, vcpus, instance in self._launched
            if r == region and m == market and instance.state not in ("terminated", "shutting-down")
        )
        return limit - running

    def _check_quota(self, region: str, market: str, itype: str, count: int) -> None:
        room = self.quota_room_vcpus(region, market)
        if room is None:
            return
        wanted = count * (catalog.vcpus(itype) or DEFAULT_VCPUS)
        if wanted > room:
            code = "MaxSpotInstanceCountExceeded" if market == "spot" else "VcpuLimitExceeded"
            raise EC2ClientError(
                code,
                f"You have requested more vCPU capacity than your current {market} vCPU limit of {self.quota_limit(region, market)} allows for {region}.",
            )

    # --- installing the patches ------------------------------------------------------

    def patches(self) -> ExitStack:
        market = self
        original_run = InstanceResponse.run_instances

        def run_instances(response: InstanceResponse) -> ActionResult:
            def launch_in_moto(count: int, zone: str | None) -> ActionResult:
                plain_get = response._get_param
                chosen = {"MinCount": str(count)}  # moto reads MinCount as "how many"
                if zone and not plain_get("SubnetId"):
                    chosen["Placement.AvailabilityZone"] = zone  # the AZ the market chose, when none was named
                response._get_param = lambda key, if_none=None: chosen[key] if key in chosen else plain_get(key, if_none)
                try:
                    return original_run(response)
                finally:
                    del response._get_param

            return market.launch(response, launch_in_moto)

        def describe_spot_price_history(response: SpotInstances) -> ActionResult:
            response._filters_from_querystring()  # refuses a name EC2 does not know; gpufill filters by parameters
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

            types = response._get_param("InstanceTypes", [])
            regions = response._get_param("RegionNames", [])
            configuration = (
                tuple(sorted(types)),
                response._get_param("TargetCapacity"),
                response._get_param("TargetCapacityUnitType"),
                response._get_param("SingleAvailabilityZone"),
                tuple(sorted(regions)),
            )
            single_zone = str(response._get_param("SingleAvailabilityZone")).lower() == "true"
            scores = market.placement_scores(types, regions, zone_id, configuration, single_zone=single_zone)
            return ActionResult({"SpotPlacementScores": scores})

        original_describe = InstanceResponse.describe_instances

        def describe_instances(response: InstanceResponse) -> ActionResult:
            """moto's DescribeInstances, plus the `client-token` filter and EC2's visibility lag."""
            from moto.ec2.exceptions import InvalidInstanceIdError

            hidden = market.hidden_now(response.region)
            filters = response._filters_from_querystring()
            tokens = filters.pop("client-token", None)
            asked = response._get_param("InstanceIds", [])
            for instance_id in asked:
                if instance_id in hidden:
                    raise InvalidInstanceIdError(instance_id)
            if tokens is not None:
                by_token = [i for t in tokens for i in market.launched_with_token(response.region, t)]
                asked = [i for i in asked if i in by_token] if asked else by_token
                if not asked:
                    return ActionResult({"Reservations": [], "NextToken": None})
            if not hidden and tokens is None:
                return original_describe(response)
            if asked:
                reservations = response.ec2_backend.get_reservations_by_instance_ids(asked, filters=filters)
            else:
                reservations = response.ec2_backend.describe_instances(filters=filters)
            visible = []
            for reservation in reservations:
                instances = [i for i in reservation.instances if i.id not in hidden]
                if instances:
                    copy = type(reservation).__new__(type(reservation))
                    copy.__dict__.update(reservation.__dict__)
                    copy.instances = instances
                    visible.append(copy)
            return ActionResult({"Reservations": visible, "NextToken": None})

        def root_snapshot_mappings(image) -> list[dict]:
            return [
                {
                    "DeviceName": image.root_device_name,
                    "Ebs": {
                        "SnapshotId": image.ebs_snapshot.id,
                        "VolumeSize": getattr(image, "root_snapshot_gib", 15),
                        "DeleteOnTermination": True,
                        "VolumeType": "gp3" if hasattr(image, "root_snapshot_gib") else "standard",
                    },
                }
            ]

        original_filters = EC2BaseResponse._filters_from_querystring

        def strict_filters(response: EC2BaseResponse) -> dict:
            found = original_filters(response)
            filters.check(response._get_action(), found)
            return found

        from moto.ec2.models.amis import Ami

        from gpufill.local import ec2_errors

        stack = ExitStack()
        stack.enter_context(ec2_errors.patches())
        stack.enter_context(mock.patch.object(EC2BaseResponse, "_filters_from_querystring", strict_filters))
        stack.enter_context(mock.patch.object(InstanceResponse, "describe_instances", describe_instances))
        stack.enter_context(mock.patch.object(Ami, "block_device_mappings", property(root_snapshot_mappings)))
        stack.enter_context(
            mock.patch.object(EC2Response, "get_spot_placement_scores", get_spot_placement_scores, create=True)
        )
        stack.enter_context(mock.patch.object(InstanceResponse, "run_instances", run_instances))
        original_terminate_instances = InstanceResponse.terminate_instances

        def terminate_instances(response: InstanceResponse) -> ActionResult:
            return market.freed(response.region, response._get_param("InstanceIds", []),
                                lambda: original_terminate_instances(response))

        stack.enter_context(mock.patch.object(InstanceResponse, "terminate_instances", terminate_instances))

        def describe_capacity_reservations(response) -> ActionResult:
            market.blocks.refresh()  # a Capacity Block's state on the modelled clock
            found = market.reservations.describe(
                response.region, response.current_account, response._get_param("CapacityReservationIds", []),
                response._filters_from_querystring(),
            )
            return ActionResult({"CapacityReservations": found, "NextToken": None})

        stack.enter_context(
            mock.patch.object(EC2Response, "describe_capacity_reservations", describe_capacity_reservations, create=True)
        )
        for name, method in capacity_blocks.api(market.blocks).items():
            stack.enter_context(mock.patch.object(EC2Response, name, method, create=True))
        from moto.ec2.models.instances import Instance

        from gpufill.local import reservations

        original_terminate = Instance.terminate

        def terminate(instance):
            # A reclaim or a shutdown marks it shutting-down first: still stamped as it ends.
            if instance.state != "terminated" and getattr(instance, "capacity_reservation_id", None):
                reservations.ended(instance, lambda: market.elapsed())
            return original_terminate(instance)

        stack.enter_context(mock.patch.object(Instance, "terminate", terminate))
        for name, method in market.groups.api().items():
            stack.enter_context(mock.patch.object(EC2Response, name, method, create=True))
        from moto.ec2.responses.security_groups import SecurityGroups

        def create_security_group(response) -> ActionResult:
            made = SecurityGroups.create_security_group(response)
            if market.faults is not None:  # a new group may not be visible at once (local/visibility.py)
                market.faults.created(response.region, "security-group", made.result["GroupId"])
            return made

        stack.enter_context(mock.patch.object(EC2Response, "create_security_group", create_security_group))
        from moto.ec2.responses.fleets import Fleets
        from moto.ec2.responses.launch_templates import LaunchTemplates

        from gpufill.local import launch_templates

        fleet_api = FleetApi(market).api(
            Fleets.create_fleet,
            LaunchTemplates.create_launch_template,
            launch_templates.limited(LaunchTemplates.create_launch_template_version),
            Fleets.describe_fleets,
        )
        for name, method in fleet_api.items():
            stack.enter_context(mock.patch.object(EC2Response, name, method))
        stack.enter_context(launch_templates.patches())
        stack.enter_context(mock.patch.object(SpotInstances, "describe_spot_price_history", describe_spot_price_history))
        stack.enter_context(
            mock.patch.object(InstanceTypeOfferingBackend, "describe_instance_type_offerings", describe_instance_type_offerings)
        )
        return stack
