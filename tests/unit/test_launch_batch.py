"""LaunchBatch's own work (handlers/launch_batch.py): policy's calls made in turn, every launched
instance recorded under the request that owns it before anything else happens, the pools found
empty remembered, and a fleet's template version retired only once its instances are recorded.
AWS is replaced by recorders of what the handler asks the adapters for."""

import base64
import json
import logging
from datetime import UTC, datetime

import pytest

from gpufill.adapters import capacity_cache, instances_table, launch_calls, placement_groups, run_store
from gpufill.handlers import launch_batch
from gpufill.handlers.events import LoopEvent
from gpufill.models.request import Refill, Request, normalise
from gpufill.models.run import FleetAnswer, Instance, LaunchResult, PlanRef, Pool, PoolAnswer, RegionLaunch, Run, TemplateVersion, Waiting
from gpufill.policy import fill
from gpufill.policy import launch_step as moves
from gpufill.policy.tokens import client_token

REGION = "us-west-2"
SETUP = RegionLaunch(region=REGION, image_id="ami-1", root_volume_gib=250, security_group_id="sg-1",
                     subnets={"us-west-2a": "subnet-a", "us-west-2b": "subnet-b"})
A = Pool(region=REGION, availability_zone="us-west-2a", instance_type="g6.xlarge", market="spot", price=0.4)
B = Pool(region=REGION, availability_zone="us-west-2b", instance_type="g6.xlarge", market="spot", price=0.5)
NO_SUBNET = Pool(region=REGION, availability_zone="us-west-2c", instance_type="g6.xlarge", market="spot", price=0.3)
EFA = Pool(region=REGION, availability_zone="us-west-2a", instance_type="g6.12xlarge", market="spot", price=2.0)


def request(**fields):
    return normalise(Request(**{"count": 4, "regions": [REGION], **fields}), request_id="req-1",
                     default_regions=[REGION], home_region="us-east-1")


def instance(iid: str, pool: Pool = A) -> Instance:
    return Instance(instance_id=iid, region=pool.region, availability_zone=pool.availability_zone,
                    instance_type=pool.instance_type, market=pool.market, hourly_price=pool.price)


@pytest.fixture
def aws(monkeypatch):
    """What the handler asked AWS for, in order."""
    asked: list[tuple] = []
    monkeypatch.setenv("GPUFILL_DEPLOYMENT", "prod")
    monkeypatch.setenv("STARTUP_BUCKET", "startup-bucket")
    monkeypatch.setenv("AWS_REGION", "eu-central-1")
    monkeypatch.setenv("INSTANCE_PROFILE_ARN", "arn:aws:iam::1:instance-profile/gpufill")
    monkeypatch.setenv("EBS_KMS_KEY_ARN", "arn:aws:kms:eu-central-1:1:key/k")
    monkeypatch.setattr(run_store, "record_intent", lambda **kw: asked.append(("intent", kw)))
    monkeypatch.setattr(instances_table, "record_launched", lambda instances, **kw: asked.append(
        ("record", [i.instance_id for i in instances], kw)))
    monkeypatch.setattr(instances_table, "mark_replaced", lambda ids, new: asked.append(("replaced", ids, new)))
    monkeypatch.setattr(capacity_cache, "remember_full", lambda key, **kw: asked.append(("full", key, kw)))
    monkeypatch.setattr(placement_groups, "ensure", lambda region, group, **kw: asked.append(("group", region, group, kw)))
    monkeypatch.setattr(placement_groups, "remove_empty", lambda region, deployment, ids: asked.append(("tidy", region, deployment, ids)))
    monkeypatch.setattr(run_store, "save_attempts", lambda rid, attempts: None)
    monkeypatch.setattr(run_store, "load_attempts", lambda rid, total: [])
    return asked


def records(req):
    """What policy decides every instance of `req` is recorded with."""
    run = Run(batch=1, remaining=1, next="launch", launch=SETUP)
    return moves.decide(run, [A], req, made=0, state_machine="arn:sm", deployment="prod").records


PLAN = PlanRef(request_id="req-1", market="spot", key="plan#req-1#k", pools=2)


def test_every_instance_starts_with_its_settings_user_data_and_encryption_key(aws):
    req = request(tags={"team": "ml"}, model_id="org/model")
    spec = launch_batch.launch_spec(moves.decide(Run(batch=1, remaining=1, launch=SETUP), [A], req, made=0, state_machine="arn:sm",
                                                 deployment="prod").settings, SETUP, "prod")
    assert spec.user_tags == {"team": "ml"} and (spec.request_id, spec.deployment, spec.image_id) == ("req-1", "prod", "ami-1")
    assert (spec.root_volume_gib, spec.security_group_ids) == (250, ("sg-1",))
    assert spec.instance_profile_arn == "arn:aws:iam::1:instance-profile/gpufill"
    assert spec.kms_key_id == "arn:aws:kms:eu-central-1:1:key/k"
    script = spec.user_data
    assert "startup-bucket" in script and "eu-central-1" in script and "org/model" in script


def test_unset_settings_are_left_out_rather_than_sent_empty(aws, monkeypatch):
    monkeypatch.setenv("INSTANCE_PROFILE_ARN", "")
    monkeypatch.setenv("EBS_KMS_KEY_ARN", "")
    monkeypatch.delenv("AWS_REGION")
    spec = launch_batch.launch_spec(settings(), SETUP.model_copy(update={"security_group_id": None}), "")
    assert (spec.instance_profile_arn, spec.kms_key_id, spec.security_group_ids, spec.deployment) == (None, None, (), "")
    assert "us-east-1" in spec.user_data  # the local engine's home region
    monkeypatch.delenv("INSTANCE_PROFILE_ARN")
    monkeypatch.delenv("EBS_KMS_KEY_ARN")
    spec = launch_batch.launch_spec(settings(), SETUP, "")
    assert (spec.instance_profile_arn, spec.kms_key_id) == (None, None)


def settings(**fields):
    return moves.decide(Run(batch=1, remaining=1, launch=SETUP), [A], request(**fields), made=0, state_machine="arn:sm",
                        deployment="").settings


def test_launched_instances_are_recorded_under_their_token_and_nothing_else_is_recorded(aws):
    launch_batch.keep([], records(request()), "tok", "arn:aws:states:us-east-1:123456789012:stateMachine:gpufill-local")
    assert aws == []
    launch_batch.keep([instance("i-1"), instance("i-2")], records(request()), "tok-3", "arn:aws:states:us-east-1:123456789012:stateMachine:gpufill-local")
    assert aws == [("record", ["i-1", "i-2"], {"request_id": "req-1", "client_token": "tok-3", "maintain": False, "replaces": None, "lifetime_expires_at": None})]


def test_a_refills_instances_belong_to_its_request_and_name_what_they_replace(aws):
    refill = request(maintain=True, refill=Refill(request_id="req-0", replaces=["i-0123456789abcdef0"]))
    launch_batch.keep([instance("i-new")], records(refill), "tok", "arn:aws:states:us-east-1:123456789012:stateMachine:gpufill-local")
    assert aws == [("record", ["i-new"], {"request_id": "req-0", "client_token": "tok", "maintain": True, "replaces": ["i-0123456789abcdef0"], "lifetime_expires_at": None}),
                   ("replaced", ["i-0123456789abcdef0"], ["i-new"])]


# --- a fleet ----------------------------------------------------------------------------------------


def fleet_step(**fields):
    req = request(launch_mode="fleet", **fields)
    run = Run(batch=2, remaining=4, next="launch", attempts_total=6, launch=SETUP)
    return LoopEvent(request=req, run=run, state_machine="arn:sm"), req, run


def through(req, pools, run, context=None) -> Run:
    """One LaunchBatch step of `req` over `pools`, from `run`, as the handler sequences it."""
    step = LoopEvent(request=req, run=run, state_machine="arn:sm")
    return Run.model_validate(launch_batch.launch_step(step, req, PLAN, pools, fill.begin_step(run), context or Clock(100_000)))


VERSION = TemplateVersion(region=REGION, token="lt-token", template_id="lt-1", version="7")


def test_a_fleet_asks_for_everything_missing_over_the_regions_pools_and_keeps_its_version_for_the_next(aws, monkeypatch):
    step, req, run = fleet_step()
    calls = []

    def launch(call, spec, token, *, run_id, versions):
        aws.append(("fleet", token))
        calls.append((call, spec, run_id, versions))
        return FleetAnswer(template_version=VERSION, answers=[
            PoolAnswer(index=0, result=LaunchResult(outcome="launched", instances=[instance("i-1"), instance("i-2")])),
            PoolAnswer(index=1, result=LaunchResult(outcome="capacity", reason="InsufficientInstanceCapacity"))])

    monkeypatch.setattr(launch_calls.fleet_launch, "launch", launch)
    monkeypatch.setattr(launch_calls.fleet_launch, "retire_versions", lambda region, versions: aws.append(("retire", region)))
    after = through(req, [A, B], run)
    token = client_token("arn:sm", "req-1", 7)
    assert aws == [("intent", {"request_id": "req-1", "region": REGION, "client_token": token}), ("fleet", token),
                   ("record", ["i-1", "i-2"], {"request_id": "req-1", "client_token": token, "maintain": False, "replaces": None, "lifetime_expires_at": None}),
                   ("full", B.key, {"request_id": "req-1", "reason": "capacity"})]
    [(call, spec, run_id, versions)] = calls
    assert (run_id, versions) == ("req-1", []) and after.template_versions == [VERSION]
    assert (call.region, call.market, call.target, call.pools) == (REGION, "spot", 4, [(0, A), (1, B)])
    assert call.subnets == SETUP.subnets and call.strategy == "price-capacity-optimized"
    assert (call.single_zone, call.min_target, call.placement_groups) == (False, None, {})
    assert spec.image_id == "ami-1" and spec.subnet_id is None
    assert after.launched == 2 and [i.instance_id for i in after.instances] == ["i-1", "i-2"]


def test_a_fleet_whose_records_fail_keeps_its_template_version_for_the_retry(aws, monkeypatch):
    step, req, run = fleet_step()
    monkeypatch.setattr(launch_calls.fleet_launch, "launch", lambda call, spec, token, **kw: FleetAnswer(
        template_version=VERSION, answers=[PoolAnswer(index=0, result=LaunchResult(outcome="launched", instances=[instance("i-1")]))]))
    monkeypatch.setattr(launch_calls.fleet_launch, "retire_versions", lambda *a: pytest.fail("retired before the records"))

    def unrecordable(instances, **kw):
        raise instances_table.InstanceRecordError("could not record")

    monkeypatch.setattr(instances_table, "record_launched", unrecordable)
    with pytest.raises(instances_table.InstanceRecordError):
        through(req, [A, B], run)


def test_a_fleet_without_a_version_of_its_own_retires_nothing(aws, monkeypatch):
    step, req, run = fleet_step()
    monkeypatch.setattr(launch_calls.fleet_launch, "launch", lambda call, spec, token, **kw: FleetAnswer(
        failure=LaunchResult(outcome="error", reason="EndpointConnectionError")))
    monkeypatch.setattr(launch_calls.fleet_launch, "retire_versions", lambda *a: pytest.fail("nothing to retire"))
    after = through(req, [A, B], run)
    assert after.launched == 0 and [a[0] for a in aws] == ["intent"]


def test_a_step_that_ends_the_run_retires_its_versions_and_one_that_goes_on_keeps_them(aws, monkeypatch):
    step, req, run = fleet_step()
    monkeypatch.setattr(launch_calls.fleet_launch, "launch", lambda call, spec, token, **kw: FleetAnswer(
        template_version=VERSION, answers=[PoolAnswer(index=i, result=LaunchResult(
            outcome="capacity", reason="InsufficientInstanceCapacity")) for i in (0, 1)]))
    retired = []
    monkeypatch.setattr(launch_calls.fleet_launch, "retire_versions", lambda region, versions: retired.append(versions))
    after = through(req, [A, B], run)  # nothing launched, nothing left: ALL_SPOT_EXHAUSTED
    assert after.next == "exhausted" and retired == [[VERSION]] and after.template_versions == []
    retired.clear()
    waiting = run.model_copy(update={"wait": Waiting(deadline="2030-01-01T00:00:00Z", deadline_epoch=1.9e9)})
    assert through(req, [A, B], waiting).template_versions == [VERSION] and retired == []


def test_an_all_or_nothing_same_az_gang_fleet_asks_one_zone_all_at_once_in_its_cluster_group(aws, monkeypatch):
    step, req, run = fleet_step(placement="same-az", all_or_nothing=True, instance_types=["g6.12xlarge"])
    other = EFA.model_copy(update={"availability_zone": "us-west-2b"})
    twin = EFA.model_copy(update={"instance_type": "g6.48xlarge"})
    calls = []
    monkeypatch.setattr(launch_calls.fleet_launch, "launch", lambda call, spec, token, **kw: calls.append(call) or FleetAnswer())
    through(req, [EFA, twin, other], run)
    assert ("tidy", REGION, "prod", {"req-1"}) in aws  # the run left the region: its empty groups go
    [call] = calls
    assert call.single_zone is True and call.min_target == 4
    assert call.placement_groups == {"us-west-2a": "gpufill-prod-req-1-us-west-2a", "us-west-2b": "gpufill-prod-req-1-us-west-2b"}
    groups = [a for a in aws if a[0] == "group"]
    assert [g[2] for g in groups] == ["gpufill-prod-req-1-us-west-2a", "gpufill-prod-req-1-us-west-2b"]
    assert groups[0][3] == {"request_id": "req-1", "deployment": "prod"}


def test_the_user_data_is_the_startup_script_base64_encoded_once(aws):
    from gpufill.adapters.ec2 import instance_settings
    spec = launch_batch.launch_spec(settings(), SETUP, "prod")
    assert base64.b64decode(instance_settings(spec)["UserData"]).decode() == spec.user_data


def test_every_recorded_launch_counts_toward_the_instances_launched_metric(aws, monkeypatch):
    counted = []
    monkeypatch.setattr(launch_batch.metrics, "add_metric", lambda **kw: counted.append(kw))
    launch_batch.keep([], records(request()), "tok", "arn:aws:states:us-east-1:123456789012:stateMachine:gpufill-local")
    launch_batch.keep([instance("i-1"), instance("i-2")], records(request()), "tok", "arn:aws:states:us-east-1:123456789012:stateMachine:gpufill-local")
    assert counted == [{"name": "InstancesLaunched", "unit": "Count", "value": 2}]


def test_without_a_deployment_name_the_gangs_cluster_group_has_an_empty_one(aws, monkeypatch):
    monkeypatch.delenv("GPUFILL_DEPLOYMENT")
    monkeypatch.setattr(launch_calls.ec2, "launch", lambda pool, **kw: LaunchResult(outcome="capacity"))
    through(request(placement="same-az", launch_mode="exact"), [EFA], Run(batch=1, remaining=1, next="launch", launch=SETUP))
    step, req, run = fleet_step(placement="same-az", instance_types=["g6.12xlarge"])
    monkeypatch.setattr(launch_calls.fleet_launch, "launch", lambda call, spec, token, **kw: FleetAnswer())
    through(req, [EFA], run)
    groups = [a for a in aws if a[0] == "group"]
    assert [(g[1], g[2], g[3]["deployment"]) for g in groups] == [(REGION, "gpufill--req-1-us-west-2a", "")] * 2


def test_an_on_demand_fleet_asks_ec2_to_pick_as_the_request_says(aws, monkeypatch):
    on_demand = [A.model_copy(update={"market": "on-demand"}), B.model_copy(update={"market": "on-demand"})]
    calls = []
    monkeypatch.setattr(launch_calls.fleet_launch, "launch", lambda call, spec, token, **kw: calls.append(call) or FleetAnswer())
    for strategy in ("cost", "latency"):
        step, req, run = fleet_step(market="on-demand", on_demand_strategy=strategy)
        through(req, on_demand, run)
    assert [(c.market, c.strategy) for c in calls] == [("on-demand", "lowest-price"), ("on-demand", "prioritized")]


def test_what_a_fleet_answered_is_logged_for_the_operator(aws, monkeypatch, caplog):
    caplog.set_level("INFO")
    step, req, run = fleet_step()
    answers = iter([
        FleetAnswer(answers=[PoolAnswer(index=0, result=LaunchResult(outcome="launched", instances=[instance("i-1")]))]),
        FleetAnswer(failure=LaunchResult(outcome="quota", reason="VcpuLimitExceeded")),
    ])
    monkeypatch.setattr(launch_calls.fleet_launch, "launch", lambda call, spec, token, **kw: next(answers))
    through(req, [A, B], run)
    through(req, [A, B], run)
    logged = [r for r in caplog.records if r.getMessage() == "fleet answered"]
    assert [(r.region, r.pools, r.target, r.launched, r.failure) for r in logged] == [
        (REGION, 2, 4, 1, None), (REGION, 2, 4, 0, "VcpuLimitExceeded")]


# --- a refill whose request's teardown was asked while it ran --------------------------------------


def refill_run(*instances: Instance) -> tuple:
    req = request(maintain=True, count=1, refill=Refill(request_id="req-0", replaces=["i-0123456789abcdef0"]))
    run = Run(batch=1, remaining=0, next="done", launched=len(instances), instances=list(instances), hourly_cost=0.4)
    return req, run


@pytest.fixture
def ended(monkeypatch):
    """What refill_stopped terminated and recorded, in order."""
    from datetime import UTC, datetime

    done: list[tuple] = []
    monkeypatch.setattr(launch_batch.clock, "now", lambda: datetime(2026, 12, 4, 12, tzinfo=UTC))
    monkeypatch.setattr(launch_batch.managed_instances, "terminate", lambda region, ids: done.append(("terminate", region, ids)))
    monkeypatch.setattr(instances_table, "mark_rolled_back", lambda iid, **kw: done.append(("rolled_back", iid, kw)))
    return done


def test_a_stopped_refill_terminates_what_it_launched_and_records_it_under_its_request(ended):
    east = Pool(region="us-east-1", availability_zone="us-east-1a", instance_type="g6.xlarge", market="spot", price=0.4)
    req, run = refill_run(instance("i-b"), instance("i-e", east), instance("i-a"))
    stopped = launch_batch.refill_stopped(run, req, "req-0-teardown")
    at = {"terminated_at": launch_batch.clock.now(), "reason": "refill stopped: teardown req-0-teardown of the request was asked while it ran"}
    assert ended == [
        ("terminate", "us-east-1", ["i-e"]),
        ("rolled_back", "i-e", {"region": "us-east-1", "request_id": "req-0", **at}),
        ("terminate", REGION, ["i-a", "i-b"]),
        ("rolled_back", "i-a", {"region": REGION, "request_id": "req-0", **at}),
        ("rolled_back", "i-b", {"region": REGION, "request_id": "req-0", **at}),
    ]
    assert (stopped.next, stopped.instances, stopped.launched, stopped.hourly_cost) == ("stopped", [], 0, 0.0)
    assert stopped.cause == (
        "teardown req-0-teardown of request req-0 was asked while this refill ran: nothing more is launched; "
        "the 3 instance(s) it launched were terminated unused: i-a, i-b, i-e"
    )


def test_a_refill_stopped_before_it_launched_terminates_nothing(ended):
    req, run = refill_run()
    stopped = launch_batch.refill_stopped(run, req, "td")
    assert ended == [] and stopped.next == "stopped"
    assert stopped.cause == "teardown td of request req-0 was asked while this refill ran: nothing more is launched"


def test_an_instance_ec2_does_not_show_yet_retries_the_step_and_other_refusals_are_raised(ended, monkeypatch):
    from botocore.exceptions import ClientError

    from gpufill.adapters.aws import TransientAwsError

    def refuse(code):
        def terminate(region, ids):
            raise ClientError({"Error": {"Code": code, "Message": "no"}}, "TerminateInstances")
        return terminate

    req, run = refill_run(instance("i-a"))
    monkeypatch.setattr(launch_batch.managed_instances, "terminate", refuse("InvalidInstanceID.NotFound"))
    with pytest.raises(TransientAwsError, match="not visible yet"):
        launch_batch.refill_stopped(run, req, "td")
    monkeypatch.setattr(launch_batch.managed_instances, "terminate", refuse("UnauthorizedOperation"))
    with pytest.raises(ClientError, match="UnauthorizedOperation"):
        launch_batch.refill_stopped(run, req, "td")
    assert ended == []  # nothing is recorded ended that EC2 did not end


# --- the step itself: the plan loaded, a maintained request kept, a refill stopped before or after ----


class Context:
    function_name = "LaunchBatch"
    function_version = "$LATEST"
    invoked_function_arn = "arn:aws:lambda:us-east-1:1:function:LaunchBatch"
    memory_limit_in_mb = 256
    aws_request_id = "req"
    log_group_name = "/aws/lambda/LaunchBatch"
    log_stream_name = "local"

    def get_remaining_time_in_millis(self) -> int:
        return 100_000


@pytest.fixture
def stepped(aws, monkeypatch):
    """The table and the launch step answered in-process; what the handler asked, in order."""
    from gpufill.adapters import visibility
    from gpufill.models.run import Plan

    stops: list = []
    monkeypatch.setattr(run_store, "load_plan", lambda key: aws.append(("plan", key)) or Plan(request_id="req-1", market="spot", pools=[A, B]))
    monkeypatch.setattr(run_store, "save_request", lambda rid, body: aws.append(("keep request", rid, body)))
    monkeypatch.setattr(run_store, "refills_stopped_by", lambda rid: aws.append(("stopped?", rid)) or (stops.pop(0) if stops else None))

    def launch_step(step, req, plan, pools, run, context):
        aws.append(("launch step", plan.key, [p.key for p in pools], run.step_attempts, visibility.seconds_left()))
        assert (step.request, step.state_machine, req.request_id, context.function_name) == (req, "arn:sm", "req-1", "LaunchBatch")
        return run.model_copy(update={"launched": 1, "instances": [instance("i-new")]}).model_dump(mode="json", exclude_none=True)

    monkeypatch.setattr(launch_batch, "launch_step", launch_step)
    monkeypatch.setattr(launch_batch, "refill_stopped", lambda run, req, by: aws.append(("refill stopped", [i.instance_id for i in run.instances], by, req.owner_id)) or run.model_copy(update={"next": "stopped"}))
    return aws, stops


def step_event(req) -> dict:
    from gpufill.models.run import Attempt, PlanRef

    run = Run(batch=2, remaining=2, next="launch", attempts_total=1, launch=SETUP, step_attempts=[Attempt(
        number=1, region=REGION, availability_zone="us-west-2a", instance_type="g6.xlarge", market="spot",
        batch=2, launched=0, outcome="capacity")])
    plan = PlanRef(request_id="req-1", market="spot", key="plan#req-1#k", pools=2)
    return {"request": req.model_dump(mode="json"), "plan": plan.model_dump(mode="json"),
            "run": run.model_dump(mode="json", exclude_none=True), "state_machine": "arn:sm"}


def test_a_step_launches_the_plans_pools_from_a_fresh_step_within_the_time_it_keeps_back(stepped):
    asked, _ = stepped
    out = launch_batch.handler(step_event(request()), Context())
    # The step starts with no attempts of its own and may wait only while 30 s of its time is left.
    assert asked == [("plan", "plan#req-1#k"), ("launch step", "plan#req-1#k", [A.key, B.key], [], 70.0)]
    assert out["launched"] == 1 and out["instances"][0]["instance_id"] == "i-new"


def test_a_maintained_request_is_kept_before_anything_launches_and_a_refill_does_not_keep_it_again(aws, monkeypatch):
    monkeypatch.setattr(run_store, "save_request", lambda rid, body: aws.append(("keep request", rid, body)))
    monkeypatch.setattr(launch_calls.ec2, "launch", lambda pool, **kw: aws.append(("launch", pool.key)) or LaunchResult(outcome="capacity"))
    req = request(maintain=True, count=1, launch_mode="exact")
    through(req, [A], Run(batch=1, remaining=1, next="launch", launch=SETUP))
    assert aws[0] == ("keep request", "req-1", req.model_dump(mode="json", exclude_none=True))
    assert [a[0] for a in aws[1:3]] == ["intent", "launch"]
    aws.clear()
    refill = request(maintain=True, count=1, launch_mode="exact", refill=Refill(request_id="req-0", replaces=["i-0123456789abcdef0"]))
    through(refill, [A], Run(batch=1, remaining=1, next="launch", launch=SETUP))
    assert not [a for a in aws if a[0] == "keep request"] and ("launch", A.key) in aws


def test_a_refill_whose_request_was_torn_down_launches_nothing(stepped):
    asked, stops = stepped
    stops.append("req-0-teardown")
    req = request(maintain=True, count=1, refill=Refill(request_id="req-0", replaces=["i-0123456789abcdef0"]))
    out = launch_batch.handler(step_event(req), Context())
    assert asked == [("plan", "plan#req-1#k"), ("stopped?", "req-0"), ("refill stopped", [], "req-0-teardown", "req-0")]
    assert out["next"] == "stopped" and "cause" not in out  # unset fields left out of the state


def test_a_refill_torn_down_while_it_launched_ends_what_it_launched(stepped):
    asked, stops = stepped
    stops.extend([None, "req-0-teardown"])
    req = request(maintain=True, count=1, refill=Refill(request_id="req-0", replaces=["i-0123456789abcdef0"]))
    out = launch_batch.handler(step_event(req), Context())
    assert [a[0] for a in asked] == ["plan", "stopped?", "launch step", "stopped?", "refill stopped"]
    assert asked[3] == ("stopped?", "req-0")  # asked again of the request the refill belongs to
    assert asked[-1] == ("refill stopped", ["i-new"], "req-0-teardown", "req-0") and out["next"] == "stopped"
    assert "cause" not in out


def test_a_refill_not_torn_down_keeps_what_it_launched_and_a_plain_request_never_asks(stepped, monkeypatch):
    asked, _ = stepped
    req = request(maintain=True, count=1, refill=Refill(request_id="req-0", replaces=["i-0123456789abcdef0"]))
    out = launch_batch.handler(step_event(req), Context())
    assert [a[0] for a in asked] == ["plan", "stopped?", "launch step", "stopped?"] and out["launched"] == 1
    asked.clear()
    launch_batch.handler(step_event(request()), Context())
    assert "stopped?" not in [a[0] for a in asked]
    # A refill step that launched nothing has nothing to end: the teardown is not asked about again.
    asked.clear()
    monkeypatch.setattr(launch_batch, "launch_step", lambda step, req, plan, pools, run, context: aws_answer(run))
    launch_batch.handler(step_event(req), Context())
    assert [a[0] for a in asked] == ["plan", "stopped?"]


def aws_answer(run):
    return run.model_dump(mode="json", exclude_none=True)


def test_a_request_with_a_lifetime_records_its_end_and_schedules_its_teardown_once_recorded(aws, monkeypatch, caplog):
    from gpufill.adapters import schedules

    caplog.set_level(logging.INFO)
    made = [True]
    monkeypatch.setattr(launch_batch.clock, "now", lambda: datetime(2026, 12, 4, 12, tzinfo=UTC))  # before the expiry
    monkeypatch.setattr(schedules, "schedule_expiry", lambda rid, at, sm, late=None: aws.append(("schedule", rid, at, sm)) or made.pop(0))
    timed = request(maintain=True).model_copy(update={"expires_at": "2026-12-04T14:00:00+00:00"})
    launch_batch.keep([instance("i-1")], records(timed), "tok", "arn:sm")
    assert aws == [("record", ["i-1"], {"request_id": "req-1", "client_token": "tok", "maintain": True, "replaces": None,
                                        "lifetime_expires_at": "2026-12-04T14:00:00+00:00"}),
                   ("schedule", "req-1", "2026-12-04T14:00:00+00:00", "arn:sm")]
    [logged] = [r for r in caplog.records if r.getMessage() == "lifetime scheduled"]
    assert logged.expires_at == "2026-12-04T14:00:00+00:00"
    # A retried step finds the schedule made already: nothing more is said.
    made.append(False)
    caplog.clear()
    launch_batch.keep([instance("i-1")], records(timed), "tok", "arn:sm")
    assert not [r for r in caplog.records if r.getMessage() == "lifetime scheduled"]


def test_a_stopped_refill_is_logged_with_its_teardown_and_counted_once(ended, monkeypatch, caplog):
    caplog.set_level(logging.INFO)
    counted = []
    monkeypatch.setattr(launch_batch.metrics, "add_metric", lambda **kw: counted.append(kw))
    req, run = refill_run(instance("i-b"), instance("i-a"))
    launch_batch.refill_stopped(run, req, "td-1")
    [logged] = [r for r in caplog.records if r.getMessage() == "refill stopped by a teardown"]
    assert (logged.teardown, logged.terminated) == ("td-1", ["i-a", "i-b"])
    assert counted == [{"name": "RefillsStopped", "unit": "Count", "value": 1}]


# --- one RunInstances step: calls one after another, each recorded, bounded by count and time -----


class Clock(Context):
    def __init__(self, *millis):
        self.left = list(millis)

    def get_remaining_time_in_millis(self) -> int:
        return self.left.pop(0) if len(self.left) > 1 else self.left[0]


@pytest.fixture
def probing(aws, monkeypatch):
    """EC2's answer per pool, in order; what the handler asked, in order."""
    from gpufill.models.run import PlanRef

    answers: dict[str, list[LaunchResult]] = {}

    def make(decided, spec):
        call = decided.call
        assert (decided.records.request_id, spec.image_id, spec.root_volume_gib) == ("req-1", SETUP.image_id, SETUP.root_volume_gib)
        if call.api == moves.CREATE_FLEET:
            aws.append(("fleet", [p.key for _, p in call.pools]))
            return launch_calls.Answer(FleetAnswer())
        [(_, pool)] = call.pools
        aws.append(("launch", pool.key, call.target, call.token))
        return launch_calls.Answer(answers[pool.key].pop(0) if len(answers[pool.key]) > 1 else answers[pool.key][0])

    monkeypatch.setattr(launch_batch.launch_calls, "make", make)
    monkeypatch.setattr(run_store, "save_attempts", lambda rid, attempts: aws.append(("attempts", rid, [a.outcome for a in attempts])))
    monkeypatch.setattr(run_store, "load_attempts", lambda rid, total: [])
    plan = PlanRef(request_id="req-1", market="spot", key="plan#req-1#k", pools=2)
    return aws, answers, plan


def probe_step(req, **fields):
    run = Run(**{"batch": 1, "remaining": 4, "next": "launch", "attempts_total": 6, "launch": SETUP, **fields})
    return LoopEvent(request=req, run=run, state_machine="arn:sm"), run


def test_a_step_tries_pool_after_pool_with_fresh_tokens_records_each_launch_and_remembers_empty_pools(probing, caplog, monkeypatch):
    aws, answers, plan = probing
    caplog.set_level(logging.INFO)
    answers[A.key] = [LaunchResult(outcome="capacity", reason="InsufficientInstanceCapacity")]
    answers[B.key] = [LaunchResult(outcome="launched", instances=[instance("i-1", B)])]
    req = request(count=1, launch_mode="exact")
    step, run = probe_step(req, remaining=1)
    tidied = []
    monkeypatch.setattr(launch_batch, "tidy_groups", lambda grouped, run, pools, rid, deployment: tidied.append((grouped, run.next, pools, rid)))
    out = launch_batch.launch_step(step, req, plan, [A, B], fill.begin_step(run), Clock(100_000))
    assert tidied == [(set(), out["next"], [A, B], "req-1")]
    seven, eight = client_token("arn:sm", "req-1", 7), client_token("arn:sm", "req-1", 8)
    assert aws == [("launch", A.key, 1, seven), ("full", A.key, {"request_id": "req-1", "reason": "InsufficientInstanceCapacity"}),
                   ("launch", B.key, 1, eight),
                   ("record", ["i-1"], {"request_id": "req-1", "client_token": eight, "maintain": False, "replaces": None, "lifetime_expires_at": None}),
                   ("attempts", "req-1", ["capacity", "launched"])]
    assert out["launched"] == 1 and out["instances"][0]["instance_id"] == "i-1" and "cause" not in out
    logged = [(r.pool, r.batch, r.outcome, r.launched) for r in caplog.records if r.getMessage() == "batch answered"]
    assert logged == [(A.key, 1, "capacity", 0), (B.key, 1, "launched", 1)]


def test_a_pool_found_empty_without_a_reason_is_remembered_as_capacity_and_a_reservation_never(probing):
    aws, answers, plan = probing
    reserved = B.model_copy(update={"capacity_reservation_id": "cr-1", "market": "on-demand"})
    answers[A.key] = [LaunchResult(outcome="capacity")]
    answers[reserved.key] = [LaunchResult(outcome="capacity")]
    req = request(count=1, launch_mode="exact", capacity_reservations="open")
    step, run = probe_step(req, remaining=1)
    launch_batch.launch_step(step, req, plan, [A, reserved], fill.begin_step(run), Clock(100_000))
    assert [a for a in aws if a[0] == "full"] == [("full", A.key, {"request_id": "req-1", "reason": "capacity"})]


def test_a_step_makes_at_most_its_share_of_calls_and_stops_early_when_its_time_runs_short(probing):
    aws, answers, plan = probing
    pools = [A.model_copy(update={"availability_zone": f"us-west-2{z}"}) for z in "abcdefghijk"]
    for pool in pools:
        answers[pool.key] = [LaunchResult(outcome="capacity", reason="InsufficientInstanceCapacity")]
    req = request(count=1, launch_mode="exact")
    step, run = probe_step(req, remaining=1)
    launch_batch.launch_step(step, req, plan, pools, fill.begin_step(run), Clock(100_000))
    assert len([a for a in aws if a[0] == "launch"]) == fill.MAX_PROBES_PER_STEP == 8
    aws.clear()
    # The first call is always made; the next only while 30 s are left, and the step still ends as one.
    out = launch_batch.launch_step(step, req, plan, pools, fill.begin_step(run), Clock(1_000))
    assert len([a for a in aws if a[0] == "launch"]) == 1
    assert out["next"] == "launch" and ("attempts", "req-1", ["capacity"]) in aws
    aws.clear()
    launch_batch.launch_step(step, req, plan, pools, fill.begin_step(run), Clock(100_000, 100_000, 30_000, 29_999))
    assert len([a for a in aws if a[0] == "launch"]) == 4  # 30 s left is enough; a millisecond less is not


def test_a_fleet_step_goes_through_the_fleet_and_is_finished_the_same_way(probing, monkeypatch):
    aws, _, plan = probing
    req = request(launch_mode="fleet", count=1)
    step, run = probe_step(req, remaining=1)

    tidied = []
    monkeypatch.setattr(launch_batch, "tidy_groups", lambda grouped, run, pools, rid, deployment: tidied.append((grouped, run.next, pools, rid)))
    out = launch_batch.launch_step(step, req, plan, [A, B], run, Clock(100_000))
    assert tidied == [(set(), "exhausted", [A, B], "req-1")]
    assert "wait" not in out and "gang" not in out  # unset fields left out of the state
    assert aws == [("fleet", [A.key, B.key])] and out["next"] == "exhausted"
    assert json.loads(out["cause"])["error"] == "ALL_SPOT_EXHAUSTED"  # finished as the plan's market says


# --- the cluster groups a step made where the run does not stay -----------------------------------


def test_groups_made_in_regions_the_run_leaves_are_removed_and_a_failure_is_only_logged(aws, monkeypatch, caplog):
    from gpufill.adapters.aws import TransientAwsError

    from aws_fakes import client_error

    caplog.set_level(logging.INFO)
    east = Pool(region="us-east-1", availability_zone="us-east-1a", instance_type="g6.xlarge", market="spot", price=0.4)
    removed = []

    def remove_empty(region, deployment, ids):
        removed.append((region, deployment, ids))
        if region == "eu-west-1":
            raise client_error("InvalidPlacementGroup.InUse", operation="DeletePlacementGroup")
        if region == "ap-south-1":
            raise TransientAwsError("throttled")

    monkeypatch.setattr(placement_groups, "remove_empty", remove_empty)
    staying = Run(batch=1, remaining=1, next="launch", cursor=1)
    launch_batch.tidy_groups({REGION, "us-east-1", "eu-west-1", "ap-south-1"}, staying, [A, east], "req-1", "prod")
    assert removed == [("ap-south-1", "prod", {"req-1"}), ("eu-west-1", "prod", {"req-1"}), (REGION, "prod", {"req-1"})]
    logged = [(r.levelname, r.region) for r in caplog.records if r.getMessage() == "empty cluster groups not deleted"]
    assert logged == [("WARNING", "ap-south-1"), ("WARNING", "eu-west-1")]
    assert "InvalidPlacementGroup.InUse" in [r for r in caplog.records if r.getMessage() == "empty cluster groups not deleted"][1].error
    removed.clear()
    launch_batch.tidy_groups({REGION, "us-east-1"}, staying.model_copy(update={"next": "refresh", "cursor": 0}), [A, east], "req-1", "prod")
    assert removed == [("us-east-1", "prod", {"req-1"})]
    removed.clear()
    # A run that moves on (or whose cursor is past the plan) stays nowhere.
    launch_batch.tidy_groups({REGION}, staying.model_copy(update={"next": "prepare", "cursor": 0}), [A, east], "req-1", "prod")
    launch_batch.tidy_groups({REGION}, staying.model_copy(update={"cursor": 2}), [A, east], "req-1", "prod")
    assert removed == [(REGION, "prod", {"req-1"}), (REGION, "prod", {"req-1"})]
    removed.clear()
    launch_batch.tidy_groups({REGION}, staying.model_copy(update={"cursor": 2}), [A, east], "req-1", "")
    assert removed == [(REGION, "", {"req-1"})]


def test_a_step_that_runs_out_of_pools_ends_the_market_exhausted_naming_it(probing):
    aws, answers, plan = probing
    answers[A.key] = answers[B.key] = [LaunchResult(outcome="capacity", reason="InsufficientInstanceCapacity")]
    req = request(count=1, launch_mode="exact")
    step, run = probe_step(req, remaining=1)
    out = launch_batch.launch_step(step, req, plan, [A, B], fill.begin_step(run), Clock(100_000))
    assert out["next"] == "exhausted" and json.loads(out["cause"])["error"] == "ALL_SPOT_EXHAUSTED"


@pytest.mark.parametrize("fleet_mode", [False, True])
def test_a_reservations_only_step_that_found_no_room_names_the_reservations_its_plan_saw(probing, monkeypatch, fleet_mode):
    from gpufill.models.run import ReservationSeen

    aws, answers, plan = probing
    seen = ReservationSeen(capacity_reservation_id="cr-0abc", region=REGION, availability_zone="us-west-2a",
                           instance_type="g6.xlarge", available=0, match="open")
    plan = plan.model_copy(update={"market": "on-demand", "reservations": [seen]})
    reserved = A.model_copy(update={"capacity_reservation_id": "cr-0abc", "market": "on-demand"})
    answers[reserved.key] = [LaunchResult(outcome="capacity", reason="ReservationCapacityExceeded")]
    req = request(count=1, launch_mode="fleet" if fleet_mode else "exact", capacity_reservations="only", market="on-demand")
    step, run = probe_step(req, remaining=1)
    out = launch_batch.launch_step(step, req, plan, [reserved], fill.begin_step(run), Clock(100_000))
    assert out["next"] == "exhausted" and "cr-0abc" in out["cause"]


@pytest.mark.parametrize(("reservations", "market", "off"), [
    ("none", "on-demand", True), ("open", "on-demand", False), ("none", "spot", False)])
def test_capacity_reservations_none_keeps_on_demand_launches_out_of_open_reservations(aws, monkeypatch, reservations, market, off):
    sent, calls = [], []
    monkeypatch.setattr(launch_calls.ec2, "launch", lambda pool, **kw: sent.append(kw["spec"]) or LaunchResult(outcome="capacity"))
    monkeypatch.setattr(launch_calls.fleet_launch, "launch", lambda call, spec, token, **kw: calls.append((call, spec)) or FleetAnswer())
    pool = A.model_copy(update={"market": market})
    through(request(capacity_reservations=reservations, market=market, launch_mode="exact"), [pool],
            Run(batch=1, remaining=1, next="launch", launch=SETUP))
    assert sent[0].reservations_off is (reservations == "none")  # RunInstances: asked for the pool's own market
    step, req, run = fleet_step(capacity_reservations=reservations, market=market)
    reserved = pool.model_copy(update={"capacity_reservation_id": "cr-9"})
    through(req, [reserved, B], run)
    [(call, spec)] = calls
    assert spec.reservations_off is off and call.capacity_reservation_id == "cr-9"


def test_a_fleet_from_a_reservation_asks_for_its_room_and_remembers_only_ordinary_pools_empty(aws, monkeypatch):
    step, req, run = fleet_step(market="on-demand")
    reserved = A.model_copy(update={"market": "on-demand", "capacity_reservation_id": "cr-1", "reserved": 2})
    ordinary = B.model_copy(update={"market": "on-demand"})
    calls = []
    monkeypatch.setattr(launch_calls.fleet_launch, "launch", lambda call, spec, token, **kw: calls.append(call) or FleetAnswer(answers=[
        PoolAnswer(index=0, result=LaunchResult(outcome="capacity", reason="ReservationCapacityExceeded")),
        PoolAnswer(index=1, result=LaunchResult(outcome="capacity", reason="InsufficientInstanceCapacity"))]))
    through(req, [reserved, ordinary], run)
    assert calls[0].target == 2  # what the plan gave the reservation, not the 4 still missing
    assert [a for a in aws if a[0] == "full"] == [("full", ordinary.key, {"request_id": "req-1", "reason": "capacity"})]


@pytest.mark.parametrize("fleet_mode", [False, True])
def test_a_step_that_launches_for_a_request_with_a_lifetime_schedules_its_teardown_on_this_state_machine(aws, monkeypatch, fleet_mode):
    from gpufill.adapters import schedules
    from gpufill.models.run import PlanRef

    monkeypatch.setattr(schedules, "schedule_expiry", lambda rid, at, sm, late=None: aws.append(("schedule", rid, at, sm)) or True)
    monkeypatch.setattr(launch_batch.clock, "now", lambda: datetime(2026, 12, 4, 12, tzinfo=UTC))  # before the expiry
    monkeypatch.setattr(run_store, "save_attempts", lambda rid, attempts: None)
    monkeypatch.setattr(launch_calls.ec2, "launch", lambda pool, **kw: LaunchResult(outcome="launched", instances=[instance("i-1")]))
    monkeypatch.setattr(launch_calls.fleet_launch, "launch", lambda call, spec, token, **kw: FleetAnswer(answers=[
        PoolAnswer(index=0, result=LaunchResult(outcome="launched", instances=[instance("i-1")]))]))
    req = request(count=1, launch_mode="fleet" if fleet_mode else "exact").model_copy(update={"expires_at": "2026-12-04T14:00:00+00:00"})
    run = Run(batch=1, remaining=1, next="launch", attempts_total=0, launch=SETUP)
    plan = PlanRef(request_id="req-1", market="spot", key="plan#req-1#k", pools=1)
    launch_batch.launch_step(LoopEvent(request=req, run=run, state_machine="arn:sm"), req, plan, [A], run, Clock(100_000))
    assert ("schedule", "req-1", "2026-12-04T14:00:00+00:00", "arn:sm") in aws


# --- the end of every step: its attempts logged, a stop explained ----------------------------------


def test_a_step_that_ends_a_market_reads_the_whole_attempt_log_for_its_cause(aws, monkeypatch):
    from gpufill.models.run import Attempt

    read = []
    tried = Attempt(number=5, region=REGION, availability_zone="us-west-2a", instance_type="g6.xlarge", market="spot",
                    batch=1, launched=0, outcome="capacity", reason="InsufficientInstanceCapacity")
    monkeypatch.setattr(run_store, "load_attempts", lambda rid, total: read.append((rid, total)) or [tried])
    run = Run(batch=1, remaining=1, next="exhausted", attempts_total=5)
    out = launch_batch.finish_step(run, request(count=1), "spot")
    assert read == [("req-1", 5)] and "us-west-2a" in out.cause and json.loads(out.cause)["error"] == "ALL_SPOT_EXHAUSTED"


def test_a_reservations_only_stop_without_a_plan_names_no_reservation(aws, monkeypatch):
    monkeypatch.setattr(run_store, "load_attempts", lambda rid, total: [])
    out = launch_batch.finish_step(Run(batch=1, remaining=1, next="exhausted"), request(count=1, capacity_reservations="only",
                                                                                      market="on-demand"), "on-demand")
    assert out.cause and "cr-" not in out.cause
    from gpufill.models.run import ReservationSeen

    seen = ReservationSeen(capacity_reservation_id="cr-0abc", region=REGION, availability_zone="us-west-2a",
                           instance_type="g6.xlarge", available=0, match="open")
    out = launch_batch.finish_step(Run(batch=1, remaining=1, next="exhausted"), request(count=1, capacity_reservations="only",
                                   market="on-demand"), "on-demand", PLAN.model_copy(update={"reservations": [seen]}))
    assert "cr-0abc" in out.cause


def test_a_step_refused_into_a_paid_block_keeps_the_blocks_end_under_the_request_that_owns_it(probing, monkeypatch):
    from test_block_use import HELD

    aws, answers, plan = probing
    monkeypatch.setattr(run_store, "save_wait", lambda rid, view: aws.append(("wait", rid, view["phase"], view["execution"])))
    answers[A.key] = [LaunchResult(outcome="error", reason="InvalidParameterValue")]
    refill = request(count=1, launch_mode="exact", maintain=True, refill=Refill(request_id="req-0", replaces=["i-0123456789abcdef0"]))
    step, run = probe_step(refill, remaining=1, capacity_block=HELD)
    out = launch_batch.launch_step(step, refill, plan, [A, B], fill.begin_step(run), Clock(100_000))
    assert out["next"] == "rejected" and json.loads(out["cause"])["error"] == "LAUNCH_REJECTED"
    assert aws[-1] == ("wait", "req-0", "capacity-block-ended", "req-1")


def test_a_rejected_run_is_ended_with_the_rejection_explained_and_its_attempts_logged(aws, monkeypatch):
    from gpufill.models.run import Attempt
    from gpufill.policy.exhaustion import rejection_cause

    refused = Attempt(number=1, region=REGION, availability_zone="us-west-2a", instance_type="g6.xlarge", market="spot",
                      batch=1, launched=0, outcome="error", reason="InvalidParameterValue")
    monkeypatch.setattr(run_store, "save_attempts", lambda rid, attempts: aws.append(("attempts", rid, len(attempts))))
    req = request(count=1)
    run = Run(batch=1, remaining=1, next="rejected", attempts_total=1, step_attempts=[refused])
    out = launch_batch.finish_step(run, req, "spot")
    assert aws == [("attempts", "req-1", 1)]
    assert out.next == "rejected" and out.cause == rejection_cause(run, req) and out.cause
    done = Run(batch=1, remaining=0, next="done")
    assert launch_batch.finish_step(done, req, "spot") == done


def test_a_launch_at_or_after_the_expiry_joins_the_owning_requests_late_round_named_for_its_token(aws, monkeypatch):
    from gpufill.adapters import schedules
    from gpufill.policy import lifetime

    joined = []
    now = datetime(2026, 12, 4, 15, tzinfo=UTC)  # an hour past the expiry
    monkeypatch.setattr(launch_batch.clock, "now", lambda: now)
    monkeypatch.setattr(launch_batch, "join_late_round", lambda *args: joined.append(args))
    monkeypatch.setattr(schedules, "schedule_expiry", lambda *a, **k: pytest.fail("the request's own schedule may be gone"))
    refill = request(maintain=True, refill=Refill(request_id="req-0", replaces=["i-0123456789abcdef0"]))
    timed = refill.model_copy(update={"expires_at": "2026-12-04T14:00:00+00:00"})
    launch_batch.keep([instance("i-1")], records(timed), "tok-9", "arn:sm")
    assert joined == [("req-0", "2026-12-04T14:00:00+00:00", "arn:sm", lifetime.late_round("2026-12-04T14:00:00+00:00", now, "tok-9"))]
    assert joined[0][3] != lifetime.late_round("2026-12-04T14:00:00+00:00", now, "tok-8")


def test_every_answer_of_the_step_is_counted_by_region_type_and_outcome_for_the_dashboard(stepped, monkeypatch):
    from gpufill.constants import METRIC_CAPACITY_ANSWERS
    from gpufill.models.run import Attempt

    counted = []
    monkeypatch.setattr(launch_batch, "count", lambda name, value, **dims: counted.append((name, value, dims)))
    tried = [Attempt(number=n, region=pool.region, availability_zone=pool.availability_zone, instance_type=pool.instance_type,
                     market="spot", batch=1, launched=launched, outcome=outcome)
             for n, pool, launched, outcome in ((1, A, 0, "capacity"), (2, EFA, 1, "launched"))]
    monkeypatch.setattr(launch_batch, "launch_step", lambda step, req, plan, pools, run, context: aws_answer(
        run.model_copy(update={"step_attempts": tried})))
    launch_batch.handler(step_event(request()), Context())
    assert counted == [
        (METRIC_CAPACITY_ANSWERS, 1, {"region": REGION, "instance_type": "g6.xlarge", "outcome": "capacity"}),
        (METRIC_CAPACITY_ANSWERS, 1, {"region": REGION, "instance_type": "g6.12xlarge", "outcome": "launched"}),
    ]
