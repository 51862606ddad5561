"""The engine deploys what the CDK app synthesizes: each function's runtime, memory, timeout,
environment and role; the roles with their policies; the state machine with its role. The
synthesized templates are cached by their inputs."""

import json
import shutil
import threading
import time
from unittest import mock

import pytest

from gpufill import constants
from gpufill.local.deploy import model, synth
from gpufill.local.deploy.intrinsics import Resolver, UnresolvableIntrinsic

CONTEXT = {"env": "local", "account": model.LOCAL_ACCOUNT, "region": model.HOME_REGION}


@pytest.fixture(scope="module")
def assembly():
    return synth.templates(CONTEXT)


def template_functions(assembly) -> dict[str, dict]:
    """The Lambda functions of the synthesized home stack, by FunctionName, as CloudFormation gets them."""
    [home] = [s for s in assembly["stacks"] if s["name"] == constants.stack_name("local")]
    return {
        r["Properties"]["FunctionName"]: r["Properties"]
        for r in home["template"]["Resources"].values()
        if r["Type"] == "AWS::Lambda::Function" and "FunctionName" in r["Properties"]
    }


def test_every_function_has_the_templates_runtime_memory_timeout_and_architecture(engine, assembly):
    functions = template_functions(assembly)
    assert set(functions) == {f["FunctionName"] for f in engine.client("lambda").list_functions()["Functions"]}
    for name, expected in functions.items():
        config = engine.client("lambda").get_function_configuration(FunctionName=name)
        assert (config["Runtime"], config["MemorySize"], config["Timeout"], config["Architectures"], config["Handler"]) == (
            expected["Runtime"], expected["MemorySize"], expected["Timeout"], expected["Architectures"], expected["Handler"]
        ), name
        assert config["Runtime"] == f"python{constants.LAMBDA_PYTHON_VERSION}"
    # per-function settings, not one size for all
    assert len({f["Timeout"] for f in functions.values()}) > 1 and len({f["MemorySize"] for f in functions.values()}) > 1


def test_every_function_has_its_own_role_holding_its_policies(engine):
    iam = engine.client("iam")
    app = engine.deployments["local"].app
    roles = set()
    for function in app.home.functions.values():
        config = engine.client("lambda").get_function_configuration(FunctionName=function.name)
        role = app.role_for_function(function.task)
        assert config["Role"] == role.arn and iam.get_role(RoleName=role.name)["Role"]["Arn"] == role.arn
        deployed = [
            iam.get_role_policy(RoleName=role.name, PolicyName=p)["PolicyDocument"]
            for p in iam.list_role_policies(RoleName=role.name)["PolicyNames"]
        ]
        assert sorted(deployed, key=json.dumps) == sorted(role.policies, key=json.dumps)
        roles.add(role.arn)
    assert len(roles) == len(app.home.functions)
    # LaunchBatch may launch only instances tagged for this deployment, on the account's ARNs
    statements = [s for p in app.role_for_function("LaunchBatch").policies for s in p["Statement"]]
    [tagged] = [s for s in statements if s["Action"] == "ec2:RunInstances" and "Condition" in s]
    assert tagged["Resource"] == f"arn:aws:ec2:*:{engine.account}:instance/*"
    assert tagged["Condition"]["StringEquals"][f"aws:RequestTag/{constants.TAG_DEPLOYMENT}"] == "local"


def test_the_environment_names_the_resources_the_engine_made(engine):
    variables = engine.client("lambda").get_function_configuration(FunctionName="gpufill-local-LaunchBatch")["Environment"]["Variables"]
    profile_name = variables[constants.ENV_INSTANCE_PROFILE_ARN].rsplit("/", 1)[1]
    assert engine.client("iam").get_instance_profile(InstanceProfileName=profile_name)["InstanceProfile"]["Roles"][0]["RoleName"] == (
        engine.deployments["local"].app.instance_role.name
    )
    engine.client("s3").head_bucket(Bucket=variables[constants.ENV_STARTUP_BUCKET])
    engine.client("dynamodb").describe_table(TableName=variables[constants.ENV_INSTANCES_TABLE])
    assert variables[constants.ENV_APPROVAL_TOPIC_ARN] == engine.approval_topic_arn
    assert variables["POWERTOOLS_SERVICE_NAME"] == constants.SERVICE_NAME
    refill = engine.client("lambda").get_function_configuration(FunctionName="gpufill-local-StartRefill")["Environment"]["Variables"]
    assert refill[constants.ENV_STATE_MACHINE_ARN] == engine.state_machine_arn


def test_the_state_machine_runs_with_its_role_which_may_invoke_exactly_its_functions(engine):
    app = engine.deployments["local"].app
    described = engine.client("stepfunctions").describe_state_machine(stateMachineArn=engine.state_machine_arn)
    assert described["roleArn"] == app.state_machine_role.arn
    statements = [s for p in app.state_machine_role.policies for s in p["Statement"]]
    [invoke] = [s for s in statements if s["Action"] == "lambda:InvokeFunction"]
    assert sorted(invoke["Resource"]) == sorted(app.state_machine.substitutions.values())
    assert set(app.state_machine.substitutions.values()) <= {f["FunctionArn"] for f in engine.client("lambda").list_functions()["Functions"]}


# --- the cache --------------------------------------------------------------------------------


@pytest.fixture
def checkout(tmp_path):
    """A copy of the synth's inputs, which a test may edit."""
    repo = tmp_path / "repo"
    for path in synth.input_files():
        target = repo / path.relative_to(synth.REPO_ROOT)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, target)
    return repo


def counting_synth(assembly, pause=0.0):
    calls = []

    def synthesize(context, repo):
        calls.append(context)
        time.sleep(pause)
        return {"stacks": assembly["stacks"], "imported": [str(p) for p in synth.input_files(repo) if p.suffix == ".py"]}

    return calls, synthesize


def test_a_second_load_reads_the_cache_and_an_input_change_synthesizes_again(tmp_path, checkout, assembly):
    calls, fake = counting_synth(assembly)
    cache = tmp_path / "cache"
    with mock.patch.object(synth, "synthesize", fake):
        first = synth.templates(CONTEXT, cache_dir=cache, repo=checkout)
        assert synth.templates(CONTEXT, cache_dir=cache, repo=checkout) == first
        assert len(calls) == 1
        timeouts = checkout / "cdk/gpufill_stack/task_permissions.py"
        timeouts.write_text(timeouts.read_text() + "\n# a changed timeout\n")
        synth.templates(CONTEXT, cache_dir=cache, repo=checkout)
        assert len(calls) == 2
        synth.templates({**CONTEXT, "env": "prod"}, cache_dir=cache, repo=checkout)  # each deployment its own
        assert len(calls) == 3
    assert sorted(p.name.split("-")[0] for p in cache.glob("*.json")) == ["local", "prod"]  # the stale one is gone


def test_the_library_versions_are_part_of_the_key(checkout):
    before = synth.digest(CONTEXT, checkout)
    with mock.patch.object(synth.metadata, "version", lambda name: "99.0.0"):
        assert synth.digest(CONTEXT, checkout) != before


def test_processes_asking_at_once_synthesize_once(tmp_path, checkout, assembly):
    calls, fake = counting_synth(assembly, pause=0.3)
    cache = tmp_path / "cache"
    results = []
    with mock.patch.object(synth, "synthesize", fake):
        workers = [threading.Thread(target=lambda: results.append(synth.templates(CONTEXT, cache_dir=cache, repo=checkout))) for _ in range(4)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
    assert len(calls) == 1 and len(results) == 4 and all(r == results[0] for r in results)
    assert not list(cache.glob("*.tmp"))


def test_an_app_import_the_cache_does_not_hash_fails_the_synth(tmp_path, checkout, assembly):
    def synthesize(context, repo):
        return {"stacks": assembly["stacks"], "imported": [str(repo / "functions/gpufill/policy/fill.py")]}

    with mock.patch.object(synth, "synthesize", synthesize), pytest.raises(synth.SynthError, match="policy/fill.py"):
        synth.templates(CONTEXT, cache_dir=tmp_path / "cache", repo=checkout)


# --- intrinsics ---------------------------------------------------------------------------------

TEMPLATE = {
    "Resources": {
        "Role": {"Type": "AWS::IAM::Role", "Properties": {}},
        "Queue": {"Type": "AWS::SNS::Topic", "Properties": {"TopicName": "named"}},
    },
    "Parameters": {"Stage": {"Type": "String", "Default": "blue"}},
}


@pytest.mark.parametrize(
    ("expression", "value"),
    [
        ({"Fn::Sub": "arn:${AWS::Partition}:iam::${AWS::AccountId}:role/x"}, "arn:aws:iam::123456789012:role/x"),
        ({"Fn::Sub": "${Role.Arn}|${Queue}|${Stage}|${!aws:username}"},
         "arn:aws:iam::123456789012:role/gpufill-t-Role|arn:aws:sns:eu-west-1:123456789012:named|blue|${aws:username}"),
        ({"Fn::Sub": ["${A}-${AWS::Region}", {"A": {"Ref": "Role"}}]}, "gpufill-t-Role-eu-west-1"),
        ({"Fn::Select": [1, {"Fn::Split": [":", {"Fn::GetAtt": ["Queue", "TopicArn"]}]}]}, "aws"),
        ({"Fn::Join": ["/", [{"Ref": "AWS::Region"}, {"Ref": "AWS::NoValue"}, "x"]]}, "eu-west-1/x"),
        ({"Fn::ImportValue": "shared-bus"}, "arn:aws:events:eu-west-1:123456789012:event-bus/shared"),
        # an IAM policy variable outside Fn::Sub is the policy's, not CloudFormation's
        ("arn:aws:s3:::b/${aws:username}/*", "arn:aws:s3:::b/${aws:username}/*"),
    ],
)
def test_intrinsics_resolve_to_the_simulated_accounts_arns(expression, value):
    exports = {"shared-bus": "arn:aws:events:eu-west-1:123456789012:event-bus/shared"}
    resolver = Resolver(TEMPLATE, stack_name="gpufill-t", account="123456789012", region="eu-west-1", imports=exports.__getitem__)
    assert resolver.resolve(expression) == value


def test_an_attribute_the_engine_does_not_know_is_refused_by_name():
    resolver = Resolver(TEMPLATE, stack_name="gpufill-t", account="123456789012", region="eu-west-1")
    with pytest.raises(UnresolvableIntrinsic, match="Role.Nope"):
        resolver.resolve({"Fn::GetAtt": ["Role", "Nope"]})
