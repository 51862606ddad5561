"""The launch step's calls (adapters/launch_calls.py), made as policy decided them: the cluster
groups first, then the intent, then the one RunInstances or CreateFleet with the region's fixed
settings; a pool without a subnet answered without a call. AWS is replaced by recorders."""

import pytest

from gpufill.adapters import ec2, fleet_launch, launch_calls, placement_groups, run_store
from gpufill.models.request import Request, normalise
from gpufill.models.run import FleetAnswer, Instance, LaunchResult, Pool, RegionLaunch, Run, TemplateVersion
from gpufill.policy import launch_step as moves
from gpufill.policy.tokens import client_token

REGION = "us-west-2"
SETUP = RegionLaunch(region=REGION, image_id="ami-1", root_volume_gib=250, security_group_id="sg-1",
                     subnets={"us-west-2a": "subnet-a", "us-west-2b": "subnet-b"})
A = Pool(region=REGION, availability_zone="us-west-2a", instance_type="g6.xlarge", market="spot", price=0.4)
B = Pool(region=REGION, availability_zone="us-west-2b", instance_type="g6.xlarge", market="spot", price=0.5)
NO_SUBNET = Pool(region=REGION, availability_zone="us-west-2c", instance_type="g6.xlarge", market="spot", price=0.3)
EFA = Pool(region=REGION, availability_zone="us-west-2a", instance_type="g6.12xlarge", market="spot", price=2.0)
SPEC = ec2.LaunchSpec(image_id="ami-1", request_id="req-1", deployment="prod", security_group_ids=("sg-1",), root_volume_gib=250)


def request(**fields):
    return normalise(Request(**{"count": 4, "regions": [REGION], "launch_mode": "exact", **fields}), request_id="req-1",
                     default_regions=[REGION], home_region="us-east-1")


def decided(req, pools, batch=3, cursor=0):
    run = Run(batch=batch, remaining=4, next="launch", attempts_total=4, cursor=cursor, launch=SETUP)
    return moves.decide(run, pools, req, made=0, state_machine="arn:sm", deployment="prod")


@pytest.fixture
def aws(monkeypatch):
    asked: list[tuple] = []
    monkeypatch.setattr(run_store, "record_intent", lambda **kw: asked.append(("intent", kw)))
    monkeypatch.setattr(placement_groups, "ensure", lambda region, group, **kw: asked.append(("group", region, group, kw)))

    def launch(pool, **kw):
        asked.append(("launch", pool.key, kw))
        return LaunchResult(outcome="launched", instances=[Instance(
            instance_id="i-1", region=REGION, availability_zone=pool.availability_zone, instance_type=pool.instance_type,
            market=pool.market, hourly_price=pool.price)])

    monkeypatch.setattr(ec2, "launch", launch)
    monkeypatch.setattr(fleet_launch, "launch", lambda call, spec, token, **kw: asked.append(("fleet", call, spec, token)) or FleetAnswer())
    return asked


def test_a_batch_writes_its_intent_then_launches_with_the_regions_settings(aws):
    answer = launch_calls.make(decided(request(), [A, B], cursor=1), SPEC)
    token = client_token("arn:sm", "req-1", 5)
    assert [i.instance_id for i in answer.answer.instances] == ["i-1"] and answer.grouped is None
    [intent, (kind, key, kw)] = aws
    assert intent == ("intent", {"request_id": "req-1", "region": REGION, "client_token": token}) and (kind, key) == ("launch", B.key)
    assert (kw["min_count"], kw["max_count"], kw["client_token"]) == (3, 3, token)
    spec = kw["spec"]
    assert (spec.subnet_id, spec.image_id, spec.root_volume_gib, spec.security_group_ids) == ("subnet-b", "ami-1", 250, ("sg-1",))
    assert (spec.request_id, spec.deployment, spec.placement_group, spec.reservations_off) == ("req-1", "prod", None, False)


def test_a_partial_request_takes_whatever_part_of_the_batch_ec2_has(aws):
    launch_calls.make(decided(request(launch_mode="partial"), [A], batch=4), SPEC)
    assert (aws[-1][2]["min_count"], aws[-1][2]["max_count"]) == (1, 4)


def test_a_pool_without_a_subnet_is_answered_without_an_intent_or_a_call(aws):
    answer = launch_calls.make(decided(request(placement="same-az", instance_types=["g6.12xlarge"]), [NO_SUBNET]), SPEC).answer
    assert (answer.outcome, answer.reason, answer.message) == ("error", "NoSubnet", "no subnet to launch into in us-west-2c")
    assert aws == []


def test_a_same_az_gang_of_efa_types_launches_into_its_cluster_group_made_first(aws):
    answer = launch_calls.make(decided(request(placement="same-az"), [EFA]), SPEC)
    assert answer.grouped == REGION  # the step removes it later if the run leaves the region
    group = "gpufill-prod-req-1-us-west-2a"
    assert aws[0] == ("group", REGION, group, {"request_id": "req-1", "deployment": "prod"})
    assert aws[1][0] == "intent" and aws[2][2]["spec"].placement_group == group
    aws.clear()
    assert launch_calls.make(decided(request(placement="same-az"), [A]), SPEC).grouped is None  # no EFA: no group
    assert [a[0] for a in aws] == ["intent", "launch"]


def test_a_fleet_call_carries_what_policy_decided_and_the_step_settings(aws):
    other = EFA.model_copy(update={"availability_zone": "us-west-2b"})
    req = request(launch_mode="fleet", market="on-demand", capacity_reservations="none", placement="same-az", all_or_nothing=True)
    pools = [p.model_copy(update={"market": "on-demand"}) for p in (EFA, EFA.model_copy(update={"instance_type": "g6.48xlarge"}), other)]
    answer = launch_calls.make(decided(req, pools), SPEC)
    assert answer.grouped == REGION and answer.answer == FleetAnswer()
    assert [a[2] for a in aws if a[0] == "group"] == ["gpufill-prod-req-1-us-west-2a", "gpufill-prod-req-1-us-west-2b"]
    [(_, call, spec, token)] = [a for a in aws if a[0] == "fleet"]
    assert [a[0] for a in aws] == ["group", "group", "intent", "fleet"]
    assert token == client_token("arn:sm", "req-1", 5)
    assert (call.region, call.market, call.target, call.min_target, call.single_zone) == (REGION, "on-demand", 4, 4, True)
    assert call.pools == [(0, pools[0]), (1, pools[1]), (2, pools[2])] and call.subnets == SETUP.subnets
    assert call.strategy == "lowest-price" and spec.reservations_off is True and spec.subnet_id is None


def test_a_runs_versions_are_retired_by_region_except_a_default_one(monkeypatch):
    retired = []
    monkeypatch.setattr(fleet_launch, "retire_versions", lambda region, versions: retired.append((region, versions)))
    mine = TemplateVersion(region=REGION, token="t1", template_id="lt-1", version="7")
    east = TemplateVersion(region="us-east-1", token="t2", template_id="lt-2", version="3")
    default = TemplateVersion(region=REGION, token="t3", template_id="lt-1", version="1", default=True)
    after = launch_calls.retire(Run(batch=1, remaining=0, template_versions=[mine, east, default]))
    assert retired == [("us-east-1", [east]), (REGION, [mine])] and after.template_versions == []
    launch_calls.retire(after)
    assert len(retired) == 2


def test_a_step_that_decided_no_call_sends_none(aws):
    done = decided(request(), [A])
    with pytest.raises(ValueError, match="^the step decided no call$"):
        launch_calls.make(moves.LaunchStep(run=done.run, call=None, settings=done.settings, records=done.records, rules=done.rules), SPEC)
    assert aws == []
