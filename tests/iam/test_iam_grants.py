"""Each important grant of the CDK app, removed, makes a named path fail with AWS's refusal."""

from __future__ import annotations

import pytest
from gpufill import constants
from gpufill.local.iam.authorizations import Call, Ec2Resource, authorizations
from gpufill.local.iam.evaluator import Authorization

from gpufill.local.iam.principals import principal

from tests.iam.test_iam_runs import ONE_REGION, request

ACCOUNT = "123456789012"


@pytest.mark.parametrize(
    ("mode", "role", "action", "resource", "refused_on"),
    [
        ("fleet", "LaunchBatch", "ec2:CreateFleet", "instance/*", "ec2:CreateFleet on resource: arn:aws:ec2:us-west-2:123456789012:instance/*"),
        ("fleet", "LaunchBatch", "ec2:CreateFleet", "volume/*", "ec2:CreateFleet on resource: arn:aws:ec2:us-west-2:123456789012:volume/*"),
        ("fleet", "LaunchBatch", "ec2:CreateFleet", "fleet/*", "ec2:CreateFleet on resource: arn:aws:ec2:us-west-2:123456789012:fleet/*"),
        ("fleet", "LaunchBatch", "iam:PassRole", "role/", "iam:PassRole on resource: arn:aws:iam::123456789012:role/"),
        ("fleet", "LaunchBatch", "ec2:CreateLaunchTemplate", "launch-template/*", "ec2:CreateLaunchTemplate on resource"),
        ("partial", "LaunchBatch", "ec2:RunInstances", "instance/*", "ec2:RunInstances on resource: arn:aws:ec2:us-west-2:123456789012:instance/*"),
        ("partial", "LaunchBatch", "ec2:RunInstances", "spot-instances-request/*", "ec2:RunInstances on resource: arn:aws:ec2:us-west-2:123456789012:spot-instances-request/*"),
        ("partial", "LaunchBatch", "ec2:CreateTags", "instance/*", "ec2:CreateTags on resource: arn:aws:ec2:us-west-2:123456789012:instance/*"),
    ],
)
def test_a_launch_without_the_grant_is_rejected_as_aws_rejects_it(judged_account, mode, role, action, resource, refused_on):
    with judged_account(ONE_REGION, without=(role, action, resource)) as (engine, _):
        execution = engine.run(request(launch_mode=mode), name=f"no-grant-{mode}")
    assert execution.error == "LAUNCH_REJECTED", execution.cause
    assert execution.cause["code"] == "UnauthorizedOperation"
    assert execution.cause["message"].split(" with ", 1)[1].startswith("UnauthorizedOperation: You are not authorized to perform this operation. User: arn:aws:sts::123456789012:assumed-role/")
    assert refused_on in execution.cause["message"]
    assert execution.cause["launched"] == 0


def test_a_teardown_without_terminate_ends_nothing_and_says_so(judged_account):
    with judged_account(ONE_REGION, without=("TerminateRegionInstances", "ec2:TerminateInstances", "instance/*")) as (engine, judgements):
        launched = engine.run(request(launch_mode="fleet"), name="kept")
        teardown = engine.run({"action": "teardown", "request_id": "kept"}, name="kept-teardown", decision="approved")
        running = engine.client("ec2", "us-west-2").describe_instances(
            InstanceIds=[i["instance_id"] for i in launched.output["instances"]]
        )
    states = {i["State"]["Name"] for r in running["Reservations"] for i in r["Instances"]}
    assert states == {"running"}
    refused = [j for j in judgements.refusals if j.action == "ec2:TerminateInstances"]
    assert refused and all(j.resource.startswith("arn:aws:ec2:us-west-2:123456789012:instance/i-") for j in refused)
    assert "TerminateInstances" in str(teardown.cause or teardown.output)


# --- the instance's own calls (startup.sh), judged by the instance role --------------------------


class _OneInstance:
    def __init__(self, tags):
        self.tags = tags

    def ec2_resource(self, region, kind, resource_id):
        return Ec2Resource(self.tags, {"ec2:InstanceID": resource_id}) if kind == "instance" else None


def _report_step(app, evaluator, *, caller: str, target: str, tags: dict, key=constants.TAG_STARTUP_STEP):
    call = Call("ec2", "CreateTags", {"Resources": [target], "Tags": [{"Key": key, "Value": "serving"}]}, "us-west-2", ACCOUNT)
    instance = principal(app.instance_role, caller, ACCOUNT)
    source = f"arn:aws:ec2:us-west-2:{ACCOUNT}:instance/{caller}"
    checks = [
        Authorization(a.action, a.resource, {**instance.context(), "ec2:SourceInstanceARN": source, **a.context})
        for a in authorizations(call, _OneInstance(tags))
    ]
    return evaluator.first_refusal(instance.arn, ACCOUNT, instance.policies, checks)


def test_an_instance_reports_its_startup_step_on_itself_only(app, evaluator):
    ours = {constants.TAG_MANAGED: constants.TAG_MANAGED_VALUE, constants.TAG_DEPLOYMENT: "local"}
    assert _report_step(app, evaluator, caller="i-0aaa", target="i-0aaa", tags=ours) is None
    # another instance, another deployment's instance, another tag key: refused
    assert _report_step(app, evaluator, caller="i-0aaa", target="i-0bbb", tags=ours) is not None
    other = {**ours, constants.TAG_DEPLOYMENT: "prod"}
    assert _report_step(app, evaluator, caller="i-0aaa", target="i-0aaa", tags=other) is not None
    assert _report_step(app, evaluator, caller="i-0aaa", target="i-0aaa", tags=ours, key="Name") is not None


def test_the_instance_reads_its_startup_script_and_model_only(app, evaluator):
    instance = principal(app.instance_role, "i-0aaa", ACCOUNT)
    bucket = app.home.functions["LaunchBatch"].environment[constants.ENV_STARTUP_BUCKET]

    def read(key):
        check = authorizations(Call("s3", "GetObject", {"Bucket": bucket, "Key": key}, "us-west-2", ACCOUNT), None)[0]
        return evaluator.judge(instance.arn, ACCOUNT, instance.policies, check).result

    assert read(f"{constants.STARTUP_SCRIPTS_PREFIX}startup.sh") == "Allowed"
    assert read(f"{constants.MODELS_PREFIX}llama/weights.bin") == "Allowed"
    assert read("elsewhere/secret") == "ImplicitlyDenied"


# --- the instance's own calls, played by the simulated market and judged by the instance role ----


@pytest.mark.parametrize(
    ("action", "resource_part"),
    [("ec2:CreateTags", "instance/"), ("s3:GetObject", "scripts/")],
)
def test_an_instance_role_without_the_grant_reports_no_startup_step(judged_account, action, resource_part):
    from tests.support.grants import without_grant

    with judged_account(ONE_REGION) as (engine, judgements):
        role = engine.deployments["local"].app.instance_role
        engine.roles[role.arn] = without_grant(role, action, resource_part)
        execution = engine.run(request(launch_mode="fleet", ready_timeout="PT3M"), name="no-report")
    # Launched and recorded, but startup.sh could not report (or not even start): not serving.
    assert execution.output["status"] == "FULFILLED", execution.cause
    assert execution.output["instances_serving"] == 0
    assert {i.get("startup_step") for i in execution.output["instances"]} == {None}
    refused = [j for j in judgements.refusals if j.action == action]
    assert refused and all(j.principal == role.name for j in refused)


def test_an_instance_reports_its_steps_with_the_deployed_instance_role(judged_account):
    with judged_account(ONE_REGION) as (engine, judgements):
        execution = engine.run(request(launch_mode="fleet"), name="reports")
    role = engine.deployments["local"].app.instance_role
    assert not judgements.refusals
    assert execution.output["instances_serving"] == 2
    assert {j.action for j in judgements.seen if j.principal == role.name} == {"ec2:CreateTags", "s3:GetObject"}


def test_a_fleet_whose_version_may_not_be_deleted_still_fills_and_keeps_the_version(judged_account):
    without = ("ReportResult", "ec2:DeleteLaunchTemplateVersions", "launch-template/")
    with judged_account(ONE_REGION, without=without) as (engine, judgements):
        execution = engine.run(request(launch_mode="fleet"), name="kept-version")
        versions = engine.client("ec2", "us-west-2").describe_launch_template_versions(
            LaunchTemplateName="gpufill-local"
        )["LaunchTemplateVersions"]
    assert execution.output["status"] == "FULFILLED" and execution.output["launched"] == 2
    refused = [j for j in judgements.refusals if j.action == "ec2:DeleteLaunchTemplateVersions"]
    assert refused and refused[0].resource.startswith("arn:aws:ec2:us-west-2:123456789012:launch-template/lt-")
    assert sorted(v["VersionNumber"] for v in versions) == [1, 2]  # the run's version is left behind


def test_with_the_grant_the_fleets_version_is_deleted(judged_account):
    with judged_account(ONE_REGION) as (engine, judgements):
        execution = engine.run(request(launch_mode="fleet"), name="deleted-version")
        versions = engine.client("ec2", "us-west-2").describe_launch_template_versions(
            LaunchTemplateName="gpufill-local"
        )["LaunchTemplateVersions"]
    assert execution.output["status"] == "FULFILLED"
    assert not [j for j in judgements.refusals if j.action == "ec2:DeleteLaunchTemplateVersions"]
    assert [v["VersionNumber"] for v in versions] == [1]


def test_a_launch_step_may_delete_the_empty_cluster_groups_of_a_region_it_leaves_only_with_the_grant(judged_account):
    from tests.faults.test_cluster_group_faults import MARKET, gang

    without = ("LaunchBatch", "ec2:DeletePlacementGroup", "placement-group/")
    with judged_account(MARKET, without=without) as (engine, judgements):
        execution = engine.run(gang("fleet"), name="kept-groups")
        left = engine.market.groups.names("us-west-2")
    refused = [j for j in judgements.refusals if j.action == "ec2:DeletePlacementGroup"]
    # The gang still fills elsewhere; Oregon's empty groups stay, refused as AWS refuses the call.
    assert execution.output["status"] == "FULFILLED"
    assert refused and refused[0].resource.startswith("arn:aws:ec2:us-west-2:123456789012:placement-group/gpufill-local-kept-groups-")
    assert len(left) == 2


# --- the spend guard (max_lifetime): EventBridge Scheduler ----------------------------------------


def test_a_launch_that_may_not_schedule_its_lifetime_fails_naming_what_runs(judged_account):
    """A request that asked for a max_lifetime never runs unguarded without saying so."""
    with judged_account(ONE_REGION, without=("LaunchBatch", "scheduler:CreateSchedule", "life-")) as (engine, judgements):
        execution = engine.run(request(launch_mode="fleet", max_lifetime="PT2H"), name="unguarded")
    refused = [j for j in judgements.refusals if j.action == "scheduler:CreateSchedule"]
    assert refused and refused[0].resource == f"arn:aws:scheduler:us-east-1:{ACCOUNT}:schedule/gpufill-local/life-unguarded"
    assert execution.error == "PROVISIONING_FAILED", execution.cause
    assert "scheduler:CreateSchedule" in str(execution.cause)
    assert len(execution.cause["instances"]) == 2  # every launched instance named, with the teardown that ends them


def test_a_scheduler_role_that_may_not_start_the_teardown_starts_nothing(judged_account):
    from tests.support.grants import without_grant

    with judged_account(ONE_REGION) as (engine, judgements):
        role = engine.deployments["local"].app.scheduler_role
        engine.roles[role.arn] = without_grant(role, "states:StartExecution")
        launched = engine.run(request(launch_mode="fleet", max_lifetime="PT1H"), name="never-ends")
        engine.advance(2 * 3600)
        executions = engine.executions()
        [run] = [r for r in engine.schedule_runs if r["schedule"] == "life-never-ends"]
    assert launched.output["status"] == "FULFILLED"
    assert "never-ends-expired" not in executions
    assert run["refused"] and run["error"].startswith("AccessDenied: states:StartExecution on arn:aws:states:us-east-1:")
    assert [j.principal for j in judgements.refusals] == [role.name]
