"""EventBridge Scheduler on the engine's modelled clock (moto stores schedules but never runs them).

A schedule created (or updated) in moto is run here when modelled time reaches it:
- `at(yyyy-mm-ddThh:mm:ss)` once (UTC), then deleted when its ActionAfterCompletion is DELETE;
- `rate(N unit)` from its StartDate (else its creation) every N units, until its EndDate.
Before it runs, the schedule is looked up again: one deleted (or replaced under its name) since
does not run, as on AWS. Its target is a universal target (`arn:aws:scheduler:::aws-sdk:sfn:
startExecution`, `...:sns:publish`), or a Lambda function (the sweep), called with the schedule's role: the engine judges the role's
trust (Scheduler assumes it with aws:SourceArn = the schedule group's ARN, local/iam/trust.py),
then the call against that role's policies (a refused call does not happen and is recorded, as Scheduler
records a failed invocation) and makes it with the target's Input as the API's parameters.
Scheduler's context attributes in the Input (`<aws.scheduler.execution-id>`, `...scheduled-time>`,
`...schedule-arn>`, `...attempt-number>`) are filled in before each delivery. Every run is kept
in `engine.schedule_runs`.

Delivery is at least once, as on AWS: a call that fails with throttling, a 5xx or a transport
error is tried again with exponential backoff (here 1 s doubling, at most 10 minutes apart) under
the target's RetryPolicy (Scheduler's default when it has none: 185 retries, within 24 hours of
the moment it was due); any other error is not retried (Scheduler hands it to the dead-letter
queue). A one-time schedule deletes itself after its last try. A test makes Scheduler deliver an
event twice with `engine.faults.schedule_twice(name)`.

AWS's own checks that moto skips: a name of 1-64 `[0-9a-zA-Z-_.]`, an expression Scheduler
reads, an Input of at most 8,192 characters, a group that exists (ValidationException /
ResourceNotFoundException).
"""

from __future__ import annotations

import json
import re
import uuid
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from unittest import mock

from gpufill.adapters import clock

NAME = re.compile(r"^[0-9a-zA-Z_.-]{1,64}$")
AT = re.compile(r"^at\((\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2})\)$")
RATE = re.compile(r"^rate\((\d+) (minute|minutes|hour|hours|day|days)\)$")
UNIT_SECONDS = {"minute": 60, "hour": 3600, "day": 86400}
MAX_INPUT = 8192
UNIVERSAL = "arn:aws:scheduler:::aws-sdk:"
# Scheduler's retry policy when a target names none (RetryPolicy in the Scheduler API reference).
DEFAULT_RETRY = {"MaximumEventAgeInSeconds": 86400, "MaximumRetryAttempts": 185}
MAX_BACKOFF = 600
# A templated target: a Lambda function, invoked with the schedule's Input as its event.
LAMBDA_FUNCTION = re.compile(r"^arn:aws:lambda:[a-z0-9-]+:\d{12}:function:[A-Za-z0-9_-]+$")


def _moment(value) -> datetime | None:
    if value is None:
        return None
    if isinstance(value, (int, float)):
        return datetime.fromtimestamp(value, UTC)
    return datetime.fromisoformat(str(value).replace("Z", "+00:00"))


def _elapsed_at(engine, moment: datetime) -> float:
    """The engine's modelled second at which `moment` (on the handlers' clock) comes."""
    return engine.elapsed + max(0.0, moment.timestamp() - clock.epoch())


@contextmanager
def patches(engine):
    from moto.scheduler.exceptions import ScheduleGroupNotFound, ValidationException
    from moto.scheduler.models import EventBridgeSchedulerBackend

    original = EventBridgeSchedulerBackend.create_schedule
    original_update = EventBridgeSchedulerBackend.update_schedule

    def check(backend, kwargs):
        name, expression = kwargs.get("name") or "", kwargs.get("schedule_expression") or ""
        if not NAME.match(name):
            raise ValidationException(f"Schedule name {name!r} must be 1-64 characters of [0-9a-zA-Z-_.]")
        if not (AT.match(expression) or RATE.match(expression)):
            raise ValidationException(f"Invalid Schedule Expression {expression}.")
        if len((kwargs.get("target") or {}).get("Input") or "") > MAX_INPUT:
            raise ValidationException(f"Target Input is longer than {MAX_INPUT} characters.")
        if (kwargs.get("group_name") or "default") not in backend.schedule_groups:
            raise ScheduleGroupNotFound(kwargs.get("group_name"))

    def on_the_clock(backend, schedule):
        first = _first_run(schedule)
        if first is not None:
            engine.at_later(_elapsed_at(engine, first), lambda: _run(engine, backend, schedule, first))
        return schedule

    def create_schedule(backend, **kwargs):
        check(backend, kwargs)
        return on_the_clock(backend, original(backend, **kwargs))

    def update_schedule(backend, **kwargs):
        # UpdateSchedule replaces the definition; a one-time schedule moved runs at its new time only.
        check(backend, kwargs)
        return on_the_clock(backend, original_update(backend, **kwargs))

    with (mock.patch.object(EventBridgeSchedulerBackend, "create_schedule", create_schedule),
          mock.patch.object(EventBridgeSchedulerBackend, "update_schedule", update_schedule)):
        yield


def _first_run(schedule) -> datetime | None:
    once = AT.match(schedule.schedule_expression)
    if once:
        return datetime.fromisoformat(once.group(1)).replace(tzinfo=UTC)
    start = _moment(schedule.start_date) or clock.now()
    return start if _within(schedule, start) else None


def _within(schedule, moment: datetime) -> bool:
    end = _moment(schedule.end_date)
    return end is None or moment <= end


def _every(schedule) -> timedelta:
    count, unit = RATE.match(schedule.schedule_expression).groups()
    return timedelta(seconds=int(count) * UNIT_SECONDS[unit.rstrip("s")])


def _run(engine, backend, schedule, due: datetime, attempt: int = 0) -> None:
    group = backend.schedule_groups.get(schedule.group_name)
    if group is None or group.schedules.get(schedule.name) is not schedule or schedule.state != "ENABLED":
        return  # deleted (or made anew under its name) before it came due
    once = AT.match(schedule.schedule_expression)
    if once and _first_run(schedule) != due:
        return  # moved (UpdateSchedule) since: it runs at its new time
    if not once and not attempt:
        following = due + _every(schedule)
        if _within(schedule, following):
            engine.at_later(_elapsed_at(engine, following), lambda: _run(engine, backend, schedule, following))
    base = {"schedule": schedule.name, "group": schedule.group_name, "due": due.isoformat(timespec="seconds"),
            "target": schedule.target.get("Arn")}
    attributes = _attributes(engine, schedule, due, attempt)
    answer = _invoke(engine, schedule.target, group=schedule.group_name, attributes=attributes)
    retryable = answer.pop("retryable", False)
    engine.schedule_runs.append({**base, **({"retry": attempt} if attempt else {}), **answer})
    if retryable and _retry(engine, backend, schedule, due, attempt):
        return  # tried again later; a one-time schedule stays until its last try
    if engine.faults.for_schedule(schedule.name) is not None:
        # The same event delivered once more (at least once): its target is called again.
        def deliver_again():
            # The same event: its execution id too (a target that deduplicates by it can).
            again = _invoke(engine, schedule.target, group=schedule.group_name, attributes=attributes)
            again.pop("retryable", None)
            engine.schedule_runs.append({**base, "duplicate": True, **again})

        engine.at_later(engine.elapsed, deliver_again)
    if once and schedule.action_after_completion == "DELETE":
        group.schedules.pop(schedule.name, None)


def _retry(engine, backend, schedule, due: datetime, attempt: int) -> bool:
    """Plan the next try of a failed delivery within the target's retry policy; False when none is left."""
    policy = {**DEFAULT_RETRY, **(schedule.target.get("RetryPolicy") or {})}
    # Counted from the moment it was due (the engine's clock may have moved past several tries at once).
    following = due + timedelta(seconds=sum(min(2 ** n, MAX_BACKOFF) for n in range(attempt + 1)))
    if attempt >= policy["MaximumRetryAttempts"] or (following - due).total_seconds() > policy["MaximumEventAgeInSeconds"]:
        return False
    engine.at_later(_elapsed_at(engine, following), lambda: _run(engine, backend, schedule, due, attempt + 1))
    return True


def _attributes(engine, schedule, due: datetime, attempt: int) -> dict[str, str]:
    """Scheduler's context attributes, which it fills into a target's Input before each delivery."""
    return {
        "<aws.scheduler.schedule-arn>": f"arn:aws:scheduler:{engine.home_region}:{engine.account}:schedule/{schedule.group_name}/{schedule.name}",
        "<aws.scheduler.scheduled-time>": due.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "<aws.scheduler.execution-id>": str(uuid.uuid4()),
        "<aws.scheduler.attempt-number>": str(attempt + 1),
    }


def _invoke(engine, target: dict, *, group: str = "default", attributes: dict[str, str] | None = None) -> dict:
    """Call the universal target as Scheduler does: as the schedule's role (which must trust
    Scheduler acting for the schedule's group), its call judged first."""
    from gpufill.local.iam import trust
    from gpufill.local.iam.authorizations import Call
    from gpufill.local.iam.enforcement import refusal
    from gpufill.local.iam.principals import principal
    from gpufill.local.iam.world import engine_world

    arn = target.get("Arn", "")
    text = target.get("Input") or "{}"
    for attribute, value in (attributes or {}).items():
        text = text.replace(attribute, value)
    parameters = json.loads(text)
    if LAMBDA_FUNCTION.match(arn):  # a templated target: the function gets the Input as its event
        service, api, iam_service = "lambda", "Invoke", "lambda"
    elif arn.startswith(UNIVERSAL):
        service, operation = arn[len(UNIVERSAL):].split(":", 1)
        api = operation[0].upper() + operation[1:]
        iam_service = {"sfn": "states"}.get(service, service)
    else:
        return {"error": f"the local engine runs universal and Lambda targets only, not {arn}"}
    if engine.judge_iam:
        role = engine.roles.get(target.get("RoleArn") or "")
        if role is None:
            return {"error": "Scheduler could not assume the schedule's role", "refused": True}
        source = trust.schedule_group_arn(engine.home_region, engine.account, group)
        untrusted = trust.refusal(engine, role, trust.SCHEDULER, source)
        if untrusted is not None:
            return {"error": f"AccessDenied: {untrusted.message}", "refused": True}
        call_params = {k[0].lower() + k[1:] if iam_service == "states" else k: v for k, v in parameters.items()}
        if iam_service == "lambda":  # lambda:InvokeFunction on the target function
            call_params = {"FunctionName": arn}
        call = Call(iam_service, api, call_params, engine.home_region, engine.account)
        denied = refusal(principal(role, "scheduler", engine.account), call, engine_world(engine), engine.iam)
        if denied is not None:
            return {"error": f"AccessDenied: {denied.authorization.action} on {denied.authorization.resource}", "refused": True}
    # Made as nobody the engine judges again: not the function whose thread moved the clock.
    invocation = engine._invocation
    function, invocation.function = getattr(invocation, "function", None), None
    try:
        if iam_service == "states":
            answer = engine.client("stepfunctions").start_execution(
                stateMachineArn=parameters["StateMachineArn"], name=parameters["Name"], input=parameters.get("Input", "{}")
            )
            return {"execution": parameters["Name"], "execution_arn": answer["executionArn"]}
        if iam_service == "lambda":
            reply = engine.client("lambda").invoke(FunctionName=arn, Payload=json.dumps(parameters).encode())
            answer = json.loads(reply["Payload"].read() or b"null")
            return {"function": arn, "answer": answer, **({"error": "function error"} if "FunctionError" in reply else {})}
        if iam_service == "sns":
            answer = engine.client("sns").publish(
                TopicArn=parameters["TopicArn"], Message=parameters["Message"],
                **({"Subject": parameters["Subject"]} if parameters.get("Subject") else {}),
            )
            return {"message_id": answer["MessageId"]}
        return {"error": f"the local engine does not run {service}:{operation} targets"}
    except Exception as error:  # noqa: BLE001 (Scheduler records a failed invocation; it never raises into anything)
        return {"error": str(error), "retryable": _retryable(error)}
    finally:
        invocation.function = function


def _retryable(error: Exception) -> bool:
    """Throttling, a 5xx or a transport failure: Scheduler tries again. Any other error it does not."""
    from botocore.exceptions import ClientError

    if not isinstance(error, ClientError):
        return True  # the call never got an answer
    code = error.response.get("Error", {}).get("Code", "")
    status = error.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 400)
    return status >= 500 or status == 429 or "Throttl" in code or code in ("TooManyRequestsException", "RequestLimitExceeded")
