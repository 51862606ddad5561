"""One Lambda per task: arm64, the Powertools layer, JSON logs, tracing, sized per task, a lean asset."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig

import pytest
from gpufill import constants

from infra_helpers import REGION


def test_one_function_per_task_with_its_handler(task_functions):
    assert set(task_functions) == set(constants.LAMBDA_TASKS)
    for placeholder, (_, function) in task_functions.items():
        assert function["Properties"]["Handler"] == constants.LAMBDA_TASKS[placeholder]


def test_every_function_but_answer_approval_has_the_probe_alias_on_its_latest_code(synthesized, task_functions):
    """`gpufill doctor --probe` invokes only this alias; a function invoked through it only probes.
    AnswerApproval has none: only its URL may reach it, so the approver is the one AWS authenticated."""
    aliases = synthesized.resources("AWS::Lambda::Alias").values()
    by_function = {a["Properties"]["FunctionName"]["Ref"]: a["Properties"] for a in aliases}
    names = {r["Properties"].get("FunctionName"): i for i, r in synthesized.resources("AWS::Lambda::Function").items()}
    env = synthesized.stack.node.try_get_context("env")
    outside = {names[constants.function_name(env, task)] for task in (*constants.EVENT_FUNCTIONS, *constants.SWEEP_FUNCTIONS, *constants.REMINDER_FUNCTIONS, *constants.REFRESH_FUNCTIONS)}
    assert set(by_function) == {logical_id for logical_id, _ in task_functions.values()} | outside
    assert names[constants.function_name(env, constants.ANSWER_APPROVAL_TASK)] not in by_function
    assert {(a["Name"], a["FunctionVersion"]) for a in by_function.values()} == {(constants.PROBE_ALIAS, "$LATEST")}


def test_every_task_function_is_arm64_python_with_the_powertools_layer(synthesized, task_functions):
    # The layer is the one AWS's public parameter names for the pinned release, resolved at deploy.
    [(parameter, declared)] = [
        (name, p) for name, p in synthesized.json.get("Parameters", {}).items()
        if p.get("Default") == constants.powertools_layer_parameter()
    ]
    assert declared["Type"] == "AWS::SSM::Parameter::Value<String>"
    assert constants.powertools_layer_parameter() == (
        f"/aws/service/powertools/python/arm64/python{constants.LAMBDA_PYTHON_VERSION}/{constants.POWERTOOLS_VERSION}"
    )
    for _, function in task_functions.values():
        props = function["Properties"]
        assert props["Architectures"] == ["arm64"]
        assert props["Runtime"] == f"python{constants.LAMBDA_PYTHON_VERSION}"
        assert props["Runtime"] in ("python3.12", "python3.13")
        assert props["Layers"] == [{"Ref": parameter}]


def test_a_pinned_layer_number_is_used_as_given():
    assert constants.powertools_layer_arn(REGION, 41) == (
        f"arn:aws:lambda:{REGION}:017000801446:layer:AWSLambdaPowertoolsPythonV3-python313-arm64:41"
    )


def test_json_logs_to_a_retained_log_group_and_active_tracing(synthesized, task_functions):
    log_groups = synthesized.resources("AWS::Logs::LogGroup")
    for _, function in task_functions.values():
        props = function["Properties"]
        assert props["TracingConfig"] == {"Mode": "Active"}
        assert props["LoggingConfig"]["LogFormat"] == "JSON"
        group = log_groups[props["LoggingConfig"]["LogGroup"]["Ref"]]
        assert group["Properties"]["LogGroupName"] == f"/aws/lambda/{props['FunctionName']}"
        assert group["Properties"]["RetentionInDays"] > 0


def test_environment_names_the_deployment(synthesized, task_functions):
    expected = {
        constants.ENV_INSTANCES_TABLE,
        constants.ENV_CAPACITY_TABLE,
        constants.ENV_REGIONS_PARAMETER,
        constants.ENV_INSTANCE_PROFILE_ARN,
        constants.ENV_STARTUP_BUCKET,
        constants.ENV_APPROVAL_TOPIC_ARN,
        constants.ENV_DEPLOYMENT,
        constants.ENV_SCHEDULE_GROUP,
        constants.ENV_SCHEDULER_ROLE_ARN,
        constants.ENV_REMINDER_FUNCTION_ARN,
        "POWERTOOLS_SERVICE_NAME",
        "POWERTOOLS_METRICS_NAMESPACE",
    }
    names = {k: t["Properties"]["TableName"] for k, t in synthesized.resources("AWS::DynamoDB::Table").items()}
    env = synthesized.stack.node.try_get_context("env")
    for _, function in task_functions.values():
        variables = function["Properties"]["Environment"]["Variables"]
        assert set(variables) == expected
        assert names[variables[constants.ENV_INSTANCES_TABLE]["Ref"]] == constants.instances_table_name(env)
        assert names[variables[constants.ENV_CAPACITY_TABLE]["Ref"]] == constants.capacity_table_name(env)
        assert variables["POWERTOOLS_SERVICE_NAME"] == constants.SERVICE_NAME
        assert variables[constants.ENV_DEPLOYMENT] == env  # tags and ClientTokens name the deployment
        assert variables["POWERTOOLS_METRICS_NAMESPACE"] == constants.METRICS_NAMESPACE
        assert variables[constants.ENV_SCHEDULE_GROUP] == constants.schedule_group_name(env)


def test_memory_and_timeout_come_from_the_task_table(task_functions):
    from gpufill_stack.task_permissions import TASKS

    for placeholder, (_, function) in task_functions.items():
        assert function["Properties"]["MemorySize"] == TASKS[placeholder].memory_mb
        assert function["Properties"]["Timeout"] == TASKS[placeholder].timeout_seconds


def _asset(synthesized, task_functions):
    keys = {function["Properties"]["Code"]["S3Key"] for _, function in task_functions.values()}
    assert len(keys) == 1, "every task shares one code asset"
    return synthesized.asset_dir(keys.pop())


def test_asset_leaves_out_the_local_engine_cli_tests_and_caches(synthesized, task_functions):
    asset = _asset(synthesized, task_functions)
    assert (asset / "gpufill" / "handlers").is_dir()
    assert (asset / "gpufill" / "catalog").is_dir(), "the price and latency catalogs ship with the code"
    assert not (asset / "gpufill" / "local").exists()
    assert not (asset / "gpufill" / "cli").exists()
    present = {p.relative_to(asset).as_posix() for p in asset.rglob("*")}
    assert not [p for p in present if "__pycache__" in p or p.endswith(".pyc") or ".egg-info" in p]
    assert not [p for p in present if p.startswith("tests")]
    from gpufill_stack.functions import ASSET_EXCLUDE

    assert "gpufill/local" in ASSET_EXCLUDE and "gpufill/cli" in ASSET_EXCLUDE


def test_every_handler_imports_from_the_asset_alone(synthesized, task_functions):
    """What Lambda will do: import each handler with only the asset, boto3 and the layer's packages.

    The interpreter runs without site (-S) so the editable install of gpufill is not seen;
    site-packages stands in for the runtime's boto3 and the Powertools layer.
    """
    asset = str(_asset(synthesized, task_functions))
    handlers = {**constants.LAMBDA_TASKS, **constants.EVENT_FUNCTIONS}.values()  # StartRefill too
    modules = sorted({handler.rsplit(".", 1)[0] for handler in handlers})
    code = f"""
import importlib, sys
sys.path[:0] = [{asset!r}, {sysconfig.get_paths()["purelib"]!r}]
for name in {modules!r}:
    importlib.import_module(name)
import gpufill
assert gpufill.__file__.startswith({asset!r}), gpufill.__file__
stray = sorted(m for m in sys.modules if m.split(".")[0] == "moto" or m.startswith(("gpufill.local", "gpufill.cli")))
assert not stray, stray
"""
    env = {
        "PATH": os.environ.get("PATH", ""),
        "AWS_REGION": REGION,
        "AWS_DEFAULT_REGION": REGION,
        "POWERTOOLS_TRACE_DISABLED": "true",
        "POWERTOOLS_METRICS_DISABLED": "true",
    }
    result = subprocess.run([sys.executable, "-S", "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr


def test_a_task_without_a_permission_row_fails_synth_loudly():
    from gpufill_stack.functions import MissingTaskPermissions, _check_table
    from gpufill_stack.task_permissions import TASKS

    tasks = {**constants.LAMBDA_TASKS, "BrandNewFunctionArn": "gpufill.handlers.brand_new.handler"}
    with pytest.raises(MissingTaskPermissions, match="Add a row .* for: BrandNewFunctionArn"):
        _check_table(tasks, TASKS)


def test_a_row_without_a_task_fails_synth_loudly():
    from gpufill_stack.functions import MissingTaskPermissions, _check_table
    from gpufill_stack.task_permissions import TASKS

    tasks = {k: v for k, v in constants.LAMBDA_TASKS.items() if k != "ReportResultFunctionArn"}
    with pytest.raises(MissingTaskPermissions, match="Remove .*: ReportResultFunctionArn"):
        _check_table(tasks, TASKS)


def test_the_functions_construct_refuses_a_task_without_a_row():
    from aws_cdk import App, Stack
    from gpufill_stack.functions import Functions, MissingTaskPermissions

    stack = Stack(App(), "Probe")
    with pytest.raises(MissingTaskPermissions, match="BrandNewFunctionArn"):
        Functions(
            stack,
            "Functions",
            env="probe",
            resources=None,  # the table is checked before anything is built
            environment={},
            tasks={"BrandNewFunctionArn": "gpufill.handlers.brand_new.handler"},
        )
