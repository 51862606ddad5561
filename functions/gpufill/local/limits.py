"""Step Functions and SNS limits the local engine enforces as AWS does (docs/architecture.md,
"Limits every run fits"), where moto is kinder than AWS:

- execution names: 1-80 characters of A-Za-z0-9-_ (gpufill's rule, within AWS's),
  else StartExecution answers InvalidName;
- a task token answered once (or expired) is closed: a second SendTaskSuccess /
  SendTaskFailure answers TaskTimedOut ("the task associated with the token has
  already been closed"), an unknown token InvalidToken;
- a Lambda task's payload after Parameters is at most 262,144 bytes, else the task
  fails States.DataLimitExceeded (moto checks only results and state outputs);
- States.ALL does not match the terminal errors States.DataLimitExceeded and
  States.Runtime (AWS: "States.ALL ... can't catch" them);
- 25,000 history events per execution: the execution fails at the limit
  (States.Runtime, with the reason in the cause);
- SNS Publish: the subject must be ASCII, without line breaks or control
  characters, and shorter than 100 characters, else InvalidParameter.

EC2's limits on a launch, checked by the market for RunInstances and by the fleet API for each
CreateFleet override (check_launch_values, check_tags): 50 tags per resource, keys of 128 and
values of 256 characters, no `aws:` keys; user data of at most 16 KiB; a root volume no smaller
than the AMI's snapshot.

EC2's launch template version quota (10,000 per template) is kept by local/launch_templates.py
with MAX_LAUNCH_TEMPLATE_VERSIONS, read at each call so a test may lower it.
"""

from __future__ import annotations

import re
from contextlib import ExitStack
from unittest import mock

from gpufill import constants

MAX_LAUNCH_TEMPLATE_VERSIONS = 10_000
EXECUTION_NAME = re.compile(r"[A-Za-z0-9_-]{1,80}")
HISTORY_LIMIT_CAUSE = f"The execution reached the maximum number of history events ({constants.HISTORY_EVENTS_LIMIT})."
# EC2 limits on RunInstances.
MAX_TAGS_PER_RESOURCE = 50
MAX_TAG_KEY = 128
MAX_TAG_VALUE = 256
MAX_USER_DATA_BYTES = 16 * 1024


def valid_sns_subject(subject: str) -> bool:
    return 0 < len(subject) < 100 and subject.isascii() and not any(ord(c) < 32 or ord(c) == 127 for c in subject)


def check_tags(specs: dict[str, dict[str, str]]) -> None:
    """EC2's tag limits, per resource type: 50 tags, keys of 128 and values of 256 characters, no `aws:` keys."""
    from moto.ec2.exceptions import EC2ClientError

    for tags in specs.values():
        if len(tags) > MAX_TAGS_PER_RESOURCE:
            raise EC2ClientError("TagLimitExceeded", f"The maximum number of tags per resource ({MAX_TAGS_PER_RESOURCE}) was exceeded: {len(tags)}.")
        for key, value in tags.items():
            if len(key) > MAX_TAG_KEY:
                raise EC2ClientError("InvalidParameterValue", f"Tag key exceeds the maximum length of {MAX_TAG_KEY} characters: {key[:40]}...")
            if len(value) > MAX_TAG_VALUE:
                raise EC2ClientError("InvalidParameterValue", f"Tag value exceeds the maximum length of {MAX_TAG_VALUE} characters (key {key}).")
            if key.lower().startswith("aws:"):
                raise EC2ClientError("InvalidParameterValue", f"Tag keys starting with 'aws:' are reserved for internal use: {key}")


def check_launch_values(backend, *, image_id, user_data, tags: dict[str, dict[str, str]], volumes: list[tuple]) -> None:
    """EC2's own refusals of a launch (RunInstances, or one CreateFleet override): tags, user data
    size, a root volume below the AMI's snapshot. `volumes` are (device name, size in GiB or None)."""
    import base64

    from moto.ec2.exceptions import EC2ClientError

    check_tags(tags)
    if user_data:
        size = len(base64.b64decode(user_data))
        if size > MAX_USER_DATA_BYTES:
            raise EC2ClientError("InvalidParameterValue", f"User data is limited to {MAX_USER_DATA_BYTES} bytes; this request has {size}.")
    image = backend.amis.get(image_id)
    snapshot_gib = getattr(image, "root_snapshot_gib", None)
    if image is None or snapshot_gib is None:
        return
    for device, size in volumes:
        if device == image.root_device_name and size is not None and int(size) < snapshot_gib:
            raise EC2ClientError(
                "InvalidBlockDeviceMapping",
                f"Volume of size {int(size)}GB is smaller than snapshot '{image.ebs_snapshot.id}', expect size >= {snapshot_gib}GB",
            )


def patches(answered_tokens: set[str]) -> ExitStack:
    from moto.core.exceptions import AWSError
    from moto.sns.exceptions import InvalidParameterValue
    from moto.sns.models import SNSBackend
    from moto.stepfunctions.exceptions import InvalidName
    from moto.stepfunctions.parser.api import ExecutionFailedEventDetails, HistoryEventType, LambdaFunctionFailedEventDetails
    from moto.stepfunctions.parser.asl.component.common.error_name.error_equals_decl import ErrorEqualsDecl
    from moto.stepfunctions.parser.asl.component.common.error_name.failure_event import (
        FailureEvent,
        FailureEventException,
    )
    from moto.stepfunctions.parser.asl.component.common.error_name.states_error_name import StatesErrorName
    from moto.stepfunctions.parser.asl.component.common.error_name.states_error_name_type import (
        StatesErrorNameType,
    )
    from moto.stepfunctions.parser.asl.component.state.exec.state_task.state_task_lambda import StateTaskLambda
    from moto.stepfunctions.parser.asl.eval.environment import Environment
    from moto.stepfunctions.parser.asl.eval.event.event_detail import EventDetails
    from moto.stepfunctions.parser.asl.eval.event.event_manager import EventManager
    from moto.stepfunctions.parser.asl.utils.encoding import to_json_str
    from moto.stepfunctions.parser.models import StepFunctionsParserBackend

    class TaskTimedOut(AWSError):
        TYPE = "TaskTimedOut"
        STATUS = 400

    stack = ExitStack()

    # --- StartExecution: execution names ---------------------------------------------------
    original_start = StepFunctionsParserBackend.start_execution

    def start_execution(backend, state_machine_arn, name=None, execution_input=None, trace_header=None):
        if name is not None and not EXECUTION_NAME.fullmatch(name):
            raise InvalidName(f"Invalid Name: '{name}'")
        return original_start(backend, state_machine_arn, name, execution_input, trace_header)

    stack.enter_context(mock.patch.object(StepFunctionsParserBackend, "start_execution", start_execution))

    # --- task tokens: one answer each -----------------------------------------------------------
    def answer_once(original):
        def answer(backend, task_token, *args, **kwargs):
            if task_token in answered_tokens:
                raise TaskTimedOut("Task Timed Out: 'Provided task does not exist anymore'")
            result = original(backend, task_token, *args, **kwargs)
            answered_tokens.add(task_token)
            return result

        return answer

    for name in ("send_task_success", "send_task_failure"):
        original = getattr(StepFunctionsParserBackend, name)
        stack.enter_context(mock.patch.object(StepFunctionsParserBackend, name, answer_once(original)))

    # --- a Lambda task's payload after Parameters -----------------------------------------------
    original_parameters = StateTaskLambda._eval_parameters

    def eval_parameters(state, env):
        parameters = original_parameters(state, env)
        size = len(to_json_str(parameters["Payload"]).encode())
        if size > constants.STATE_SIZE_LIMIT_BYTES:
            error = StatesErrorNameType.StatesStatesDataLimitExceeded
            raise FailureEventException(
                FailureEvent(
                    env=env,
                    error_name=StatesErrorName(typ=error),
                    event_type=HistoryEventType.LambdaFunctionFailed,
                    event_details=EventDetails(
                        lambdaFunctionFailedEventDetails=LambdaFunctionFailedEventDetails(
                            error=error.to_name(),
                            cause=f"The state/task '{state.name}' has an input of {size} bytes, over the "
                            f"maximum number of bytes service limit ({constants.STATE_SIZE_LIMIT_BYTES}).",
                        )
                    ),
                )
            )
        return parameters

    stack.enter_context(mock.patch.object(StateTaskLambda, "_eval_parameters", eval_parameters))

    # --- States.ALL does not catch terminal errors ---------------------------------------------
    terminal = [
        StatesErrorName(typ=StatesErrorNameType.StatesStatesDataLimitExceeded),
        StatesErrorName(typ=StatesErrorNameType.StatesRuntime),
    ]
    original_equals = ErrorEqualsDecl._eval_body

    def error_equals(decl, env):
        error_name = env.stack[-1] if env.stack else None
        if error_name in terminal and ErrorEqualsDecl._STATE_ALL_ERROR in decl.error_names:
            env.stack.pop()
            env.stack.append(False)
            return
        original_equals(decl, env)

    stack.enter_context(mock.patch.object(ErrorEqualsDecl, "_eval_body", error_equals))

    # --- 25,000 history events -------------------------------------------------------------------
    original_env_init = Environment.__init__

    def env_init(env, *args, **kwargs):
        original_env_init(env, *args, **kwargs)
        env.event_manager.gpufill_env = env  # frames share the root's event manager

    original_add_event = EventManager.add_event

    def add_event(manager, *args, **kwargs):
        event_id = original_add_event(manager, *args, **kwargs)
        env = getattr(manager, "gpufill_env", None)
        if event_id >= constants.HISTORY_EVENTS_LIMIT and env is not None and env.is_running():
            env.set_error(ExecutionFailedEventDetails(error="States.Runtime", cause=HISTORY_LIMIT_CAUSE))
        return event_id

    stack.enter_context(mock.patch.object(Environment, "__init__", env_init))
    stack.enter_context(mock.patch.object(EventManager, "add_event", add_event))

    # --- SNS Publish subject -------------------------------------------------------------------
    original_publish = SNSBackend.publish

    def publish(backend, message, arn=None, phone_number=None, subject=None, *args, **kwargs):
        if subject is not None and not valid_sns_subject(subject):
            raise InvalidParameterValue("Invalid parameter: Subject")
        return original_publish(backend, message, arn, phone_number, subject, *args, **kwargs)

    stack.enter_context(mock.patch.object(SNSBackend, "publish", publish))
    return stack
