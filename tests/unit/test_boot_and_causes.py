"""After the fill: the boot wait's rounds and states, and the causes a run fails with."""

import json

import pytest

from gpufill.models.request import Request, normalise
from gpufill.models.run import Attempt, Instance, Run
from gpufill.policy import boot
from gpufill.policy.errors import classify, is_rejection, quota_group, region_unusable
from gpufill.policy.exhaustion import CAUSE_BUDGET, exhaustion_cause, rejection_cause
from gpufill.policy.result import failure_cause, fill_result


def instance(n, **fields):
    return Instance(instance_id=f"i-{n:017x}", region="us-west-2", availability_zone="us-west-2a",
                    instance_type="g6.xlarge", market="spot", hourly_price=0.5, **fields)


def request(**fields):
    return normalise(Request(**fields), request_id="r1", default_regions=["us-west-2", "us-east-1"], home_region="us-east-1")


def test_boot_waits_while_any_instance_is_pending_and_counts_rounds():
    run = Run(batch=2, remaining=0, launched=2, instances=[instance(1), instance(2)])
    settled = boot.settle(run, {instance(1).instance_id: {"state": "running", "private_ip": "10.0.0.1"},
                                instance(2).instance_id: {"state": "pending", "private_ip": None}})
    assert (settled.next, settled.boot_rounds) == ("wait", 1)
    assert [i.state for i in settled.instances] == ["running", "pending"]
    done = boot.settle(settled, {instance(2).instance_id: {"state": "running", "private_ip": "10.0.0.2"}})
    assert (done.next, done.boot_rounds, done.launched, done.remaining) == ("ready", 2, 2, 0)
    assert [i.private_ip for i in done.instances] == ["10.0.0.1", "10.0.0.2"]


def test_boot_stops_waiting_after_its_last_round():
    run = Run(batch=1, remaining=0, launched=1, instances=[instance(1)], boot_rounds=boot.MAX_BOOT_ROUNDS - 1)
    settled = boot.settle(run, {instance(1).instance_id: {"state": "pending", "private_ip": None}})
    assert settled.next == "ready" and settled.boot_rounds == boot.MAX_BOOT_ROUNDS


def test_an_instance_ec2_does_not_describe_yet_is_pending_never_lost():
    run = Run(batch=1, remaining=0, launched=1, instances=[instance(1)])
    settled = boot.settle(run, {instance(1).instance_id: {"state": boot.NOT_VISIBLE, "private_ip": None}})
    assert settled.lost == [] and [i.state for i in settled.instances] == ["pending"] and settled.next == "wait"


@pytest.mark.parametrize("state", ["terminated", "shutting-down"])
def test_an_instance_that_ended_before_running_is_lost_and_the_count_reopens(state):
    run = Run(batch=2, remaining=0, launched=2, hourly_cost=1.0, instances=[instance(1), instance(2)])
    settled = boot.settle(run, {instance(1).instance_id: {"state": state, "private_ip": None},
                                instance(2).instance_id: {"state": "running", "private_ip": "10.0.0.2"}})
    assert [i.instance_id for i in settled.lost] == [instance(1).instance_id]
    assert (settled.launched, settled.remaining, settled.hourly_cost) == (1, 1, 0.5)


def test_the_port_forward_command_names_region_instance_and_the_model_port():
    command = boot.port_forward_command("eu-central-1", "i-0abc")
    assert command.startswith("aws ssm start-session --region eu-central-1 --target i-0abc ")
    assert '"portNumber":["8000"]' in command and "AWS-StartPortForwardingSession" in command


@pytest.mark.parametrize(("code", "outcome"), [
    ("InsufficientInstanceCapacity", "capacity"), ("InsufficientCapacity", "capacity"), ("Unsupported", "capacity"),
    ("MaxSpotInstanceCountExceeded", "quota"), ("VcpuLimitExceeded", "quota"), ("InstanceLimitExceeded", "quota"),
    ("RequestLimitExceeded", "throttled"), ("InvalidAMIID.NotFound", "error"), ("SomethingNew", "error")])
def test_every_documented_ec2_code_has_its_class(code, outcome):
    assert classify(code) == outcome


@pytest.mark.parametrize("code", ["UnauthorizedOperation", "InvalidBlockDeviceMapping", "InvalidParameterValue",
                                  "InvalidParameterCombination", "InvalidKMSKey.InvalidState", "KMS.DisabledException"])
def test_account_level_refusals_stop_the_run(code):
    assert is_rejection(code) and classify(code) == "error"


@pytest.mark.parametrize("code", ["InsufficientInstanceCapacity", "InvalidAMIID.NotFound", "NoSubnet", None])
def test_pool_level_answers_are_not_refusals(code):
    assert not is_rejection(code)


def test_quota_groups_follow_ec2s_vcpu_quotas():
    assert quota_group("g6.xlarge") == quota_group("g5.48xlarge") == quota_group("g6e.2xlarge") == "G and VT"
    assert quota_group("p5.48xlarge") == quota_group("p4d.24xlarge") == "P"
    assert region_unusable("EndpointConnectionError") and not region_unusable("InsufficientInstanceCapacity")


def attempt(n, zone="us-west-2a", outcome="capacity", market="spot", itype="g6.xlarge"):
    return Attempt(number=n, region=zone[:-1], availability_zone=zone, instance_type=itype, market=market,
                   batch=4, launched=0, outcome=outcome, reason="InsufficientInstanceCapacity")


def test_all_spot_exhausted_names_every_pool_tried_and_the_on_demand_rerun():
    attempts = [attempt(1), attempt(2, "us-west-2b"), attempt(3, "us-east-1a")]
    cause = json.loads(exhaustion_cause(Run(batch=4, remaining=4), attempts, request(count=4), "spot"))
    assert cause["error"] == "ALL_SPOT_EXHAUSTED" and cause["launched"] == 0
    assert [p["pool"] for p in cause["pools_tried"]] == [
        "us-west-2/us-west-2a/g6.xlarge", "us-west-2/us-west-2b/g6.xlarge", "us-east-1/us-east-1a/g6.xlarge"]
    assert '"market": "on-demand"' in cause["hint"] and "latency" in cause["hint"]
    assert len(cause["attempts"]) == 3


def test_an_on_demand_cause_counts_only_on_demand_pools():
    attempts = [attempt(1), attempt(2, market="on-demand", outcome="quota")]
    cause = json.loads(exhaustion_cause(Run(batch=4, remaining=4), attempts, request(count=4), "on-demand"))
    assert cause["error"] == "ALL_ON_DEMAND_FAILED" and [p["outcome"] for p in cause["pools_tried"]] == ["quota"]
    assert "quota increase" in cause["hint"]


def test_a_cause_over_thousands_of_pools_stays_within_the_fail_states_limit():
    zones = [f"{r}{z}" for r in ("us-west-2", "us-east-1", "eu-central-1") for z in "abcdef"]
    types = [f"g6.{n}xlarge" for n in range(1, 40)]
    attempts = [attempt(n, zone, itype=t) for n, (zone, t) in enumerate(((z, t) for z in zones for t in types), 1)]
    text = exhaustion_cause(Run(batch=4, remaining=4), attempts, request(count=4), "spot")
    cause = json.loads(text)
    assert len(text) <= CAUSE_BUDGET and isinstance(cause["attempts"], str)
    # One line per region and type, with the AZs tried.
    assert len(cause["pools_tried"]) == 3 * len(types) and cause["pools_tried"][0]["zones"] == list("abcdef")


def test_launch_rejected_quotes_ec2_says_what_to_change_and_what_already_runs():
    refused = attempt(2, outcome="error").model_copy(update={"reason": "InvalidBlockDeviceMapping", "note": "too small"})
    run = Run(batch=4, remaining=2, launched=2, instances=[instance(1), instance(2)], step_attempts=[refused])
    cause = json.loads(rejection_cause(run, request(count=4)))
    assert (cause["error"], cause["code"]) == ("LAUNCH_REJECTED", "InvalidBlockDeviceMapping")
    assert "root_volume_gib" in cause["what_to_change"] and "too small" in cause["message"]
    assert cause["teardown"] == {"action": "teardown", "request_id": "r1"} and len(cause["instances"]) == 2


def test_provisioning_failed_lists_instances_from_the_table_and_the_state_once_each():
    recorded = [{"instance_id": instance(1).instance_id, "region": "us-west-2"},
                {"instance_id": instance(3).instance_id, "region": "us-east-1"}]
    run = Run(batch=4, remaining=2, launched=2, instances=[instance(1), instance(2)])
    cause = json.loads(failure_cause("r1", run, recorded, {"Error": "Sandbox.Timedout", "Cause": "killed"}))
    assert cause["error"] == "PROVISIONING_FAILED" and cause["failed_with"] == {"error": "Sandbox.Timedout", "cause": "killed"}
    assert sorted(i["instance_id"] for i in cause["instances"]) == sorted(instance(n).instance_id for n in (1, 2, 3))
    assert cause["teardown"]["request_id"] == "r1"
    nothing = json.loads(failure_cause("r1", Run(batch=1, remaining=1), [], {"Error": "TransientAwsError"}))
    assert "Nothing was launched" in nothing["message"] and "teardown" not in nothing


def test_a_result_lists_every_instance_and_the_newest_attempts():
    run = Run(batch=4, remaining=0, launched=2, hourly_cost=1.0, instances=[instance(1), instance(2)])
    attempts = [attempt(n) for n in range(1, 401)]
    result = fill_result(request(count=2), run, attempts, "FULFILLED")
    assert [a["number"] for a in result["attempts"]][:1] == [101] and result["attempts_total"] == 400
    assert all("connect" in i for i in result["instances"]) and "attempts_note" in result


def test_a_market_with_no_pool_at_all_says_nothing_offers_the_types():
    cause = json.loads(exhaustion_cause(Run(batch=1, remaining=1), [], request(count=1, instance_types=["p5.48xlarge"]), "spot"))
    assert cause["error"] == "ALL_SPOT_EXHAUSTED" and cause["pools_tried"] == []
    assert "offers p5.48xlarge" in cause["message"] and "none had capacity" not in cause["message"]
    assert "plan" in cause["hint"]


def test_vt_instances_share_the_g_quota_and_other_families_have_their_own():
    assert quota_group("vt1.3xlarge") == "G and VT"
    assert (quota_group("inf2.xlarge"), quota_group("trn1.32xlarge"), quota_group("dl1.24xlarge")) == ("I", "T", "D")


@pytest.mark.parametrize("code", ["KMSKeyNotAccessibleFault", "Client.InvalidKMSKey.InvalidState", "KMS.NotFoundException"])
def test_any_kms_refusal_stops_the_run(code):
    assert is_rejection(code)


def test_the_boot_wait_gives_up_after_twenty_rounds():
    """Twenty rounds with the state machine's 15 s pause: about five minutes, as the docs promise."""
    pending = {instance(1).instance_id: {"state": "pending", "private_ip": None}}
    at = lambda rounds: boot.settle(Run(batch=1, remaining=0, launched=1, instances=[instance(1)], boot_rounds=rounds), pending)  # noqa: E731
    assert (at(18).next, at(18).boot_rounds) == ("wait", 19)
    assert (at(19).next, at(19).boot_rounds) == ("ready", 20)


def test_the_hourly_cost_after_boot_adds_the_known_prices_of_the_instances_kept():
    kept = [instance(1).model_copy(update={"hourly_price": 0.123456}), instance(2).model_copy(update={"hourly_price": None}),
            instance(3)]
    run = Run(batch=3, remaining=0, launched=3, instances=kept)
    settled = boot.settle(run, {instance(3).instance_id: {"state": "terminated", "private_ip": None}})
    assert (settled.hourly_cost, settled.launched, settled.remaining) == (0.1235, 2, 1)


def test_an_instance_in_a_capacity_block_costs_nothing_by_the_hour_its_block_was_paid_upfront():
    block = instance(2, capacity_reservation_id="cr-0123456789abcdef0", capacity_block_fee=1390.0)
    assert boot.hourly_cost([instance(1), block]) == 0.5
    run = Run(batch=2, remaining=0, launched=2, instances=[instance(1), block])
    settled = boot.settle(run, {i.instance_id: {"state": "running", "private_ip": None} for i in run.instances})
    assert settled.hourly_cost == 0.5
