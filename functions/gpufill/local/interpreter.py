"""moto's Step Functions interpreter made to behave as AWS's: the startExecution integration's
parameters and answer, `$$.State.EnteredTime` and Wait states on the modelled clock, one
StartExecution per name at a time."""

from __future__ import annotations

import threading
from contextlib import ExitStack
from unittest import mock

from gpufill.adapters import clock


def start_execution_as_aws_does():
    """`arn:aws:states:::states:startExecution` takes StateMachineArn, Name and Input, as on AWS;
    moto's interpreter hands them to boto3 unchanged, whose StartExecution wants stateMachineArn,
    name and input, and fails. Rename them the way AWS's integration does."""
    from moto.stepfunctions.parser.asl.component.state.exec.state_task.service.state_task_service_sfn import (
        StateTaskServiceSfn,
    )

    original = StateTaskServiceSfn._normalise_parameters

    def normalise(service, parameters, boto_service_name=None, service_action_name=None):
        original(service, parameters, boto_service_name, service_action_name)
        if service_action_name is None and service._get_boto_service_action() == "start_execution":
            for key in [k for k in parameters if k in ("StateMachineArn", "Name", "Input", "TraceHeader")]:
                parameters[key[0].lower() + key[1:]] = parameters.pop(key)

    def evaluate(service, env, *args, **kwargs):
        original_eval(service, env, *args, **kwargs)
        if service._get_boto_service_action() == "start_execution" and isinstance(env.stack[-1], dict):
            answer = env.stack.pop()  # AWS answers ExecutionArn and StartDate
            env.stack.append({key[0].upper() + key[1:]: value for key, value in answer.items()})

    original_eval = StateTaskServiceSfn._eval_service_task
    stack = ExitStack()
    stack.enter_context(mock.patch.object(StateTaskServiceSfn, "_normalise_parameters", normalise))
    stack.enter_context(mock.patch.object(StateTaskServiceSfn, "_eval_service_task", evaluate))
    return stack

def wait_states_on_the_modelled_clock(engine):
    """Wait states return at once; the seconds they would have waited count in the modelled time."""
    from moto.stepfunctions.parser.asl.component.state.wait.wait_function.wait_function import WaitFunction

    def wait_interval(function, env, wait_seconds):
        engine.calls.waited(wait_seconds)
        engine.advance(wait_seconds)

    return mock.patch.object(WaitFunction, "_wait_interval", wait_interval)


def entered_time_on_the_modelled_clock():
    """`$$.State.EnteredTime` is read from the clock the handlers share, so an approval asked after
    modelled hours has its deadline after them (moto reads the wall clock)."""
    import datetime as real

    from moto.stepfunctions.parser.asl.component.state import state

    class _Datetime:
        @staticmethod
        def now(tz=None):
            return clock.now().astimezone(tz) if tz else clock.now()

    class _Module:
        datetime = _Datetime
        timezone = real.timezone

    return mock.patch.object(state, "datetime", _Module)


def atomic_start_execution():
    """Step Functions decides a StartExecution under a name atomically: two at once with the same
    name and input start one execution. moto checks the name, then registers the execution, so
    two deliveries of one instance's events could both start one; a lock makes it one decision."""
    from moto.stepfunctions.parser.models import StepFunctionsParserBackend

    original = StepFunctionsParserBackend.start_execution
    lock = threading.Lock()

    def start_execution(backend, *args, **kwargs):
        with lock:
            return original(backend, *args, **kwargs)

    return mock.patch.object(StepFunctionsParserBackend, "start_execution", start_execution)




# How long a StopExecution waits for a just-started execution's program to be set up (moto's
# worker thread does that within milliseconds).
STOP_WAIT_SECONDS = 5.0


def stop_execution_at_any_moment():
    """Step Functions takes StopExecution at any moment of a run, the first milliseconds included;
    moto's worker has no program to stop until its thread has set one up, and fails the call
    (`'NoneType' object has no attribute 'set_stop'`). The stop waits for the program, briefly."""
    import time

    from moto.stepfunctions.parser.asl.eval.environment import Environment
    from moto.stepfunctions.parser.asl.eval.program_state import ProgramStopped
    from moto.stepfunctions.parser.api import ExecutionStatus
    from moto.stepfunctions.parser.backend.execution_worker import ExecutionWorker

    original = ExecutionWorker.stop
    original_set_error = Environment.set_error

    def stop(worker, *args, **kwargs):
        until = time.monotonic() + STOP_WAIT_SECONDS
        while worker.env is None and time.monotonic() < until:
            time.sleep(0.001)
        answer = original(worker, *args, **kwargs)
        # A run parked on a task token (an approval) would stay RUNNING in moto until the token's
        # timeout; Step Functions shows it ABORTED as soon as StopExecution returns. Wake its waits
        # and give it the moment it needs to unwind.
        waits = list(worker.env.callback_pool_manager._pool.values()) if worker.env is not None else []
        for endpoint in waits:
            endpoint.interrupt_all()
        execution = getattr(worker._execution_communication, "execution", None)
        while waits and execution is not None and execution.exec_status in (None, ExecutionStatus.RUNNING) and time.monotonic() < until:
            time.sleep(0.001)
        return answer

    def set_error(env, *args, **kwargs):
        # A state still running when the stop came fails on its way out; the execution stays
        # ABORTED, as Step Functions reports a stopped one (moto would turn it FAILED).
        if isinstance(env._program_state, ProgramStopped):
            return None
        return original_set_error(env, *args, **kwargs)

    stack = ExitStack()
    stack.enter_context(mock.patch.object(ExecutionWorker, "stop", stop))
    stack.enter_context(mock.patch.object(Environment, "set_error", set_error))
    return stack
