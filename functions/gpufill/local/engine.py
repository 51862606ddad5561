"""Runs statemachine/*.asl.json in moto's Step Functions interpreter, every Lambda task in-process.

What it guarantees: nothing leaves the process. Dummy credentials are set before any
client exists, every AWS call is served by moto, and every execution thread has ended
before the mock closes (a thread outliving the mock would reach real endpoints).
"""

from __future__ import annotations

import importlib
import io
import json
import logging
import os
import threading
import time
import zipfile
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable
from unittest import mock

from gpufill import constants
from gpufill.local.metrics import CallLog
from gpufill.local.scenario import MarketScenario

REPO_ROOT = Path(__file__).resolve().parents[3]
STATEMACHINE = REPO_ROOT / "statemachine" / "provisioner.asl.json"
ENV_NAME = "local"
HOME_REGION = constants.LOCAL_HOME_REGION
LOCAL_AMI = "ami-0abcdef1234567890"
APPROVAL_TOPIC = f"gpufill-approvals-{ENV_NAME}"
DUMMY_ENV = {
    "AWS_ACCESS_KEY_ID": "gpufill-local",
    "AWS_SECRET_ACCESS_KEY": "gpufill-local",
    "AWS_SESSION_TOKEN": "gpufill-local",
    "AWS_DEFAULT_REGION": HOME_REGION,
    "AWS_REGION": HOME_REGION,
    "POWERTOOLS_TRACE_DISABLED": "true",
    "POWERTOOLS_METRICS_DISABLED": "true",
    "POWERTOOLS_LOG_LEVEL": "WARNING",
    "POWERTOOLS_DEV": "false",
    constants.ENV_INSTANCES_TABLE: constants.instances_table_name(ENV_NAME),
    constants.ENV_REGIONS_PARAMETER: constants.regions_parameter_name(ENV_NAME),
    constants.ENV_STARTUP_BUCKET: "gpufill-startup-local",
    constants.ENV_CAPACITY_TABLE: constants.capacity_table_name(ENV_NAME),
    constants.ENV_DEPLOYMENT: ENV_NAME,
}
# Variables that could point a stray client at a real account or endpoint.
SCRUBBED_ENV = ("AWS_PROFILE", "AWS_ENDPOINT_URL", "AWS_CONFIG_FILE", "AWS_SHARED_CREDENTIALS_FILE")


@dataclass
class Execution:
    name: str
    arn: str
    status: str
    output: Any = None
    error: str | None = None
    cause: Any = None
    history: list[dict] = field(default_factory=list)
    metrics: dict = field(default_factory=dict)
    # A teardown's approval item as the run left it, and what the run published to the approval topic.
    approval: dict | None = None
    notifications: list[dict] = field(default_factory=list)

    def summary(self) -> dict:
        execution: dict[str, Any] = {"status": self.status}
        if self.status == "SUCCEEDED":
            execution["output"] = self.output
        else:
            execution["error"], execution["cause"] = self.error, self.cause
        summary = {"execution": execution, "metrics": self.metrics}
        if self.approval:  # a teardown asked a person: what was asked and how it was answered
            keys = ("status", "requested_by", "deadline", "decision", "approver", "decided_reason", "decided_at")
            summary["approval"] = {k: self.approval[k] for k in keys if self.approval.get(k) is not None}
            summary["approval"]["published"] = [n["subject"] for n in self.notifications]
        return summary

    def entered(self) -> list[str]:
        """State names in the order they were entered."""
        return [e["stateEnteredEventDetails"]["name"] for e in self.history if "stateEnteredEventDetails" in e]


class FakeContext:
    """The parts of a LambdaContext that Powertools reads."""

    def __init__(self, function):
        self.function_name = function.function_name
        self.function_version = "$LATEST"
        self.invoked_function_arn = function.function_arn
        self.memory_limit_in_mb = function.memory_size
        self.aws_request_id = f"local-{time.monotonic_ns()}"
        self.log_group_name = f"/aws/lambda/{function.function_name}"
        self.log_stream_name = "local"

    def get_remaining_time_in_millis(self) -> int:
        return 60_000


class LocalEngine:
    """A simulated AWS account with gpufill deployed in it."""

    def __init__(
        self,
        scenario: MarketScenario,
        *,
        definition: Path = STATEMACHINE,
        regions_config: dict | None = None,
    ):
        self.scenario = scenario
        self.definition = definition
        self.regions_config = regions_config or {"regions": sorted(scenario.regions)}
        self.calls = CallLog()
        self._stack = ExitStack()
        self._threads_before: set[threading.Thread] = set()

    # --- lifecycle -------------------------------------------------------------------

    def __enter__(self) -> LocalEngine:
        self._threads_before = set(threading.enumerate())
        # The interpreter logs every failed execution at error level; the run's own result says it better.
        interpreter_log = logging.getLogger("moto.stepfunctions")
        self._stack.callback(interpreter_log.setLevel, interpreter_log.level)
        interpreter_log.setLevel(logging.CRITICAL)
        self._stack.enter_context(mock.patch.dict(os.environ, DUMMY_ENV))
        for name in SCRUBBED_ENV:
            os.environ.pop(name, None)
        from moto import mock_aws  # imported late: the CLI's --help should not pay for moto

        from gpufill.local.market import SimulatedMarket

        self._forget_caches()
        self._stack.callback(self._forget_caches)
        self.market = SimulatedMarket(self.scenario)
        self._stack.enter_context(mock_aws(config={"stepfunctions": {"execute_state_machine": True}}))
        self._stack.callback(self._end_executions)
        self._stack.enter_context(self.market.patches())
        self._stack.enter_context(self._in_process_lambdas())
        self._stack.enter_context(self._no_sleeping_retries())
        self._stack.enter_context(self._no_sleeping_waits())
        self._stack.enter_context(self.calls.patches())
        from gpufill.adapters import spot_advisor

        spot_advisor.reset(self.scenario.advisor_document())
        self._deploy()
        return self

    def __exit__(self, *exc) -> None:
        self._stack.close()

    def _forget_caches(self) -> None:
        from gpufill.adapters import ami, aws, network, placement, regions_config, run_store, spot_advisor

        aws.forget_clients()
        placement.reset()
        network.forget()
        regions_config.forget()
        ami.image_for.cache_clear()
        run_store.forget()
        spot_advisor.reset()

    def _end_executions(self) -> None:
        sfn = self.client("stepfunctions")
        for page in sfn.get_paginator("list_executions").paginate(
            stateMachineArn=self.state_machine_arn, statusFilter="RUNNING"
        ):
            for e in page["executions"]:
                sfn.stop_execution(executionArn=e["executionArn"], error="LocalEngineClosed")
        self._release_task_token_waits()
        for thread in set(threading.enumerate()) - self._threads_before:
            thread.join(timeout=10)

    # --- the simulated account ---------------------------------------------------------

    def client(self, service: str, region: str = HOME_REGION):
        import boto3

        return boto3.client(service, region_name=region)

    def _deploy(self) -> None:
        iam = self.client("iam")
        role = iam.create_role(RoleName="gpufill-local", AssumeRolePolicyDocument="{}")["Role"]["Arn"]
        lam = self.client("lambda")
        arns = {
            placeholder: lam.create_function(
                FunctionName=placeholder.removesuffix("FunctionArn"),
                Runtime="python3.12",
                Role=role,
                Handler=handler,
                Code={"ZipFile": _empty_zip()},
                Architectures=["arm64"],
                MemorySize=256,
            )["FunctionArn"]
            for placeholder, handler in constants.LAMBDA_TASKS.items()
        }
        self.client("s3").create_bucket(Bucket=os.environ[constants.ENV_STARTUP_BUCKET])
        ddb = self.client("dynamodb")
        ddb.create_table(
            TableName=os.environ[constants.ENV_INSTANCES_TABLE],
            BillingMode="PAY_PER_REQUEST",
            AttributeDefinitions=[
                {"AttributeName": constants.INSTANCES_TABLE_KEY, "AttributeType": "S"},
                {"AttributeName": "request_id", "AttributeType": "S"},
            ],
            KeySchema=[{"AttributeName": constants.INSTANCES_TABLE_KEY, "KeyType": "HASH"}],
            GlobalSecondaryIndexes=[
                {
                    "IndexName": constants.INSTANCES_BY_REQUEST_INDEX,
                    "KeySchema": [{"AttributeName": "request_id", "KeyType": "HASH"}],
                    "Projection": {"ProjectionType": "ALL"},
                }
            ],
        )
        # The approval topic lives in moto: RequestTeardownApproval's messages stay in the process.
        self.approval_topic_arn = self.client("sns").create_topic(Name=APPROVAL_TOPIC)["TopicArn"]
        os.environ[constants.ENV_APPROVAL_TOPIC_ARN] = self.approval_topic_arn
        ddb.create_table(
            TableName=os.environ[constants.ENV_CAPACITY_TABLE],
            BillingMode="PAY_PER_REQUEST",
            AttributeDefinitions=[{"AttributeName": constants.CAPACITY_TABLE_KEY, "AttributeType": "S"}],
            KeySchema=[{"AttributeName": constants.CAPACITY_TABLE_KEY, "KeyType": "HASH"}],
        )
        config = dict(self.regions_config)
        # moto knows no Deep Learning AMI parameter; every region launches a fixed local image.
        config.setdefault("overrides", {})
        for region in self.scenario.regions:
            config["overrides"].setdefault(region, {}).setdefault("ami", LOCAL_AMI)
        self.client("ssm").put_parameter(
            Name=os.environ[constants.ENV_REGIONS_PARAMETER], Type="String", Value=json.dumps(config)
        )
        self.state_machine_arn = self.client("stepfunctions").create_state_machine(
            name=constants.state_machine_name(ENV_NAME),
            definition=render_definition(self.definition.read_text(), arns),
            roleArn=role,
            type="STANDARD",
        )["stateMachineArn"]

    # --- running -----------------------------------------------------------------------

    def run(
        self,
        request: dict | str,
        *,
        name: str,
        on_event: Callable[[dict], None] | None = None,
        timeout: float = 120.0,
        decision: str | None = None,
    ) -> Execution:
        """Run one execution to its end. A teardown's approval is answered with `decision`
        (approved | rejected | timeout) as soon as it is pending; without one it waits, and
        another thread may answer it with answer_approval() or expire_approval()."""
        sfn = self.client("stepfunctions")
        body = request if isinstance(request, str) else json.dumps(request)
        marker = self.calls.mark()
        published = len(self.approval_messages())
        answered = False
        arn = sfn.start_execution(stateMachineArn=self.state_machine_arn, name=name, input=body)["executionArn"]
        seen = 0
        deadline = time.monotonic() + timeout
        while True:
            described = sfn.describe_execution(executionArn=arn)
            if on_event:  # the history is only read while running when someone is watching
                history = _history(sfn, arn)
                for event in history[seen:]:
                    on_event(event)
                seen = len(history)
            if described["status"] != "RUNNING":
                break
            if decision is not None and not answered:
                answered = self._answer_when_pending(name, decision)
            if time.monotonic() > deadline:
                sfn.stop_execution(executionArn=arn, error="LocalTimeout", cause=f"still running after {timeout}s")
                continue
            time.sleep(0.02)
        # The interpreter flips the status a moment before it stores the output: wait for it.
        settle_until = time.monotonic() + 5
        while described["status"] == "SUCCEEDED" and "output" not in described and time.monotonic() < settle_until:
            time.sleep(0.01)
            described = sfn.describe_execution(executionArn=arn)
        history = _history(sfn, arn)
        for event in history[seen:]:
            if on_event:
                on_event(event)
        return Execution(
            name=name,
            arn=arn,
            status=described["status"],
            output=_json(described.get("output")),
            error=described.get("error"),
            cause=_json(described.get("cause")),
            history=history,
            metrics=self.calls.metrics_since(marker, history),
            approval=self.approval(name),
            notifications=self.approval_messages()[published:],
        )

    # --- teardown approvals ------------------------------------------------------------
    # The approval step waits for a task token as on AWS. These answer it the way a person
    # would (through gpufill.approve, the code behind `gpufill approve|reject`), or let the
    # wait expire at once, as it would when approval_timeout_seconds pass with no answer.

    def approval(self, name: str) -> dict | None:
        """The approval item of execution `name` (pending or decided), or None."""
        from gpufill.adapters import approvals

        return approvals.get(name)

    def answer_approval(
        self, name: str, decision: str, *, approver: str = "local-user", reason: str | None = None
    ) -> dict:
        """Answer as `gpufill approve|reject` does; raises gpufill.approve.ApprovalError when it may not."""
        from gpufill import approve

        return approve.answer(
            name, decision, approver=approver, reason=reason, sfn=self.client("stepfunctions"), table=None
        )

    def expire_approval(self, name: str) -> None:
        """End the approval wait of execution `name` as its timeout would (States.Timeout)."""
        from moto.stepfunctions.parser.api import ExecutionStatus
        from moto.stepfunctions.parser.asl.eval.callback.callback import CallbackOutcomeTimedOut
        from moto.stepfunctions.parser.models import stepfunctions_parser_backends

        from gpufill.approve import NoPendingApproval

        item = self.approval(name)
        if not item or item.get("decided_at"):
            raise NoPendingApproval(f"execution {name!r} has no pending approval to expire")
        token = item["task_token"]
        _, _, _, region, account, *_ = self.state_machine_arn.split(":")
        for running in stepfunctions_parser_backends[account][region]._get_executions(ExecutionStatus.RUNNING):
            if running.exec_worker.env.callback_pool_manager.notify(token, CallbackOutcomeTimedOut(callback_id=token)):
                return
        raise NoPendingApproval(f"execution {name!r} is not waiting for its approval any more")

    def wait_for_approval(self, name: str, timeout: float = 30.0) -> dict:
        """Block until execution `name` (running in another thread) has its approval pending."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            item = self.approval(name)
            if item and "task_token" in item:
                return item
            time.sleep(0.01)
        raise TimeoutError(f"execution {name!r} asked for no approval within {timeout}s")

    def approval_messages(self) -> list[dict]:
        """Everything published to the approval topic so far: {"subject", "message"}."""
        from moto.sns.models import sns_backends

        _, _, _, region, account, *_ = self.approval_topic_arn.split(":")
        topic = sns_backends[account][region].topics[self.approval_topic_arn]
        return [{"subject": subject, "message": message} for _, message, subject, *_ in topic.sent_notifications]

    def _release_task_token_waits(self) -> None:
        """A stopped execution's waitForTaskToken thread would wait out its whole timeout
        (a day by default); wake every one so the engine closes at once."""
        from moto.stepfunctions.parser.models import stepfunctions_parser_backends

        _, _, _, region, account, *_ = self.state_machine_arn.split(":")
        for execution in stepfunctions_parser_backends[account][region]._get_executions():
            worker = execution.exec_worker
            if worker is not None:
                for endpoint in list(worker.env.callback_pool_manager._pool.values()):
                    endpoint.interrupt_all()

    def _answer_when_pending(self, name: str, decision: str) -> bool:
        item = self.approval(name)
        if not item or "task_token" not in item or item.get("decided_at"):
            return False
        if decision == "timeout":
            self.expire_approval(name)
        else:
            self.answer_approval(name, decision, approver=_local_user(), reason=f"answered by gpufill simulate --decision {decision}")
        return True

    # --- patches -----------------------------------------------------------------------

    def _in_process_lambdas(self):
        from moto.awslambda.models import LambdaFunction

        calls = self.calls

        def invoke(function, event=None):
            module_name, _, attr = function.handler.rpartition(".")
            handler = getattr(importlib.import_module(module_name), attr)
            with calls.invocation(module_name.rsplit(".", 1)[-1]):
                try:
                    result = handler(event if event is not None else {}, FakeContext(function))
                except Exception as error:  # reported to the state machine as a Lambda function error
                    return json.dumps({"errorType": type(error).__name__, "errorMessage": str(error)}), True, ""
            return json.dumps(result), False, ""

        return mock.patch.object(LambdaFunction, "_invoke_lambda", invoke)

    def _no_sleeping_retries(self):
        from moto.stepfunctions.parser.asl.component.common.retry import retrier_decl

        class _Clock:
            @staticmethod
            def sleep(seconds: float) -> None:  # Retry backoff costs no wall time locally
                return None

            def __getattr__(self, name):
                return getattr(time, name)

        return mock.patch.object(retrier_decl, "time", _Clock())


    def _no_sleeping_waits(self):
        """Wait states return at once; the seconds they would have waited count in the modelled time."""
        from moto.stepfunctions.parser.asl.component.state.wait.wait_function.wait_function import WaitFunction

        calls = self.calls

        def wait_interval(function, env, wait_seconds):
            calls.waited(wait_seconds)

        return mock.patch.object(WaitFunction, "_wait_interval", wait_interval)


def _local_user() -> str:
    import getpass

    try:
        return f"{getpass.getuser()} (local)"
    except Exception:  # no login name in some containers
        return "local-user"


def render_definition(text: str, substitutions: dict[str, str]) -> str:
    """Fill `${Name}` placeholders exactly as CDK's definition_substitutions does."""
    for key, value in substitutions.items():
        text = text.replace("${" + key + "}", value)
    if "${" in text:
        start = text.index("${")
        raise ValueError(f"placeholder without a substitution: {text[start:text.index('}', start) + 1]}")
    return text


def _history(sfn, arn: str) -> list[dict]:
    events, kwargs = [], {}
    while True:
        page = sfn.get_execution_history(executionArn=arn, maxResults=1000, **kwargs)
        events.extend(page["events"])
        if not page.get("nextToken"):
            return events
        kwargs["nextToken"] = page["nextToken"]


def _json(text: str | None) -> Any:
    if text is None:
        return None
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def _empty_zip() -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("handler.py", "# the local engine runs gpufill's handlers in-process\n")
    return buffer.getvalue()
