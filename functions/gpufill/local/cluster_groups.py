"""Cluster placement groups in the simulated EC2 (moto 5.2.5 has none).

What AWS does and the engine does too: a group name is unique per account and region
(`InvalidPlacementGroup.Duplicate`); a launch into a group that does not exist fails with
`InvalidPlacementGroup.Unknown`; a group cannot be deleted while an instance in it has not
terminated (`InvalidPlacementGroup.InUse`). A cluster group packs its instances into one
network segment, so it can hold fewer than the whole AZ has: the scenario's `cluster` count
per zone and type, and a later launch into a group already holding instances gets only what
is left of it (AWS advises launching a cluster group's instances in one request for this reason).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from moto.core.responses import ActionResult
from moto.ec2.exceptions import EC2ClientError

from gpufill.local.scenario import MarketScenario

ENDED = ("terminated",)


class ClusterGroups:
    def __init__(self, scenario: MarketScenario):
        self.scenario = scenario
        self._groups: dict[tuple[str, str], dict[str, Any]] = {}  # (region, name) -> strategy, tags, members
        self._lock = threading.Lock()
        # Told of each group created: a new group may not be visible at once (local/visibility.py).
        self.on_create: Callable[[str, str], None] | None = None

    def names(self, region: str) -> list[str]:
        return sorted(name for r, name in self._groups if r == region)

    def members(self, region: str, name: str) -> list[str]:
        """The ids of every instance launched into the group, ended or not."""
        return sorted(i.id for i in self._get(region, name)["members"])

    def room(self, region: str, name: str, zone: str, instance_type: str) -> int:
        group = self._get(region, name)
        stock = self.scenario.regions.get(region)
        offer = stock.zones.get(zone, {}).get(instance_type) if stock else None
        cap = offer.cluster if offer is not None and offer.cluster is not None else 10**6
        return max(0, cap - len(self._live(group)))

    def joined(self, region: str, name: str, instances: list) -> None:
        self._get(region, name)["members"].extend(instances)

    def _get(self, region: str, name: str) -> dict[str, Any]:
        group = self._groups.get((region, name))
        if group is None:
            raise EC2ClientError("InvalidPlacementGroup.Unknown", f"The Placement Group '{name}' is unknown.")
        return group

    @staticmethod
    def _live(group: dict[str, Any]) -> list:
        return [i for i in group["members"] if i.state not in ENDED]

    # --- the EC2 API (patched onto moto's EC2Response) -------------------------------------

    def api(self) -> dict[str, Any]:
        groups = self

        def create_placement_group(response) -> ActionResult:
            name = response._get_param("GroupName")
            strategy = response._get_param("Strategy")
            tags = response._parse_tag_specification().get("placement-group", {})
            with groups._lock:
                if (response.region, name) in groups._groups:
                    raise EC2ClientError("InvalidPlacementGroup.Duplicate", f"The Placement Group '{name}' already exists.")
                groups._groups[(response.region, name)] = {"strategy": strategy, "tags": dict(tags), "members": []}
            if groups.on_create is not None:
                groups.on_create(response.region, name)
            return ActionResult({"PlacementGroup": groups._describe(response.region, name)})

        def describe_placement_groups(response) -> ActionResult:
            names = response._get_param("GroupNames", [])
            filters = response._filters_from_querystring()
            found = []
            for region, name in sorted(groups._groups):
                if region != response.region or (names and name not in names):
                    continue
                tags = groups._groups[(region, name)]["tags"]
                if all(tags.get(key[4:]) in values for key, values in filters.items() if key.startswith("tag:")):
                    found.append(groups._describe(region, name))
            missing = [n for n in names if (response.region, n) not in groups._groups]
            if missing:
                raise EC2ClientError("InvalidPlacementGroup.Unknown", f"The Placement Group '{missing[0]}' is unknown.")
            return ActionResult({"PlacementGroups": found})

        def delete_placement_group(response) -> ActionResult:
            name = response._get_param("GroupName")
            with groups._lock:
                group = groups._get(response.region, name)
                if groups._live(group):
                    raise EC2ClientError("InvalidPlacementGroup.InUse", f"The placement group '{name}' is in use and may not be deleted.")
                del groups._groups[(response.region, name)]
            return ActionResult({})

        return {
            "create_placement_group": create_placement_group,
            "describe_placement_groups": describe_placement_groups,
            "delete_placement_group": delete_placement_group,
        }

    def _describe(self, region: str, name: str) -> dict[str, Any]:
        group = self._groups[(region, name)]
        return {
            "GroupName": name,
            "State": "available",
            "Strategy": group["strategy"],
            "Tags": [{"Key": k, "Value": v} for k, v in group["tags"].items()],
        }
