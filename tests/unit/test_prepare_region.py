"""PrepareRegion: a region's launch parameters resolved once per entry, or, for a waiting run's
later try, taken from what an earlier try fixed (run.prepared) without asking AWS again."""

from __future__ import annotations

import pytest

from gpufill.adapters import ami, ec2, network, regions_config, run_store, warm_facts
from gpufill.handlers import prepare_region
from gpufill.models.request import Request, normalise
from gpufill.models.run import Plan, PlanRef, Pool, RegionLaunch, Run
from gpufill.policy import waiting

POOLS = [Pool(region="us-west-2", availability_zone=f"us-west-2{z}", instance_type="g6.xlarge", market="spot") for z in "ab"]


class Context:
    function_name = "PrepareRegion"
    function_version = "$LATEST"
    invoked_function_arn = "arn:aws:lambda:us-east-1:1:function:PrepareRegion"
    memory_limit_in_mb = 256
    aws_request_id = "req"
    log_group_name = "/aws/lambda/PrepareRegion"
    log_stream_name = "local"

    def get_remaining_time_in_millis(self) -> int:
        return 60_000


@pytest.fixture
def aws(monkeypatch):
    """What the handler asked AWS for, in order."""
    asked: list[tuple] = []

    monkeypatch.setattr(run_store, "load_plan", lambda key: Plan(request_id="p", market="spot", pools=POOLS))
    monkeypatch.setattr(run_store, "note_launch_region", lambda region: None)
    monkeypatch.setattr(regions_config, "load", lambda: regions_config.RegionsConfig(regions=[]))
    monkeypatch.setattr(ami, "resolve", lambda region, fresh: asked.append(("image", region, fresh)) or "ami-new")
    monkeypatch.setattr(ec2, "root_snapshot_gib", lambda region, image: asked.append(("DescribeImages", image)) or 100)
    monkeypatch.setattr(network, "default_subnet", lambda region, zone: asked.append(("subnet", zone)) or f"subnet-{zone}")
    monkeypatch.setattr(network, "instance_security_group", lambda region: "sg-1")
    # No warm launch settings kept for the deployment: the region is looked up, then kept.
    monkeypatch.setattr(warm_facts, "load_prepared", lambda region: None)
    monkeypatch.setattr(warm_facts, "save_prepared", lambda prepared: asked.append(("kept", prepared.region)))
    return asked


def step(run: Run) -> dict:
    request = normalise(Request(count=2, regions=["us-west-2"], wait_for_capacity={"deadline": "PT6H"}),
                        request_id="p", default_regions=["us-west-2"], home_region="us-east-1")
    plan = PlanRef(request_id="p", market="spot", key="plan#p", pools=len(POOLS))
    return {"request": request.model_dump(mode="json"), "plan": plan.model_dump(mode="json"),
            "run": run.model_dump(mode="json", exclude_none=True)}


def waiting_run(**fields) -> Run:
    return Run(batch=2, remaining=2, wait=waiting.begin(3600, 0.0), **fields)


def test_a_first_entry_resolves_the_region_and_a_waiting_run_keeps_it(aws):
    out = prepare_region.handler(step(waiting_run()), Context())
    assert aws == [
        ("image", "us-west-2", False), ("DescribeImages", "ami-new"), ("subnet", "us-west-2a"), ("subnet", "us-west-2b"),
        ("kept", "us-west-2"),
    ]
    assert out["next"] == "launch" and out["launch"]["image_id"] == "ami-new" and out["launch"]["root_volume_gib"] == 200
    assert out["prepared"] == [out["launch"]]


def test_a_later_try_enters_with_what_an_earlier_one_fixed_asking_aws_nothing(aws):
    kept = RegionLaunch(region="us-west-2", image_id="ami-kept", root_volume_gib=300, security_group_id="sg-0",
                        subnets={"us-west-2a": "subnet-a"}, ami_refreshed=True)
    out = prepare_region.handler(step(waiting_run(prepared=[kept])), Context())
    assert aws == []
    assert out["launch"] == kept.model_copy(update={"ami_refreshed": False}).model_dump(mode="json", exclude_none=True)


def test_a_stale_image_is_resolved_again_even_with_the_region_kept(aws):
    kept = RegionLaunch(region="us-west-2", image_id="ami-stale", root_volume_gib=200)
    out = prepare_region.handler(step(waiting_run(prepared=[kept], next="refresh")), Context())
    assert aws[:2] == [("image", "us-west-2", True), ("DescribeImages", "ami-new")]
    assert out["launch"]["image_id"] == "ami-new" and [p["image_id"] for p in out["prepared"]] == ["ami-new"]
