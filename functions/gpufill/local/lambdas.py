"""Lambda in the simulated account: every invocation runs the function's handler in this process,
with the function's own Environment, its own caches (as in execution environments of its own,
adapters/container.py) and the Lambda-level faults of engine.faults; an asynchronous
invocation (EventBridge's Lambda targets) is queued for a few delivery threads and tried up to
three times, as Lambda does."""

from __future__ import annotations

import importlib
import json
import queue
import threading
import time
from unittest import mock

# Lambda tries a failed asynchronous invocation twice more.
ASYNC_INVOKE_TRIES = 3
# Invocations of StartRefill the engine runs at once.
DELIVERY_WORKERS = 2


class FakeContext:
    """The parts of a LambdaContext that handlers and Powertools read. The time left counts down
    from the function's deployed timeout (as configured now: a test may change it with
    UpdateFunctionConfiguration) by the wall time since the invocation began."""

    def __init__(self, function, qualifier: str | None = None):
        self.function_name = function.function_name
        self.function_version = "$LATEST"
        # As Lambda names it: the ARN the caller invoked, with the alias or version it named.
        self.invoked_function_arn = function.function_arn.split(":$LATEST")[0] + (f":{qualifier}" if qualifier else "")
        self.memory_limit_in_mb = function.memory_size
        self.aws_request_id = f"local-{time.monotonic_ns()}"
        self.log_group_name = f"/aws/lambda/{function.function_name}"
        self.log_stream_name = "local"
        self._deadline = time.monotonic() + float(function.timeout)

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int((self._deadline - time.monotonic()) * 1000))


class ExecutionEnvironments:
    """Which execution environment of its function each invocation runs in. Lambda gives each
    concurrent request an environment of its own and hands a free, warm one to the next request:
    an invocation here takes a free environment of its function, or a new one when all are busy,
    and its caches are that environment's (adapters/container.py keys them by the name returned)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._free: dict[str, list[str]] = {}
        self._made: dict[str, int] = {}

    def take(self, function_name: str) -> str:
        with self._lock:
            free = self._free.setdefault(function_name, [])
            if free:
                return free.pop()
            made = self._made[function_name] = self._made.get(function_name, 0) + 1
            return function_name if made == 1 else f"{function_name}#{made}"

    def give_back(self, function_name: str, environment: str) -> None:
        with self._lock:
            self._free[function_name].append(environment)


class AsyncInvocations:
    """The engine's part that delivers asynchronous invocations (a part of LocalEngine)."""

    def __init__(self) -> None:
        super().__init__()
        self._delivery_queue: queue.Queue = queue.Queue()
        self._delivery_workers: list[threading.Thread] = []
        self._delivery_lock = threading.Lock()

    def invoke_async(self, function_arn: str, event: dict) -> None:
        """EventBridge invokes a Lambda target asynchronously: the invocation is queued for a few
        delivery threads (Lambda's concurrency, kept small so a teardown of a thousand instances
        does not start two thousand threads); settle() waits until the queue is empty."""
        # Its own lock, not the clock's: an action scheduled at a modelled second runs holding the
        # clock's lock and may run an execution (a teardown) whose TerminateInstances delivers events.
        with self._delivery_lock:
            while len(self._delivery_workers) < DELIVERY_WORKERS:
                worker = threading.Thread(target=self._deliver_forever, daemon=True)
                worker.start()
                self._delivery_workers.append(worker)
        self._delivery_queue.put((function_arn, event))

    def _deliver_forever(self) -> None:
        while True:
            item = self._delivery_queue.get()
            try:
                if item is None:
                    return
                self._invoke_with_retries(*item)
            except Exception as error:  # noqa: BLE001 (a delivery that cannot even be made is recorded, never raised)
                self.event_deliveries.append({"function": item[0], "event": item[1], "answer": {"error": str(error)}, "failed": True})
            finally:
                self._delivery_queue.task_done()

    def settle(self, timeout: float = 120.0) -> None:
        """Wait until every event delivered so far has been handled (and what it delivered, in turn)."""
        deadline = time.monotonic() + timeout
        while self._delivery_queue.unfinished_tasks and time.monotonic() < deadline:
            time.sleep(0.005)

    def _stop_deliveries(self) -> None:
        for _ in self._delivery_workers:
            self._delivery_queue.put(None)
        for worker in self._delivery_workers:
            worker.join(timeout=10)
        self._delivery_workers.clear()

    def _invoke_with_retries(self, function_arn: str, event: dict) -> None:
        lam = self.client("lambda")
        for _ in range(ASYNC_INVOKE_TRIES):
            reply = lam.invoke(FunctionName=function_arn, Payload=json.dumps(event).encode())
            answer = json.loads(reply["Payload"].read() or b"null")
            self.event_deliveries.append({"function": function_arn, "event": event, "answer": answer,
                                          "failed": "FunctionError" in reply})
            if "FunctionError" not in reply:
                return


def in_process(engine):
    """Every Lambda invoke runs the handler in this process, with the function's own
    Environment applied, and with the Lambda-level faults of engine.faults."""
    from contextlib import ExitStack

    from moto.awslambda.models import LambdaBackend, LambdaFunction
    from moto.awslambda.responses import LambdaResponse

    from gpufill.adapters import container
    from gpufill.local.faults import KilledInvocation
    from gpufill.local.iam import trust

    calls, faults = engine.calls, engine.faults
    environments = ExecutionEnvironments()
    invoked = threading.local()  # the qualifier (alias or version) the caller named, per thread
    original_backend_invoke, original_response_invoke = LambdaBackend.invoke, LambdaResponse.invoke

    def response_invoke(response):
        # moto reads the query's `qualifier` in lower case and so loses Invoke's Qualifier=…
        saved, invoked.asked = getattr(invoked, "asked", None), (response.querystring.get("Qualifier") or [None])[0]
        try:
            return original_response_invoke(response)
        finally:
            invoked.asked = saved

    def backend_invoke(backend, function_name, qualifier, body, headers, response_headers):
        qualifier = qualifier or getattr(invoked, "asked", None)
        if ":" in function_name.rsplit(":function:", 1)[-1]:
            function_name, qualifier = function_name.rsplit(":", 1)
        saved, invoked.qualifier = getattr(invoked, "qualifier", None), qualifier
        try:
            return original_backend_invoke(backend, function_name, qualifier, body, headers, response_headers)
        finally:
            invoked.qualifier = saved

    def invoke(function, event=None):
        deployed = engine.functions[function.function_name]
        task = deployed.task
        fault = faults.for_invocation(task)
        if fault is not None and not fault.after:
            return lambda_error(fault.error, function), True, ""
        untrusted = trust.refusal(engine, deployed.role, trust.LAMBDA)
        if untrusted is not None:  # Lambda cannot assume the execution role: the handler never runs
            return json.dumps({"errorType": "Lambda.AccessDeniedException", "errorMessage": untrusted.message}), True, ""
        module_name, _, attr = function.handler.rpartition(".")
        handler = getattr(importlib.import_module(module_name), attr)
        # A function the state machine does not invoke (StartRefill) runs outside any run.
        logged = calls.invocation(module_name.rsplit(".", 1)[-1]) if deployed.placeholder else calls.outside_runs()
        # Its caches are its environment's: what another function, or a concurrent invocation of
        # this one, cached stays in that environment's memory.
        environment = environments.take(function.function_name)
        with engine._environments.applied(function.environment_vars), logged, container.running_as(environment):
            engine._invocation.task = task
            engine._invocation.function = deployed
            try:
                context = FakeContext(function, getattr(invoked, "qualifier", None))
                result = handler(event if event is not None else {}, context)
            except KilledInvocation:
                return lambda_error("Sandbox.Timedout", function), True, ""
            except Exception as error:  # noqa: BLE001 (reported to the state machine as a Lambda function error)
                return json.dumps({"errorType": type(error).__name__, "errorMessage": str(error)}), True, ""
            finally:
                engine._invocation.task = None
                engine._invocation.function = None
                environments.give_back(function.function_name, environment)
        if fault is not None:  # after_handler: the work is done, the answer is lost
            return lambda_error(fault.error, function), True, ""
        return json.dumps(result), False, ""

    patches = ExitStack()
    patches.enter_context(mock.patch.object(LambdaFunction, "_invoke_lambda", invoke))
    patches.enter_context(mock.patch.object(LambdaBackend, "invoke", backend_invoke))
    patches.enter_context(mock.patch.object(LambdaResponse, "invoke", response_invoke))
    return patches


def lambda_error(error: str, function) -> str:
    """The error payload Lambda reports for a failed invocation; Step Functions names the
    task's error after its errorType (Sandbox.Timedout, Lambda.Unknown, Lambda.ServiceException)."""
    messages = {
        "Sandbox.Timedout": f"RequestId: local Error: Task timed out after {float(function.timeout):.2f} seconds",
        "Lambda.Unknown": "The cause could not be determined because Lambda did not return an error type.",
        "Lambda.ServiceException": "Lambda was unable to process the request (ServiceException).",
    }
    return json.dumps({"errorType": error, "errorMessage": messages.get(error, error)})


