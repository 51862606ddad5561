"""The real state machine file on the local engine: which pools are tried, in what order, what is launched."""

import boto3

from tests.support import tried, zone

OREGON_TOKYO = {
    "us-west-2": {
        "advisor_tier": {"g6.xlarge": 0},
        "zones": {
            "us-west-2a": zone(0.40, spot=10, on_demand=10),
            "us-west-2b": zone(0.42, spot=10, on_demand=10),
            "us-west-2c": zone(0.45, spot=10, on_demand=10),
        },
    },
    "ap-northeast-1": {
        "advisor_tier": {"g6.xlarge": 3},
        "zones": {
            "ap-northeast-1a": zone(0.60, spot=10, on_demand=10),
            "ap-northeast-1c": zone(0.62, spot=10, on_demand=10),
        },
    },
}


def request(**fields):
    """The walkthrough's requests, launched pool by pool with RunInstances (fleets: test_fleet_launch.py)."""
    return {"instance_types": ["g6.xlarge"], "regions": ["ap-northeast-1", "us-west-2"], "launch_mode": "partial", **fields}


def with_zones(market: dict, region: str, **zones) -> dict:
    copy = {r: {**m, "zones": dict(m["zones"])} for r, m in market.items()}
    copy[region]["zones"].update(zones)
    return {"regions": copy}


def test_fills_in_the_top_ranked_pool(simulate):
    execution = simulate(request(count=4), {"regions": OREGON_TOKYO})
    assert execution.status == "SUCCEEDED"
    result = execution.output
    assert (result["status"], result["requested"], result["launched"]) == ("FULFILLED", 4, 4)
    assert tried(execution) == [("us-west-2a", 4, 4, "launched")]
    assert {i["availability_zone"] for i in result["instances"]} == {"us-west-2a"}
    assert result["hourly_cost"] == 1.6
    assert execution.metrics["ec2_calls"]["RunInstances"] == 1


def test_sold_out_zone_moves_to_the_next_zone_of_the_same_region(simulate):
    market = with_zones(OREGON_TOKYO, "us-west-2", **{"us-west-2a": zone(0.40, spot=0)})
    execution = simulate(request(count=2), market)
    assert tried(execution) == [("us-west-2a", 2, 0, "capacity"), ("us-west-2b", 2, 2, "launched")]
    # One LaunchBatch step probes the sold-out AZ and moves on to the next in the same region.
    assert execution.entered().count("LaunchBatch") == 1
    assert execution.entered().count("PrepareRegion") == 1


def test_partial_mode_takes_what_a_pool_has_in_one_call(simulate):
    market = with_zones(OREGON_TOKYO, "us-west-2", **{"us-west-2a": zone(0.40, spot=3)})
    execution = simulate(request(count=4, launch_mode="partial"), market)
    assert tried(execution) == [("us-west-2a", 4, 3, "launched"), ("us-west-2b", 1, 1, "launched")]
    assert execution.output["launched"] == 4


def test_exact_mode_halves_the_batch_on_capacity_down_to_one(simulate):
    market = with_zones(OREGON_TOKYO, "us-west-2", **{"us-west-2a": zone(0.40, spot=3)})
    execution = simulate(request(count=4, launch_mode="exact"), market)
    assert tried(execution) == [
        ("us-west-2a", 4, 0, "capacity"),
        ("us-west-2a", 2, 2, "launched"),
        ("us-west-2a", 2, 0, "capacity"),
        ("us-west-2a", 1, 1, "launched"),
        ("us-west-2a", 1, 0, "capacity"),
        ("us-west-2b", 1, 1, "launched"),
    ]
    assert execution.entered().count("LaunchBatch") == 1  # six calls fit one step


def test_quota_halves_the_batch_until_it_fits(simulate):
    # 8 spot vCPUs in Oregon: a g6.xlarge has 4, so a batch of 4 (16 vCPUs) must halve to 2.
    market = {"regions": {**OREGON_TOKYO, "us-west-2": {**OREGON_TOKYO["us-west-2"], "quota": {"spot_vcpus": 8}}}}
    execution = simulate(request(count=4), market)
    assert tried(execution) == [
        ("us-west-2a", 4, 0, "quota"),
        ("us-west-2a", 2, 2, "launched"),
        ("us-west-2a", 2, 0, "quota"),
        ("us-west-2a", 1, 0, "quota"),
        ("ap-northeast-1a", 2, 2, "launched"),
    ]
    assert execution.cause is None and execution.output["launched"] == 4


def test_regions_fall_back_in_score_order(simulate):
    sold_out = {z: zone(p, spot=0) for z, p in (("us-west-2a", 0.40), ("us-west-2b", 0.42), ("us-west-2c", 0.45))}
    execution = simulate(request(count=2), with_zones(OREGON_TOKYO, "us-west-2", **sold_out))
    zones = [z for z, *_ in tried(execution)]
    assert zones == ["us-west-2a", "us-west-2b", "us-west-2c", "ap-northeast-1a"]
    assert execution.output["instances"][0]["region"] == "ap-northeast-1"


def test_every_spot_pool_sold_out_fails_naming_each_pool_and_the_rerun(simulate):
    market = {
        "regions": {
            region: {"zones": {z: zone(0.5, spot=0, on_demand=5) for z in m["zones"]}}
            for region, m in OREGON_TOKYO.items()
        }
    }
    execution = simulate(request(count=2, origin_region="ap-northeast-1"), market)
    assert execution.status == "FAILED"
    assert execution.error == "ALL_SPOT_EXHAUSTED"
    pools = {p["pool"] for p in execution.cause["pools_tried"]}
    assert pools == {f"{r}/{z}/g6.xlarge" for r, m in OREGON_TOKYO.items() for z in m["zones"]}
    hint = execution.cause["hint"]
    assert '"market": "on-demand"' in hint
    assert "cost\" starts in us-west-2" in hint and "$0.9840/h" in hint
    assert "latency\" starts in ap-northeast-1" in hint
    assert execution.metrics["ec2_calls"]["RunInstances"] == 5


ON_DEMAND_MARKET = {
    "regions": {
        region: {"zones": {z: zone(None, spot=0, on_demand=5) for z in zones}}
        for region, zones in {
            "ap-northeast-1": ["ap-northeast-1a"],
            "us-west-2": ["us-west-2a"],
            "eu-central-1": ["eu-central-1a"],
        }.items()
    }
}


def test_on_demand_cost_picks_the_cheapest_region(simulate):
    execution = simulate(
        request(count=1, market="on-demand", on_demand_strategy="cost", origin_region="ap-northeast-1",
                regions=["ap-northeast-1", "eu-central-1", "us-west-2"]),
        ON_DEMAND_MARKET,
    )
    instance = execution.output["instances"][0]
    assert (instance["region"], instance["market"], instance["hourly_price"]) == ("us-west-2", "on-demand", 0.984)


def test_on_demand_latency_picks_the_region_nearest_the_origin(simulate):
    execution = simulate(
        request(count=1, market="on-demand", on_demand_strategy="latency", origin_region="ap-northeast-1",
                regions=["ap-northeast-1", "eu-central-1", "us-west-2"]),
        ON_DEMAND_MARKET,
    )
    assert execution.output["instances"][0]["region"] == "ap-northeast-1"


def test_spot_then_on_demand_goes_on_demand_only_after_every_spot_pool(simulate):
    market = with_zones(
        OREGON_TOKYO,
        "us-west-2",
        **{z: zone(p, spot=1, on_demand=5) for z, p in (("us-west-2a", 0.40), ("us-west-2b", 0.42), ("us-west-2c", 0.45))},
    )
    market["regions"]["ap-northeast-1"]["zones"] = {
        z: zone(0.6, spot=0, on_demand=5) for z in ("ap-northeast-1a", "ap-northeast-1c")
    }
    execution = simulate(request(count=5, market="spot-then-on-demand"), market)
    result = execution.output
    markets = [i["market"] for i in result["instances"]]
    assert markets == ["spot"] * 3 + ["on-demand"] * 2
    spot_attempts = [a for a in result["attempts"] if a["market"] == "spot"]
    first_on_demand = next(n for n, a in enumerate(result["attempts"]) if a["market"] == "on-demand")
    assert first_on_demand == len(spot_attempts) == 5  # every spot pool came first
    assert "RankOnDemandPools" in execution.entered()
    assert result["status"] == "FULFILLED"


def test_plan_scores_and_ranks_without_launching(simulate):
    execution = simulate(request(action="plan", count=8), {"regions": OREGON_TOKYO})
    plan = execution.output
    assert plan["status"] == "PLANNED"
    assert [(s["region"], s["score"], s["rank"]) for s in plan["regions"]] == [
        ("us-west-2", 40 + 24 + 20, "S"),
        ("ap-northeast-1", int(40 * 0.40 / 0.60) + 16 + 5, "C"),
    ]
    assert [p["availability_zone"] for p in plan["pools"]] == [
        "us-west-2a", "us-west-2b", "us-west-2c", "ap-northeast-1a", "ap-northeast-1c"
    ]
    assert "RunInstances" not in execution.metrics["ec2_calls"]


def test_every_launched_instance_is_recorded_and_tagged(local_account):
    with local_account({"regions": OREGON_TOKYO}) as engine:
        execution = engine.run(request(count=3, tags={"team": "ml"}), name="recorded-run")
        table = boto3.resource("dynamodb", region_name="us-east-1").Table("GpuProvisioningInstances-local")
        records = {item["instance_id"]: item for item in table.scan()["Items"] if "kind" not in item}
        ec2 = boto3.client("ec2", region_name="us-west-2")
        reservations = ec2.describe_instances()["Reservations"]
    launched = {i["instance_id"] for i in execution.output["instances"]}
    assert set(records) == launched and len(launched) == 3
    assert {r["request_id"] for r in records.values()} == {"recorded-run"}
    assert {r["market"] for r in records.values()} == {"spot"}
    described = [i for r in reservations for i in r["Instances"]]
    for instance in described:
        tags = {t["Key"]: t["Value"] for t in instance["Tags"]}
        assert tags["gpufill:managed"] == "true" and tags["gpufill:request-id"] == "recorded-run"
        assert tags["team"] == "ml"
    assert {i["InstanceId"] for i in described} == launched
