"""Model start-up on the modelled clock: the engine tags each new instance with the step its
startup.sh would have reached, so a DescribeInstances sees what it would on AWS at that time.

These instances are launched bare (no instance profile, no gpufill tags): the timeline is what is
tested here, so the instance role's judging is off (tests/iam covers it)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from gpufill.constants import TAG_STARTUP_STEP
from gpufill.local.deploy.images import LOCAL_AMI
from gpufill.local.engine import LocalEngine
from gpufill.local.scenario import MarketScenario

REGION = "us-west-2"


def _scenario(startup: dict | None = None, zone_startup: dict | None = None) -> MarketScenario:
    stock = {"spot_price": 0.5, "spot": 10, "on_demand": 10}
    if zone_startup is not None:
        stock["startup"] = zone_startup
    market = {"regions": {REGION: {"zones": {f"{REGION}a": {"g6.xlarge": stock},
                                             f"{REGION}b": {"g6.xlarge": {"spot_price": 0.5, "on_demand": 10}}}}}}
    if startup is not None:
        market["startup"] = startup
    return MarketScenario.model_validate(market)


def launch(account, zone: str = "a", tags: int = 1) -> str:
    reply = account.client("ec2", REGION).run_instances(
        ImageId=LOCAL_AMI, InstanceType="g6.xlarge", MinCount=1, MaxCount=1,
        Placement={"AvailabilityZone": f"{REGION}{zone}"},
        TagSpecifications=[{"ResourceType": "instance", "Tags": [{"Key": f"k{n}", "Value": "v"} for n in range(tags)]}],
    )
    return reply["Instances"][0]["InstanceId"]


def step(account, instance_id: str) -> str | None:
    account.market.hidden_now(REGION)  # past EC2's visibility lag: these tests read tags, not the lag
    reply = account.client("ec2", REGION).describe_instances(InstanceIds=[instance_id])
    tags = {t["Key"]: t["Value"] for t in reply["Reservations"][0]["Instances"][0].get("Tags", [])}
    return tags.get(TAG_STARTUP_STEP)


def steps_over_time(account, instance_id: str, seconds: list[float]) -> list[str | None]:
    seen = []
    for at in seconds:
        account.advance(at - account.elapsed)
        seen.append(step(account, instance_id))
    return seen


def test_each_step_appears_at_its_share_of_the_time_to_serving():
    with LocalEngine(_scenario({"serving_after_seconds": 1000}), judge_iam=False) as account:
        instance = launch(account)
        seen = steps_over_time(account, instance, [19, 20, 49, 50, 99, 100, 449, 450, 699, 700, 749, 750, 999, 1000, 9000])
    assert seen == [
        None, "preparing storage",  # never before 20 s: the instance boots first
        "preparing storage", "installing watchdog",  # 0.05 x 1000
        "installing watchdog", "pulling image and syncing model",  # 0.1
        "pulling image and syncing model", "syncing model",  # 0.45
        "syncing model", "starting vLLM",  # 0.7
        "starting vLLM", "loading model",  # 0.75
        "loading model", "serving",
        "serving",
    ]


def test_the_default_serves_four_minutes_after_the_launch():
    with LocalEngine(_scenario(), judge_iam=False) as account:
        instance = launch(account)
        assert steps_over_time(account, instance, [239, 240]) == ["loading model", "serving"]


def test_an_instance_that_stalls_stays_at_its_step():
    with LocalEngine(_scenario({"serving_after_seconds": 100, "stalls_at": "syncing model"}), judge_iam=False) as account:
        instance = launch(account)
        assert steps_over_time(account, instance, [50, 100, 7200]) == ["syncing model"] * 3


def test_an_instance_that_fails_reports_the_step_it_stopped_at_when_the_next_would_have_come():
    with LocalEngine(_scenario({"serving_after_seconds": 100, "fails_at": "starting vLLM"}), judge_iam=False) as account:
        instance = launch(account)
        assert steps_over_time(account, instance, [74, 75, 7200]) == [  # 0.75 x 100: when loading would begin
            "starting vLLM", "failed: starting vLLM", "failed: starting vLLM"]


def test_a_zone_and_type_can_start_up_differently_from_the_rest():
    with LocalEngine(_scenario({"serving_after_seconds": 100}, zone_startup={"stalls_at": "loading model"}), judge_iam=False) as account:
        stalled, normal = launch(account, "a"), launch(account, "b")
        account.advance(3600)
        assert (step(account, stalled), step(account, normal)) == ("loading model", "serving")


def test_an_instance_that_is_off_reports_nothing_more():
    with LocalEngine(_scenario({"serving_after_seconds": 1000}), judge_iam=False) as account:
        instance = launch(account)
        account.advance(30)
        account.client("ec2", REGION).terminate_instances(InstanceIds=[instance])
        account.advance(3600)
        assert step(account, instance) == "preparing storage"


def test_an_instance_with_fifty_tags_cannot_report_as_on_ec2():
    with LocalEngine(_scenario({"serving_after_seconds": 100}), judge_iam=False) as account:
        full, room = launch(account, tags=50), launch(account, tags=49)
        account.advance(3600)
        assert (step(account, full), step(account, room)) == (None, "serving")


@pytest.mark.parametrize(
    ("startup", "message"),
    [({"stalls_at": "syncing model", "fails_at": "loading model"}, "give stalls_at or fails_at, not both"),
     ({"stalls_at": "serving"}, "stalls_at"), ({"fails_at": "booting"}, "fails_at"),
     ({"serving_after_seconds": -1}, "serving_after_seconds")],
)
def test_a_startup_the_engine_cannot_model_is_refused(startup, message):
    with pytest.raises(ValidationError, match=message):
        _scenario(startup)
