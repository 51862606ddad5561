"""The state machine: the ASL file inlined, every placeholder substituted, logging ALL, X-Ray on."""

from __future__ import annotations

import json

import pytest
from gpufill import constants
from gpufill_stack.paths import PROVISIONER_ASL, STATEMACHINE_DIR

from infra_helpers import get_att

ASL_FILES = sorted(STATEMACHINE_DIR.glob("*.asl.json"))
# What a failed Lambda invoke is reported as (Step Functions' names; the local engine's faults make them).
LAMBDA_INVOKE_ERRORS = ("Sandbox.Timedout", "Lambda.Unknown", "Lambda.ServiceException")


def placeholders(definition: str) -> set[str]:
    # gpufill_stack.workflow imports the CDK (jsii's Node runtime): imported when a test runs, not
    # when every pytest-xdist worker collects this module.
    from gpufill_stack.workflow import placeholders as of_definition

    return of_definition(definition)


def test_there_is_a_definition():
    assert PROVISIONER_ASL in ASL_FILES


@pytest.mark.parametrize("path", ASL_FILES, ids=lambda p: p.name)
def test_every_placeholder_has_a_substitution(path):
    missing = placeholders(path.read_text()) - set(constants.LAMBDA_TASKS)
    assert not missing, f"{path.name} uses placeholders no task substitutes: {sorted(missing)}"


def test_every_substitution_has_a_placeholder():
    used = set().union(*(placeholders(p.read_text()) for p in ASL_FILES))
    orphans = set(constants.LAMBDA_TASKS) - used
    assert not orphans, f"LAMBDA_TASKS entries no state machine uses (a Lambda nothing invokes): {sorted(orphans)}"


def test_template_substitutes_exactly_the_definition_placeholders(synthesized, task_functions):
    (machine,) = synthesized.resources("AWS::StepFunctions::StateMachine").values()
    substitutions = machine["Properties"]["DefinitionSubstitutions"]
    assert set(substitutions) == placeholders(PROVISIONER_ASL.read_text())
    for placeholder, value in substitutions.items():
        assert value == get_att(task_functions[placeholder][0])


def test_definition_is_inlined_from_the_file(synthesized):
    (machine,) = synthesized.resources("AWS::StepFunctions::StateMachine").values()
    assert json.loads(machine["Properties"]["DefinitionString"]) == json.loads(PROVISIONER_ASL.read_text())


def test_standard_named_logging_all_with_retention_and_tracing(synthesized):
    (machine,) = synthesized.resources("AWS::StepFunctions::StateMachine").values()
    props = machine["Properties"]
    env = synthesized.stack.node.try_get_context("env")
    assert props["StateMachineType"] == "STANDARD"
    assert props["StateMachineName"] == constants.state_machine_name(env)
    assert props["TracingConfiguration"] == {"Enabled": True}
    logging = props["LoggingConfiguration"]
    assert logging["Level"] == "ALL"
    assert logging["IncludeExecutionData"] is True
    (destination,) = logging["Destinations"]
    group_id = destination["CloudWatchLogsLogGroup"]["LogGroupArn"]["Fn::GetAtt"][0]
    group = synthesized.resources("AWS::Logs::LogGroup")[group_id]["Properties"]
    assert group["RetentionInDays"] > 0
    assert group["LogGroupName"].startswith("/aws/vendedlogs/states/")


def test_an_unknown_placeholder_fails_synth(tmp_path):
    from aws_cdk import App, Stack
    from gpufill_stack.workflow import Workflow

    definition = tmp_path / "broken.asl.json"
    definition.write_text(json.dumps({"StartAt": "A", "States": {"A": {"Type": "Task", "Resource": "${NoSuchFunctionArn}", "End": True}}}))
    with pytest.raises(ValueError, match="NoSuchFunctionArn"):
        Workflow(Stack(App(), "Probe"), "Workflow", env="probe", functions={}, definition_file=definition)


def test_no_task_retries_a_timeout_it_cannot_meet():
    """A Lambda task is bounded by its function's own timeout, which Step Functions reports as
    Sandbox.Timedout (retried everywhere); States.Timeout only fires with TimeoutSeconds."""
    import json

    from gpufill.local.engine import STATEMACHINE

    def tasks(states):
        for state in states.values():
            if state["Type"] == "Task":
                yield state
            if state["Type"] == "Map":
                yield from tasks(state["ItemProcessor"]["States"])

    for state in tasks(json.loads(STATEMACHINE.read_text())["States"]):
        names = {e for r in state.get("Retry", []) for e in r["ErrorEquals"]}
        if state["Resource"].startswith("${"):
            assert "Sandbox.Timedout" in names and "TransientAwsError" in names
            # Lambda's invoke failures share one retrier, so tests/faults/test_lambda_faults.py runs
            # Sandbox.Timedout in make test and the other two in make test-all.
            assert any(set(LAMBDA_INVOKE_ERRORS) <= set(r["ErrorEquals"]) for r in state["Retry"]), state["Resource"]
        if "States.Timeout" in names:
            assert "TimeoutSeconds" in state or "TimeoutSecondsPath" in state or "HeartbeatSeconds" in state
