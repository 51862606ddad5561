"""Cluster placement groups of a same-az gang of EFA types: a group is left only where the gang
launched, holds no more than the scenario's cluster room, whatever the launch path, and every
group the request made is gone after a rollback and after an approved teardown."""

from __future__ import annotations

import pytest

from tests.support.audit import EAST, WEST, assert_exactly_once

EFA = "g6e.12xlarge"


def efa(spot: int, cluster: int | None = None, price: float = 4.1) -> dict:
    return {EFA: {"spot_price": price, "spot": spot, **({"cluster": cluster} if cluster is not None else {})}}


# Oregon ranks first; each of its AZs has room for the gang, but its cluster groups hold 2 and 3.
# Virginia's 1a group holds the whole gang of 4.
MARKET = {"regions": {
    WEST: {"advisor_tier": {EFA: 0}, "zones": {f"{WEST}a": efa(8, cluster=2), f"{WEST}b": efa(8, cluster=3, price=4.2)}},
    EAST: {"advisor_tier": {EFA: 2}, "zones": {f"{EAST}a": efa(8, cluster=4, price=4.5)}},
}}


def gang(mode: str, **fields) -> dict:
    return {"instance_types": [EFA], "regions": [WEST, EAST], "scoring": "classic", "count": 4,
            "launch_mode": mode, "placement": "same-az", "all_or_nothing": True, **fields}


def groups(engine) -> dict[str, list[str]]:
    return {region: engine.market.groups.names(region) for region in (WEST, EAST)}


@pytest.mark.parametrize("mode", ["fleet", "partial"])
def test_a_gang_fills_within_its_cluster_group_and_leaves_groups_only_where_it_launched(account, mode):
    with account(MARKET) as engine:
        execution = engine.run(gang(mode), name=f"efa-{mode}")
        seen = assert_exactly_once(engine, execution, launched=4)
        left = groups(engine)
        [group] = left[EAST]
        members = engine.market.groups.members(EAST, group)
        teardown = engine.run({"action": "teardown", "request_id": f"efa-{mode}"}, name=f"efa-{mode}-down", decision="approved")
        after_teardown = groups(engine)
    assert execution.output["status"] == "FULFILLED"
    assert {i["availability_zone"] for i in execution.output["instances"]} == {f"{EAST}a"}
    # Oregon's groups could not hold the gang: none is left there, rolled back or never filled.
    assert left == {WEST: [], EAST: [group]} and group.endswith(f"{EAST}a")
    assert sorted(members) == sorted(seen.in_ec2)
    assert teardown.output["status"] == "TERMINATED"
    assert after_teardown == {WEST: [], EAST: []}


@pytest.mark.parametrize("mode", ["fleet", "partial"])
def test_a_gang_no_cluster_group_can_hold_rolls_back_to_no_group_at_all(account, mode):
    small = {"regions": {region: {**spec, "zones": {z: efa(8, cluster=2) for z in spec["zones"]}}
                         for region, spec in MARKET["regions"].items()}}
    with account(small) as engine:
        execution = engine.run(gang(mode), name=f"efa-nowhere-{mode}")
        assert_exactly_once(engine, execution, launched=0)
        left = groups(engine)
    assert execution.error == "GANG_NOT_PLACED", execution.cause
    assert left == {WEST: [], EAST: []}


@pytest.mark.parametrize("mode", ["fleet", "partial"])
def test_a_cluster_group_not_visible_yet_is_asked_for_again_and_the_gang_lands_in_the_first_region(account, mode):
    roomy = {"regions": {**MARKET["regions"], WEST: {**MARKET["regions"][WEST], "zones": {f"{WEST}a": efa(8, cluster=4)}}}}
    with account(roomy) as engine:
        engine.faults.not_visible("placement-group", calls=2, region=WEST)
        execution = engine.run(gang(mode), name=f"efa-lagging-{mode}")
        assert_exactly_once(engine, execution, launched=4)
        left = groups(engine)
    assert execution.output["status"] == "FULFILLED", execution.cause
    assert {i["availability_zone"] for i in execution.output["instances"]} == {f"{WEST}a"}
    assert left == {WEST: [f"gpufill-local-efa-lagging-{mode}-{WEST}a"], EAST: []}
    assert engine.faults.injected["visibility:placement-group"] == 2
    outcomes = [(a["outcome"], a.get("reason")) for a in execution.output["attempts"]]
    if mode == "partial":  # RunInstances refused: the same call, the same token, sent again
        assert outcomes == [("launched", None)]
    else:  # the fleet answered the group unknown per override: its pools asked again by the next fleet
        assert outcomes[0] == ("throttled", "InvalidPlacementGroup.Unknown") and outcomes[-1][0] == "launched"
