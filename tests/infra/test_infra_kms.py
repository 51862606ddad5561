"""A customer-managed EBS key (cdk.json context `ebs_kms_key_arn`): the launch role may use it
through EC2 only, every Lambda learns its ARN, and the synth stays clean under cdk-nag.

The same synth turns the sweep off (`sweep_every: off`): a full synth costs make test some 20
seconds, so the optional settings share one, and the sweep's absence is checked here too."""

from __future__ import annotations

import json

import pytest
from gpufill import constants

from infra_helpers import ACCOUNT, REGION, as_list, statements_of_role

KEY = f"arn:aws:kms:eu-central-1:{ACCOUNT}:key/1234abcd-12ab-34cd-56ef-1234567890ab"


@pytest.fixture(scope="module")
def with_key(tmp_path_factory):
    from gpufill_stack.deployment import build_app, new_app

    outdir = tmp_path_factory.mktemp("cdk.out.kms")
    app = new_app(context={"account": ACCOUNT, "region": REGION, "ebs_kms_key_arn": KEY, "sweep_every": "off", "facts_refresh_every": "off"}, outdir=str(outdir))
    stack = build_app(app)
    app.synth()  # raises on any cdk-nag finding left unacknowledged
    return json.loads((outdir / f"{stack.artifact_id}.template.json").read_text()), stack.node.try_get_context("env")


def _functions(template, env):
    return {
        r["Properties"]["FunctionName"]: r
        for r in template["Resources"].values()
        if r["Type"] == "AWS::Lambda::Function" and "FunctionName" in r["Properties"]
    }


def test_only_the_launch_role_may_use_the_key_and_only_through_ec2_in_its_region(with_key):
    template, env = with_key
    holders = {}
    for name, function in _functions(template, env).items():
        role_id = function["Properties"]["Role"]["Fn::GetAtt"][0]
        kms = [s for s in statements_of_role(template, role_id) if any(a.startswith("kms:") for a in as_list(s["Action"]))]
        kms = [s for s in kms if KEY in as_list(s["Resource"])]  # the topic's own key is another grant (operations)
        if kms:
            holders[name] = kms
    assert list(holders) == [constants.function_name(env, "LaunchBatchFunctionArn")]
    [statement] = next(iter(holders.values()))
    assert sorted(as_list(statement["Action"])) == [
        "kms:CreateGrant", "kms:Decrypt", "kms:DescribeKey", "kms:GenerateDataKeyWithoutPlaintext", "kms:ReEncrypt*",
    ]
    assert as_list(statement["Resource"]) == [KEY]
    via = statement["Condition"]["StringEquals"]["kms:ViaService"]
    assert json.dumps(via).startswith('{"Fn::Join": ["", ["ec2.eu-central-1.", {"Ref": "AWS::URLSuffix"}')


def test_every_lambda_reads_the_key_arn(with_key):
    template, env = with_key
    for function in _functions(template, env).values():
        assert function["Properties"]["Environment"]["Variables"][constants.ENV_EBS_KMS_KEY_ARN] == KEY


def test_without_a_key_there_is_no_kms_grant_and_no_variable(synthesized):
    text = json.dumps(synthesized.json)
    assert '"kms:CreateGrant"' not in text and constants.ENV_EBS_KMS_KEY_ARN not in text


def test_with_the_sweep_off_neither_its_function_nor_its_schedule_nor_its_alarms_are_deployed(with_key, synthesized):
    template, env = with_key
    sweep = constants.function_name(env, "Sweep")
    assert sweep not in _functions(template, env) and sweep in _functions(synthesized.json, env)
    refresh = constants.function_name(env, constants.REFRESH_TASK)  # facts_refresh_every: off, likewise
    assert refresh not in _functions(template, env) and refresh in _functions(synthesized.json, env)
    kinds = {r["Type"] for r in template["Resources"].values()}
    assert "AWS::Scheduler::Schedule" not in kinds and "AWS::Scheduler::Schedule" in {r["Type"] for r in synthesized.json["Resources"].values()}
    alarms = {r["Properties"]["AlarmName"] for r in template["Resources"].values() if r["Type"] == "AWS::CloudWatch::Alarm"}
    prefix = constants.alarm_name_prefix(env)
    assert not {f"{prefix}Sweep-errors", f"{prefix}untracked-instances", f"{prefix}approvals-waiting"} & alarms
    assert f"{prefix}runs-failed" in alarms
