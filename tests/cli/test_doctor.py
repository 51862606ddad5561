"""`gpufill doctor` against `gpufill local serve`'s endpoint: one line per check, exit 1 on a failure."""

from __future__ import annotations

import json
from dataclasses import replace

from gpufill.cli import main
from gpufill.cli.doctor import Check, quota_verdict, render
from tests.support import EXAMPLES

# Oregon's spot quota holds two g6.xlarge; the other regions set none.
MARKET = EXAMPLES / "markets/tight-quota.json"


def checks(capsys, deployment) -> tuple[int, dict]:
    code = main(["doctor", "--json", *deployment])
    return code, json.loads(capsys.readouterr().out)


def test_a_deployed_stack_passes_every_check_its_runs_need(deployment, capsys):
    code, report = checks(capsys, deployment)
    assert code == 0 and report["ok"], [c for c in report["checks"] if c["verdict"] == "fail"]
    by_check = {(c["check"], c["target"]): c for c in report["checks"]}
    # Every principal the local runs recorded, asked of IAM on the deployed role, allowed.
    iam = {target: c for (check, target), c in by_check.items() if check == "iam"}
    assert {"LaunchBatch", "StateMachine", "PrepareRegion", "TerminateRegionInstances", "Instance", "Scheduler"} <= set(iam)
    # Each region's event-forwarding role, found by its name, asked what the home bus needs.
    assert {t for t in iam if t.startswith("EventForwarding ")} == {
        f"EventForwarding {r}" for r in ("us-east-2", "us-west-2", "eu-central-1", "ap-northeast-1")
    }
    assert all(c["verdict"] == "ok" and c["detail"].endswith("calls allowed") for c in iam.values())
    # The scenario's quota is what Service Quotas reports: 8 vCPUs hold two G instances of 4.
    oregon = by_check[("vcpu quota", "us-west-2 G spot")]
    assert oregon["verdict"] == "ok" and oregon["detail"].startswith("8 vCPUs (L-3819A6DF): room for 2")
    assert by_check[("ami", "us-west-2")]["verdict"] == "ok"
    assert by_check[("powertools layer", "us-east-1")]["verdict"] == "ok"
    # A fresh account has no service-linked roles yet: a warning with the command that makes one.
    spot_role = by_check[("service-linked role", "AWSServiceRoleForEC2Spot")]
    assert spot_role["verdict"] == "warn" and "create-service-linked-role --aws-service-name spot.amazonaws.com" in spot_role["fix"]


def test_a_role_without_a_grant_its_runs_need_fails_the_doctor(endpoint, deployment, capsys):
    from tests.support.grants import without_grant

    engine = endpoint.engine
    launch = next(f for f in engine.functions.values() if f.task == "LaunchBatch")
    saved = engine.roles[launch.role.arn]
    engine.roles[launch.role.arn] = without_grant(saved, "ec2:CreateFleet", "instance/*")
    try:
        code, report = checks(capsys, deployment)
    finally:
        engine.roles[launch.role.arn] = saved
    assert code == 1 and not report["ok"]
    [failed] = [c for c in report["checks"] if c["verdict"] == "fail"]
    assert failed["check"] == "iam" and failed["target"] == "LaunchBatch"
    assert "ec2:CreateFleet on arn:aws:ec2:" in failed["detail"] and ":instance/" in failed["detail"]


def test_a_quota_too_small_for_one_instance_warns_with_the_increase_command():
    check = quota_verdict("us-east-1", "P", "spot", "L-7212CCBC", 0, 8)
    assert check.verdict == "warn" and "not one P instance (8 vCPUs)" in check.detail
    assert "--quota-code L-7212CCBC" in check.fix
    assert render([check, replace(check, verdict="ok")]).splitlines()[-1] == "2 checks: 0 failed, 1 warnings"
    assert render([Check("ami", "us-east-1", "ok", "ami-1")]).endswith("1 checks: all ok")


def test_a_region_whose_forwarding_role_is_missing_fails_the_doctor(endpoint, deployment, capsys):
    from gpufill import constants

    engine = endpoint.engine
    [(arn, role)] = [(a, r) for a, r in engine.roles.items() if r.name == constants.forwarding_role_name("local", "us-east-2")]
    saved = engine.roles.pop(arn)
    try:
        code, report = checks(capsys, deployment)
    finally:
        engine.roles[arn] = saved
    [failed] = [c for c in report["checks"] if c["verdict"] == "fail"]
    assert code == 1 and (failed["check"], failed["target"]) == ("iam", "EventForwarding us-east-2")
    assert failed["detail"] == "no role gpufill-local-events-us-east-2: us-east-2's EC2 interruptions never reach StartRefill"
    assert failed["fix"].endswith("gpufill-local-events-us-east-2: npx cdk deploy --all")


# --- gpufill doctor --probe ----------------------------------------------------------------------


def probed(capsys, deployment) -> tuple[int, dict]:
    code = main(["doctor", "--probe", "--json", *deployment])
    return code, json.loads(capsys.readouterr().out)


def test_the_probe_proves_every_launch_grant_of_a_fresh_deployment_and_changes_nothing(endpoint, deployment, capsys):
    engine = endpoint.engine
    regions = ("us-east-1", "us-east-2", "us-west-2", "eu-central-1", "ap-northeast-1")

    def world() -> tuple:
        ec2 = {r: engine.client("ec2", r) for r in regions}
        return (sum(len(x["Instances"]) for r in regions for x in ec2[r].describe_instances()["Reservations"]),
                sum(len(ec2[r].describe_launch_templates()["LaunchTemplates"]) for r in regions),
                engine.client("dynamodb").scan(TableName=constants.instances_table_name("local"))["Count"])

    from gpufill import constants

    before = world()
    code, report = probed(capsys, deployment)
    assert code == 0 and report["ok"], [c for c in report["calls"] if c["result"] in ("refused", "failed")]
    rows = {(c["function"], c["region"], c["call"]): c for c in report["calls"]}
    for region in regions:
        for call in ("ec2:RunInstances", "ec2:CreateLaunchTemplate"):
            assert rows[("LaunchBatch", region, call)]["result"] == "granted"
        assert rows[("PurchaseCapacityBlock", region, "ec2:PurchaseCapacityBlock")]["result"] == "granted"
        # Nothing of the deployment to judge a termination or a fleet against yet: EC2 cannot say.
        terminate = rows[("TerminateRegionInstances", region, "ec2:TerminateInstances")]
        assert terminate["result"] == "unproven" and terminate["detail"].startswith("InvalidInstanceID.NotFound")
        assert rows[("LaunchBatch", region, "ec2:CreateFleet")]["detail"].startswith("InvalidLaunchTemplateName.NotFound")
    assert rows[("ReportResult", "*", "dynamodb:BatchGetItem")]["result"] == "not probeable"
    assert world() == before  # no instance, template or record made


def test_a_grant_removed_from_a_role_is_refused_by_the_probe_with_its_reason(endpoint, deployment, capsys):
    from tests.support.grants import remove_grant

    engine = endpoint.engine
    saved = dict(engine.functions)
    remove_grant(engine, "LaunchBatch", "ec2:RunInstances", "instance/*")
    try:
        code, report = probed(capsys, deployment)
    finally:
        engine.functions.update(saved)
    refused = [c for c in report["calls"] if c["result"] == "refused"]
    assert code == 1 and not report["ok"]
    assert {(c["function"], c["call"]) for c in refused} == {("LaunchBatch", "ec2:RunInstances")}
    assert len(refused) == 5  # every region
    assert refused[0]["detail"] == "UnauthorizedOperation"
    assert refused[0]["decoded"].startswith(f"ec2:RunInstances on arn:aws:ec2:{refused[0]['region']}:")
    assert ":instance/*: no statement allows it" in refused[0]["decoded"]
