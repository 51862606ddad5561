"""Operations: every alarm's metric, threshold and action; the dashboard names only metrics the
code emits; the topic's key lets CloudWatch and every publisher use it (docs/operations.md)."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest
from gpufill import constants

from infra_helpers import ACCOUNT, REGION, as_list, get_att, statements_of_role

HANDLERS = Path(__file__).resolve().parents[2] / "functions" / "gpufill" / "handlers"
# What AWS itself publishes for a state machine and a function (CloudWatch user guides).
AWS_METRICS = {
    "AWS/States": {"ExecutionsSucceeded", "ExecutionsFailed", "ExecutionsTimedOut", "ExecutionsAborted", "ExecutionTime"},
    "AWS/Lambda": {"Errors", "Throttles"},
}


def emitted_metrics() -> set[str]:
    """Every metric name a handler emits: add_metric(name="...") literals, and the METRIC_*
    constants a handler passes to add_metric or observability.count."""
    names: set[str] = set()
    for path in HANDLERS.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Call):
                continue
            called = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            if called not in ("add_metric", "count"):
                continue
            values = [k.value for k in node.keywords if k.arg == "name"] + node.args[:1]
            for value in values:
                if isinstance(value, ast.Constant) and isinstance(value.value, str):
                    names.add(value.value)
                elif isinstance(value, ast.Name) and value.id.startswith("METRIC_"):
                    names.add(getattr(constants, value.id))
    return names


def _text(value) -> str:
    """A template value (Fn::Join of strings and tokens) as text, tokens as <ref>."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and "Fn::Join" in value:
        return "".join(_text(part) for part in value["Fn::Join"][1])
    return "<ref>"


def _alarms(template: dict) -> dict[str, dict]:
    return {
        r["Properties"]["AlarmName"]: r["Properties"]
        for r in template["Resources"].values()
        if r["Type"] == "AWS::CloudWatch::Alarm"
    }


def _topic_id(template: dict) -> str:
    [topic] = [i for i, r in template["Resources"].items() if r["Type"] == "AWS::SNS::Topic"]
    return topic


def test_every_alarm_reads_its_metric_and_notifies_the_topic(synthesized):
    template, env = synthesized.json, synthesized.stack.node.try_get_context("env")
    alarms = _alarms(template)
    prefix = constants.alarm_name_prefix(env)
    for outcome, metric in {"failed": "ExecutionsFailed", "timed-out": "ExecutionsTimedOut", "aborted": "ExecutionsAborted"}.items():
        alarm = alarms[f"{prefix}runs-{outcome}"]
        assert (alarm["Namespace"], alarm["MetricName"], alarm["Statistic"]) == ("AWS/States", metric, "Sum")
        assert alarm["Threshold"] == 1 and alarm["ComparisonOperator"] == "GreaterThanOrEqualToThreshold"
    every_function = [*constants.LAMBDA_TASKS, *constants.EVENT_FUNCTIONS, *constants.SWEEP_FUNCTIONS, *constants.REFRESH_FUNCTIONS]
    for placeholder in every_function:
        task = placeholder.removesuffix("FunctionArn")
        for kind, metric in (("errors", "Errors"), ("throttles", "Throttles")):
            alarm = alarms[f"{prefix}{task}-{kind}"]
            assert (alarm["Namespace"], alarm["MetricName"], alarm["Threshold"]) == ("AWS/Lambda", metric, 1)
    untracked = alarms[f"{prefix}untracked-instances"]
    assert (untracked["Namespace"], untracked["MetricName"]) == (constants.METRICS_NAMESPACE, constants.METRIC_UNTRACKED_INSTANCES)
    assert {"Name": constants.METRIC_DIMENSION_DEPLOYMENT, "Value": env} in untracked["Dimensions"]
    assert alarms[f"{prefix}approvals-waiting"]["MetricName"] == constants.METRIC_STALE_APPROVALS
    # An approval request the topic refused: the approval waits unseen until someone looks.
    refused = alarms[f"{prefix}approvals-not-published"]
    assert (refused["MetricName"], refused["Statistic"], refused["Threshold"]) == (constants.METRIC_APPROVALS_NOT_PUBLISHED, "Sum", 1)
    assert f"{prefix}spend-per-hour" not in alarms  # cdk.json sets no alarm_spend_per_hour
    topic = {"Ref": _topic_id(template)}
    for name, alarm in alarms.items():
        assert alarm["AlarmActions"] == [topic], name
        assert alarm["TreatMissingData"] == "notBreaching", name
        assert name.startswith(prefix)
        if alarm["Namespace"] == constants.METRICS_NAMESPACE:
            assert alarm["MetricName"] in emitted_metrics(), name
        else:
            assert alarm["MetricName"] in AWS_METRICS[alarm["Namespace"]], name


def test_the_dashboard_names_only_metrics_the_code_emits(synthesized):
    [dashboard] = synthesized.resources("AWS::CloudWatch::Dashboard").values()
    body = _text(dashboard["Properties"]["DashboardBody"])
    named = set(re.findall(r'\["' + constants.METRICS_NAMESPACE + r'","(\w+)"', body))
    named |= set(re.findall(r'MetricName=\\"(\w+)\\"', body))
    assert named >= {constants.METRIC_HOURLY_COST, constants.METRIC_CAPACITY_ANSWERS, constants.METRIC_RUNS_FINISHED}
    assert named <= emitted_metrics(), named - emitted_metrics()
    for namespace, metric in re.findall(r'\["(AWS/\w+)","(\w+)"', body):
        assert metric in AWS_METRICS[namespace]
    assert dashboard["Properties"]["DashboardName"] == constants.dashboard_name(synthesized.stack.node.try_get_context("env"))


def test_time_to_fill_reads_the_fills_the_result_step_reports_not_every_executions_time(synthesized):
    """The widget names TimeToFillSeconds, which ReportResult emits only for a run that ended with
    instances; the state machine's ExecutionTime (every plan, status view and failure) is not on it."""
    [dashboard] = synthesized.resources("AWS::CloudWatch::Dashboard").values()
    widgets = json.loads(_text(dashboard["Properties"]["DashboardBody"]).replace("<ref>", "ref"))["widgets"]
    [widget] = [w for w in widgets if w["properties"].get("title", "").startswith("Time to fill")]
    named = {m[1] for m in widget["properties"]["metrics"]}
    assert named == {constants.METRIC_TIME_TO_FILL} and constants.METRIC_TIME_TO_FILL in emitted_metrics()
    assert "ExecutionTime" not in json.dumps(widgets)
    assert {m[-1]["stat"] for m in widget["properties"]["metrics"]} == {"p50", "p90"}


def test_cloudwatch_and_every_publisher_may_use_the_topic_key(synthesized):
    template = synthesized.json
    [key_id] = [i for i, r in template["Resources"].items() if r["Type"] == "AWS::KMS::Key"]
    key = template["Resources"][key_id]["Properties"]
    assert key["EnableKeyRotation"] is True
    [cloudwatch] = [s for s in key["KeyPolicy"]["Statement"] if s.get("Sid") == "CloudWatchAlarmsPublish"]
    assert cloudwatch["Principal"] == {"Service": "cloudwatch.amazonaws.com"}
    assert sorted(as_list(cloudwatch["Action"])) == ["kms:Decrypt", "kms:GenerateDataKey"]
    assert cloudwatch["Condition"]["StringEquals"]["aws:SourceAccount"] == ACCOUNT
    topic = _topic_id(template)
    publishers = 0
    for role_id in [i for i, r in template["Resources"].items() if r["Type"] == "AWS::IAM::Role"]:
        statements = statements_of_role(template, role_id)
        publishes = any("sns:Publish" in as_list(s["Action"]) and {"Ref": topic} in as_list(s["Resource"]) for s in statements)
        if publishes:
            publishers += 1
            assert any(
                set(as_list(s["Action"])) == {"kms:GenerateDataKey", "kms:Decrypt"} and as_list(s["Resource"]) == [get_att(key_id)]
                for s in statements
            ), role_id
    assert publishers >= 4  # the approval tasks, the sweep, Scheduler's reminders


@pytest.mark.parametrize("sweep_every", ["30", "off"])
def test_the_spend_alarm_and_the_sweep_follow_the_settings(tmp_path, sweep_every):
    """One small synth of the Operations construct alone (no nag, no functions asset)."""
    from aws_cdk import App, Stack
    from aws_cdk import aws_sns as sns
    from aws_cdk import aws_stepfunctions as sfn
    from aws_cdk.assertions import Template
    from gpufill_stack.operations import Operations

    app = App(outdir=str(tmp_path))
    stack = Stack(app, "Ops", env={"account": ACCOUNT, "region": REGION})
    machine = sfn.StateMachine(stack, "Machine", definition_body=sfn.DefinitionBody.from_chainable(sfn.Pass(stack, "P")))
    minutes = None if sweep_every == "off" else int(sweep_every)
    Operations(
        stack, "Operations", env="prod", topic=sns.Topic(stack, "T"), state_machine=machine, functions={},
        sweep_every_minutes=minutes, alarm_spend_per_hour=None if minutes is None else 12.5,
    )
    alarms = _alarms(Template.from_stack(stack).to_json())
    if minutes is None:
        assert sorted(alarms) == ["gpufill-prod-approvals-not-published", "gpufill-prod-runs-aborted", "gpufill-prod-runs-failed",
                                  "gpufill-prod-runs-timed-out"]
        return
    spend = alarms["gpufill-prod-spend-per-hour"]
    assert (spend["MetricName"], spend["Statistic"], spend["Period"]) == (constants.METRIC_HOURLY_COST, "Maximum", 1800)
    assert spend["Threshold"] == 12.5 and spend["ComparisonOperator"] == "GreaterThanThreshold"
    assert json.dumps(spend["Dimensions"]).count('"prod"') == 1


def test_the_sweep_runs_every_15_minutes_as_the_scheduler_role_of_the_deployments_group(synthesized):
    template, env = synthesized.json, synthesized.stack.node.try_get_context("env")
    [p] = [s["Properties"] for s in synthesized.resources("AWS::Scheduler::Schedule").values()
           if s["Properties"]["Name"] == constants.sweep_schedule_name(env)]
    assert (p["Name"], p["GroupName"], p["ScheduleExpression"]) == (constants.sweep_schedule_name(env), constants.schedule_group_name(env), "rate(15 minutes)")
    [(function_id, _)] = [
        (i, r) for i, r in synthesized.resources("AWS::Lambda::Function").items()
        if r["Properties"].get("FunctionName") == constants.function_name(env, "Sweep")
    ]
    assert p["Target"]["Arn"] == get_att(function_id)
    role_id = p["Target"]["RoleArn"]["Fn::GetAtt"][0]
    trust = template["Resources"][role_id]["Properties"]["AssumeRolePolicyDocument"]["Statement"][0]
    assert trust["Principal"] == {"Service": "scheduler.amazonaws.com"}
    assert _text(trust["Condition"]["ArnEquals"]["aws:SourceArn"]).endswith(f":schedule-group/{constants.schedule_group_name(env)}")
    invokes = [s for s in statements_of_role(template, role_id) if "lambda:InvokeFunction" in as_list(s["Action"])]
    # The sweep, the facts refresh, and the approval reminders' function (spelt from its name: the approval step names it).
    reminders = constants.function_name(env, constants.REMINDER_TASK)
    targets = sorted((_text(r) if not isinstance(r, dict) or "Fn::GetAtt" not in r else json.dumps(r)) for s in invokes for r in as_list(s["Resource"]))
    assert len(targets) == 3 and json.dumps(get_att(function_id)) in targets
    assert any(t.endswith(f":function:{reminders}") for t in targets)


def test_the_sweep_role_holds_exactly_the_calls_its_handler_makes(synthesized):
    """As test_infra_iam's check of the state machine's tasks: a grant nothing calls, or a call
    nothing grants, fails. The by-request Query of adapters.inventory is reachable but never made:
    the sweep hands inventory the table it scanned."""
    from infra_aws_calls import reachable
    from infra_helpers import all_actions

    env = synthesized.stack.node.try_get_context("env")
    [function] = [
        r for r in synthesized.resources("AWS::Lambda::Function").values()
        if r["Properties"].get("FunctionName") == constants.function_name(env, "Sweep")
    ]
    reach = reachable(constants.SWEEP_FUNCTIONS["Sweep"])
    assert not reach.unknown
    platform = {"logs:CreateLogStream", "logs:PutLogEvents", "xray:PutTraceSegments", "xray:PutTelemetryRecords"}
    granted = all_actions(statements_of_role(synthesized.json, function["Properties"]["Role"]["Fn::GetAtt"][0])) - platform
    assert granted == reach.actions - {"dynamodb:Query"}
    assert "ec2:TerminateInstances" not in granted  # the sweep only ever asks


def test_the_dashboard_picture_in_the_docs_is_what_the_synthesized_dashboard_draws(synthesized):
    """docs/dashboard.svg is drawn by tools/dashboard_picture.py from the template: drawn again from
    this session's synth, it must be the same, so the picture cannot drift from the dashboard."""
    from tools.dashboard_picture import PICTURE, dashboard_body, draw, metric_names

    body = dashboard_body(synthesized.json)
    assert PICTURE.read_text() == draw(body), "docs/dashboard.svg is out of date: run `python tools/dashboard_picture.py --write`"
    every = {name for widget in body["widgets"] for name in metric_names(widget)}
    assert f"{constants.METRICS_NAMESPACE}/{constants.METRIC_TIME_TO_FILL} (median, p90)" in every
    assert f"SEARCH {constants.METRIC_CAPACITY_ANSWERS}" in every


def test_the_reminders_role_holds_exactly_the_calls_its_handler_makes(synthesized):
    """RemindApprovers reads the approval and its run, publishes, or deletes its own schedule."""
    from infra_aws_calls import reachable
    from infra_helpers import all_actions

    env = synthesized.stack.node.try_get_context("env")
    [function] = [
        r for r in synthesized.resources("AWS::Lambda::Function").values()
        if r["Properties"].get("FunctionName") == constants.function_name(env, constants.REMINDER_TASK)
    ]
    reach = reachable(constants.REMINDER_FUNCTIONS[constants.REMINDER_TASK])
    assert not reach.unknown
    platform = {"logs:CreateLogStream", "logs:PutLogEvents", "xray:PutTraceSegments", "xray:PutTelemetryRecords"}
    statements = statements_of_role(synthesized.json, function["Properties"]["Role"]["Fn::GetAtt"][0])
    assert all_actions(statements) - platform == reach.actions
    deletes = [r for s in statements if "scheduler:DeleteSchedule" in as_list(s["Action"]) for r in as_list(s["Resource"])]
    assert [_text(r).rsplit("/", 1)[-1] for r in deletes] == ["remind-*"]  # never a lifetime schedule


def test_the_facts_refresh_runs_every_5_minutes_as_the_scheduler_role_and_holds_exactly_its_calls(synthesized):
    """Scheduler's role (trusted only for this deployment's group) invokes RefreshFacts, whose own
    role may make ScoreRegion's and PrepareRegion's look-ups and touch the warm items only."""
    from infra_aws_calls import reachable
    from infra_helpers import all_actions

    template, env = synthesized.json, synthesized.stack.node.try_get_context("env")
    [p] = [s["Properties"] for s in synthesized.resources("AWS::Scheduler::Schedule").values()
           if s["Properties"]["Name"] == constants.facts_refresh_schedule_name(env)]
    assert (p["GroupName"], p["ScheduleExpression"]) == (constants.schedule_group_name(env), "rate(5 minutes)")
    assert json.loads(p["Target"]["Input"]) == {"scheduler_execution": "<aws.scheduler.execution-id>", "every_seconds": 300}
    [(function_id, function)] = [
        (i, r) for i, r in synthesized.resources("AWS::Lambda::Function").items()
        if r["Properties"].get("FunctionName") == constants.function_name(env, constants.REFRESH_TASK)
    ]
    assert p["Target"]["Arn"] == get_att(function_id)
    role_id = p["Target"]["RoleArn"]["Fn::GetAtt"][0]
    trust = template["Resources"][role_id]["Properties"]["AssumeRolePolicyDocument"]["Statement"][0]
    assert trust["Principal"] == {"Service": "scheduler.amazonaws.com"}
    assert _text(trust["Condition"]["ArnEquals"]["aws:SourceArn"]).endswith(f":schedule-group/{constants.schedule_group_name(env)}")
    reach = reachable(constants.REFRESH_FUNCTIONS[constants.REFRESH_TASK])
    assert not reach.unknown
    platform = {"logs:CreateLogStream", "logs:PutLogEvents", "xray:PutTraceSegments", "xray:PutTelemetryRecords"}
    statements = statements_of_role(template, function["Properties"]["Role"]["Fn::GetAtt"][0])
    granted = all_actions(statements) - platform
    assert granted == reach.actions
    assert not {"ec2:RunInstances", "ec2:CreateFleet", "ec2:GetSpotPlacementScores"} & granted
    table = [s for s in statements if any(a.startswith("dynamodb:") for a in as_list(s["Action"]))]
    assert table and all(s["Condition"]["ForAllValues:StringLike"]["dynamodb:LeadingKeys"] == ["warm#*"] for s in table)
