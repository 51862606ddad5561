"""WaitUntilRunning's own work (handlers/wait_until_running.py): each region's instances asked
about once, only the instances whose state changed recorded, an instance lost before it ran
recorded lost and counted, and a finished capacity wait shown ended. AWS is replaced by
recorders of what the handler asks the adapters for."""

import logging

import pytest

from gpufill.adapters import ec2, instances_table, run_store
from gpufill.handlers import wait_until_running
from gpufill.handlers.observability import metrics
from gpufill.models.request import Request, normalise
from gpufill.models.run import Instance, Run, Waiting


class Context:
    function_name = "WaitUntilRunning"
    function_version = "$LATEST"
    invoked_function_arn = "arn:aws:lambda:us-east-1:1:function:WaitUntilRunning"
    memory_limit_in_mb = 256
    aws_request_id = "req"
    log_group_name = "/aws/lambda/WaitUntilRunning"
    log_stream_name = "local"

    def get_remaining_time_in_millis(self) -> int:
        return 60_000


def instance(iid: str, region: str = "us-west-2", **fields) -> Instance:
    return Instance(instance_id=iid, region=region, availability_zone=f"{region}a", instance_type="g6.xlarge",
                    market="spot", hourly_price=0.5, **fields)


def event(run: Run) -> dict:
    req = normalise(Request(count=3, regions=["us-west-2", "us-east-1"]), request_id="req-1",
                    default_regions=["us-west-2"], home_region="us-east-1")
    return {"request": req.model_dump(mode="json"), "run": run.model_dump(mode="json", exclude_none=True)}


@pytest.fixture
def aws(monkeypatch):
    """What EC2 says of each instance, and what the handler asked and recorded, in order."""
    asked: list[tuple] = []
    states: dict[str, dict] = {}

    def instance_states(region, ids):
        asked.append(("describe", region, ids))
        return {iid: states.get(iid, {"state": "not-visible", "private_ip": None}) for iid in ids}

    monkeypatch.setattr(ec2, "instance_states", instance_states)
    monkeypatch.setattr(instances_table, "record_boot_state",
                        lambda i, lost: asked.append(("record", i.instance_id, i.state, i.private_ip, lost)))
    monkeypatch.setattr(run_store, "save_wait", lambda request_id, view: asked.append(("wait", request_id, view)))
    monkeypatch.setattr(metrics, "add_metric", lambda name, unit, value: asked.append(("metric", name, unit, value)))
    return asked, states


def test_each_region_is_asked_once_and_only_changed_instances_are_recorded(aws):
    asked, states = aws
    states.update({"i-a": {"state": "running", "private_ip": "10.0.0.1"}, "i-b": {"state": "pending", "private_ip": None},
                   "i-e": {"state": "running", "private_ip": "10.1.0.1"}})
    run = Run(batch=3, remaining=0, launched=3, next="wait", boot_rounds=1,
              instances=[instance("i-a", state="pending"), instance("i-e", "us-east-1", state="running", private_ip="10.1.0.1"),
                         instance("i-b", state="pending")])
    out = wait_until_running.handler(event(run), Context())
    assert asked == [("describe", "us-west-2", ["i-a", "i-b"]), ("describe", "us-east-1", ["i-e"]),
                     ("record", "i-a", "running", "10.0.0.1", False)]
    assert out["next"] == "wait" and out["launched"] == 3 and out["boot_rounds"] == 2
    assert [(i["instance_id"], i["state"]) for i in out["instances"]] == [("i-a", "running"), ("i-e", "running"), ("i-b", "pending")]


def test_an_instance_lost_before_it_ran_is_recorded_lost_counted_and_refilled(aws, caplog):
    asked, states = aws
    caplog.set_level(logging.INFO)
    states.update({"i-a": {"state": "running", "private_ip": "10.0.0.1"}, "i-b": {"state": "terminated", "private_ip": None}})
    earlier = instance("i-0", state="terminated")
    run = Run(batch=2, remaining=0, launched=2, next="wait", boot_rounds=1, lost=[earlier],
              instances=[instance("i-a", state="running", private_ip="10.0.0.1"), instance("i-b", state="pending")])
    out = wait_until_running.handler(event(run), Context())
    assert asked[1:] == [("record", "i-b", "terminated", None, True), ("metric", "InstancesLostAtLaunch", "Count", 1)]
    assert [i["instance_id"] for i in out["lost"]] == ["i-0", "i-b"]
    assert (out["launched"], out["remaining"], out["next"]) == (1, 1, "ready")
    [logged] = [r for r in caplog.records if r.getMessage() == "instances lost before running"]
    assert logged.levelname == "WARNING" and logged.ids == ["i-b"]
    # What is unset is left out of the state handed on (a large fleet's state stays within Step Functions' 256 KiB).
    assert "cause" not in out and "wait" not in out and "connect" not in out["instances"][0]


def test_a_lost_instance_recorded_in_an_earlier_round_is_not_recorded_or_counted_again(aws):
    asked, states = aws
    states["i-a"] = {"state": "running", "private_ip": "10.0.0.1"}
    run = Run(batch=1, remaining=0, launched=1, next="wait", boot_rounds=2, lost=[instance("i-0", state="terminated")],
              instances=[instance("i-a", state="running", private_ip="10.0.0.1")])
    out = wait_until_running.handler(event(run), Context())
    assert asked == [("describe", "us-west-2", ["i-a"])]
    assert out["next"] == "ready"


def test_an_instance_whose_address_arrives_is_recorded_with_it(aws):
    asked, states = aws
    states["i-a"] = {"state": "running", "private_ip": "10.0.0.9"}
    run = Run(batch=1, remaining=0, launched=1, next="wait", boot_rounds=1, instances=[instance("i-a", state="running")])
    wait_until_running.handler(event(run), Context())
    assert asked[1:] == [("record", "i-a", "running", "10.0.0.9", False)]


def test_the_first_round_after_a_capacity_wait_shows_the_wait_ended(aws):
    asked, states = aws
    states["i-a"] = {"state": "running", "private_ip": "10.0.0.1"}
    wait = Waiting(deadline="2033-05-18T03:33:20Z", deadline_epoch=2_000_000_000, tries=3)
    run = Run(batch=1, remaining=0, launched=1, next="wait", wait=wait, instances=[instance("i-a", state="running", private_ip="10.0.0.1")])
    wait_until_running.handler(event(run), Context())
    assert asked[0] == ("wait", "req-1", {"phase": "ended", "tries": 3, "next_try_at": None})
    asked.clear()
    wait_until_running.handler(event(run.model_copy(update={"boot_rounds": 1})), Context())
    assert [a[0] for a in asked] == ["describe"]
