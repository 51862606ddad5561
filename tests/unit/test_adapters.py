"""Adapter behaviour that needs no AWS: fallbacks, retries once, chunking. AWS itself is faked in-process."""

import pytest
from botocore.exceptions import ClientError, EndpointConnectionError

from gpufill.adapters import clock, ec2, placement_scores, spot_advisor
from gpufill.adapters.aws import TransientAwsError
from gpufill.models.run import Pool

POOL = Pool(region="us-west-2", availability_zone="us-west-2a", instance_type="g6.xlarge", market="spot", price=0.4)
SPEC = ec2.LaunchSpec(image_id="ami-stale", request_id="r1")


def client_error(code: str) -> ClientError:
    return ClientError({"Error": {"Code": code, "Message": code}}, "RunInstances")


def test_spot_advisor_failure_means_unknown_tiers_and_is_fetched_once(monkeypatch):
    calls = []

    def unreachable():
        calls.append(1)
        raise TimeoutError("timed out after 3 s")

    monkeypatch.setattr(spot_advisor, "fetch_document", unreachable)
    spot_advisor.reset()
    assert spot_advisor.tier("us-west-2", "g6.xlarge") is None
    assert spot_advisor.tier("us-east-1", "g5.xlarge") is None
    assert calls == [1]
    spot_advisor.reset({"spot_advisor": {"us-west-2": {"Linux": {"g6.xlarge": {"s": 70, "r": 1}}}}})
    assert spot_advisor.tier("us-west-2", "g6.xlarge") == 1
    spot_advisor.reset()


def test_a_stale_ami_is_reported_for_the_policy_to_resolve_again(monkeypatch):
    sent = []

    def run_instances(pool, *, min_count, max_count, client_token, spec):
        sent.append((spec.image_id, client_token))
        raise client_error("InvalidAMIID.NotFound")

    monkeypatch.setattr(ec2, "run_instances", run_instances)
    result = ec2.launch(POOL, min_count=1, max_count=1, client_token="t", spec=SPEC)
    # One call only: the relaunch with a fresh image is a step of its own, with its own token.
    assert sent == [("ami-stale", "t")]
    assert (result.outcome, result.reason, result.instances) == ("error", "InvalidAMIID.NotFound", [])


def test_ec2_error_codes_classify_as_documented(monkeypatch):
    for code, outcome in [("InsufficientInstanceCapacity", "capacity"), ("InsufficientCapacity", "capacity"),
                          ("Unsupported", "capacity"), ("VcpuLimitExceeded", "quota"),
                          ("MaxSpotInstanceCountExceeded", "quota"), ("InstanceLimitExceeded", "quota"),
                          ("InvalidParameterValue", "error"), ("UnauthorizedOperation", "error")]:
        monkeypatch.setattr(ec2, "run_instances", lambda *a, _c=code, **k: (_ for _ in ()).throw(client_error(_c)))
        result = ec2.launch(POOL, min_count=1, max_count=4, client_token="t", spec=SPEC)
        assert (result.outcome, result.reason, result.instances) == (outcome, code, [])


def test_an_unsettled_launch_is_looked_up_by_its_token_before_anything_moves(monkeypatch):
    monkeypatch.setattr(ec2, "run_instances", lambda *a, **k: (_ for _ in ()).throw(
        ClientError({"Error": {"Code": "InternalError", "Message": "boom"}, "ResponseMetadata": {"HTTPStatusCode": 500}},
                    "RunInstances")))
    looked_up = []

    def instances_with_token(region, token):
        looked_up.append((region, token))
        return [{"InstanceId": "i-0launchedanyway", "Placement": {"AvailabilityZone": "us-west-2a"}}]

    monkeypatch.setattr(ec2, "instances_with_token", instances_with_token)
    result = ec2.launch(POOL, min_count=1, max_count=4, client_token="t", spec=SPEC)
    assert looked_up == [("us-west-2", "t")]
    assert result.outcome == "launched" and [i.instance_id for i in result.instances] == ["i-0launchedanyway"]


def test_a_throttled_launch_that_found_nothing_is_retried_never_read_as_capacity(monkeypatch):
    monkeypatch.setattr(ec2, "run_instances", lambda *a, **k: (_ for _ in ()).throw(client_error("RequestLimitExceeded")))
    monkeypatch.setattr(ec2, "instances_with_token", lambda region, token: [])
    with pytest.raises(TransientAwsError, match="same call will be sent again"):
        ec2.launch(POOL, min_count=1, max_count=4, client_token="t", spec=SPEC)


def test_a_region_whose_endpoint_cannot_be_reached_launched_nothing(monkeypatch):
    error = EndpointConnectionError(endpoint_url="https://ec2.us-west-2.amazonaws.com/")
    monkeypatch.setattr(ec2, "run_instances", lambda *a, **k: (_ for _ in ()).throw(error))
    result = ec2.launch(POOL, min_count=1, max_count=4, client_token="t", spec=SPEC)
    assert (result.outcome, result.reason, result.instances) == ("error", "EndpointConnectionError", [])


def test_placement_scores_are_asked_once_for_every_type_and_region_and_kept(monkeypatch):
    asked = []

    class Paginator:
        def paginate(self, **params):
            asked.append((params["InstanceTypes"], params["RegionNames"], params["TargetCapacity"]))
            return [{"SpotPlacementScores": [
                {"Region": r, "AvailabilityZoneId": f"{r}-az1", "Score": 7} for r in params["RegionNames"][:10]]}]

    class Client:
        def get_paginator(self, name):
            assert name == "get_spot_placement_scores"
            return Paginator()

    monkeypatch.setattr(placement_scores, "client", lambda service, region: Client())
    monkeypatch.delenv("CAPACITY_TABLE", raising=False)
    placement_scores.reset()
    regions = [f"r-{n:02d}" for n in range(15)]
    found = placement_scores.scores(["g6.xlarge", "g5.xlarge", "g6e.xlarge"], 16, regions)
    again = placement_scores.scores(["g6e.xlarge", "g5.xlarge", "g6.xlarge"], 16, list(reversed(regions)))
    # One call per 10 regions scores the whole set of types; the same configuration is not asked twice.
    types = ["g5.xlarge", "g6.xlarge", "g6e.xlarge"]
    assert asked == [(types, regions[:10], 16), (types, regions[10:], 16)]
    assert found == again and len(found) == 15 and found[("r-14", "r-14-az1")] == 7
    # Kept for KEEP_SECONDS of the runs' clock (modelled on the local engine), then asked again.
    clock.fast_forward(placement_scores.KEEP_SECONDS)
    try:
        placement_scores.scores(types, 16, regions)
    finally:
        clock.reset()
    assert len(asked) == 4


def test_placement_score_regions_go_in_sorted_calls_of_at_most_10():
    regions = [f"r-{n:02d}" for n in range(40)] + ["r-03"]
    chunks = placement_scores.region_chunks(list(reversed(regions)))
    assert [len(c) for c in chunks] == [10, 10, 10, 10]
    assert sum(chunks, []) == sorted(set(regions))
    assert placement_scores.region_chunks(["b", "a"]) == [["a", "b"]]
    assert placement_scores.region_chunks([]) == []


def test_region_level_placement_scores_are_asked_apart_and_keyed_by_region(monkeypatch):
    asked = []

    class Paginator:
        def paginate(self, **params):
            asked.append(params["SingleAvailabilityZone"])
            if params["SingleAvailabilityZone"]:
                return [{"SpotPlacementScores": [{"Region": "us-west-2", "AvailabilityZoneId": "usw2-az1", "Score": 2}]}]
            return [{"SpotPlacementScores": [{"Region": "us-west-2", "Score": 3}, {"Region": "us-east-1", "Score": 1}]}]

    class Client:
        def get_paginator(self, name):
            return Paginator()

    monkeypatch.setattr(placement_scores, "client", lambda service, region: Client())
    monkeypatch.delenv("CAPACITY_TABLE", raising=False)
    placement_scores.reset()
    regions = ["us-west-2", "us-east-1"]
    assert placement_scores.region_scores(["g6.xlarge"], 4, regions) == {"us-west-2": 3, "us-east-1": 1}
    assert placement_scores.scores(["g6.xlarge"], 4, regions) == {("us-west-2", "usw2-az1"): 2}
    assert placement_scores.region_scores(["g6.xlarge"], 4, regions) == {"us-west-2": 3, "us-east-1": 1}
    # Two levels, two configurations, each asked once.
    assert asked == [False, True]


def test_placement_scores_denied_means_none(monkeypatch):
    class Denied:
        def get_paginator(self, name):
            raise ClientError({"Error": {"Code": "UnauthorizedOperation", "Message": "no"}}, "GetSpotPlacementScores")

    monkeypatch.setattr(placement_scores, "client", lambda service, region: Denied())
    placement_scores.reset()
    assert placement_scores.scores(["g6.xlarge"], 4, ["us-west-2"]) is None
