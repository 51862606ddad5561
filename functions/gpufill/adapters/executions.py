"""Starting another execution of this deployment's state machine (refill runs, continuations).

Idempotent on the name: Step Functions answers a repeated StartExecution with the same name and
input as success while the first is running, and ExecutionAlreadyExists once it has closed (or
when the input differs). A closed execution with the same input is the same start, so it counts
as started; another input under the name is a real conflict and is raised.
"""

from __future__ import annotations

import json
import os

from botocore.exceptions import ClientError

from gpufill.adapters.aws import client
from gpufill.constants import ENV_STATE_MACHINE_ARN


class ExecutionNameTaken(Exception):
    """The name belongs to an execution with another input."""


def execution_arn(state_machine_arn: str, name: str) -> str:
    return state_machine_arn.replace(":stateMachine:", ":execution:", 1) + f":{name}"


def state_machine_of(execution_arn: str) -> str:
    """arn:…:execution:<machine>:<name> -> arn:…:stateMachine:<machine>."""
    return execution_arn.replace(":execution:", ":stateMachine:", 1).rsplit(":", 1)[0]


def start(name: str, execution_input: dict, state_machine: str | None = None) -> str:
    """Start (or find already started) execution `name` of `state_machine` (by default this
    function's, ENV_STATE_MACHINE_ARN); returns its ARN."""
    state_machine = state_machine or os.environ[ENV_STATE_MACHINE_ARN]
    body = json.dumps(execution_input, sort_keys=True, separators=(",", ":"))
    sfn = client("stepfunctions")
    try:
        return sfn.start_execution(stateMachineArn=state_machine, name=name, input=body)["executionArn"]
    except ClientError as error:
        if error.response.get("Error", {}).get("Code") != "ExecutionAlreadyExists":
            raise
    arn = execution_arn(state_machine, name)
    if json.loads(sfn.describe_execution(executionArn=arn).get("input") or "null") != execution_input:
        raise ExecutionNameTaken(f"execution {name} already exists with another input")
    return arn


def describe(state_machine_arn: str, name: str) -> dict | None:
    """The execution `name` of the state machine as {"input", "status", "started"}, or None when
    no execution holds the name. Its input is parsed (None if it is not JSON)."""
    sfn = client("stepfunctions")
    try:
        found = sfn.describe_execution(executionArn=execution_arn(state_machine_arn, name))
    except ClientError as error:
        if error.response.get("Error", {}).get("Code") == "ExecutionDoesNotExist":
            return None
        raise
    try:
        parsed = json.loads(found.get("input") or "null")
    except ValueError:
        parsed = None
    started = found.get("startDate")
    return {"input": parsed, "status": found.get("status"), "started": started.isoformat() if started else None}
