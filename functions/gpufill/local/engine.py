"""Runs statemachine/*.asl.json in moto's Step Functions interpreter, every Lambda task in-process.

What it guarantees: nothing leaves the process. Dummy credentials are set before any
client exists, every AWS call is served by moto, and every execution thread has ended
before the mock closes (a thread outliving the mock would reach real endpoints).
"""

from __future__ import annotations

import heapq
import importlib
import itertools
import json
import logging
import os
import queue
import threading
import time
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Callable
from unittest import mock

from gpufill import constants
from gpufill.adapters import clock
from gpufill.local import interruptions
from gpufill.local.deploy import account as deploy_account
from gpufill.local.deploy import images, public_layers
from gpufill.local.deploy import model as stack_model
from gpufill.local.deploy.images import LOCAL_AMI, LOCAL_AMI_ROOT_SNAPSHOT_GIB  # noqa: F401 (tests read them here)
from gpufill.local.deploy.model import LOCAL_ACCOUNT, AppModel
from gpufill.local import quotas, scheduler
from gpufill.local.emf import EmbeddedMetrics
from gpufill.local.iam import simulation_api
from gpufill.local.metrics import CallLog
from gpufill.local.scenario import MarketScenario

REPO_ROOT = Path(__file__).resolve().parents[3]
# The workflow the CDK app inlines in its template (the engine deploys the template's copy).
STATEMACHINE = REPO_ROOT / "statemachine" / "provisioner.asl.json"
ENV_NAME = "local"
HOME_REGION = constants.LOCAL_HOME_REGION
DEFAULT_TIMEOUT_SECONDS = 600.0
# Variables of the simulated account itself, the same for every deployment.
ACCOUNT_ENV = {
    "AWS_ACCESS_KEY_ID": "gpufill-local",
    "AWS_SECRET_ACCESS_KEY": "gpufill-local",
    "AWS_SESSION_TOKEN": "gpufill-local",
    "AWS_DEFAULT_REGION": HOME_REGION,
    "AWS_REGION": HOME_REGION,
    "POWERTOOLS_TRACE_DISABLED": "true",
    "POWERTOOLS_METRICS_DISABLED": "true",
    "POWERTOOLS_LOG_LEVEL": "WARNING",
    "POWERTOOLS_DEV": "false",
    # moto's catalogue of ~1,300 public AMIs per region costs half a second per region to
    # build; gpufill launches only the Deep Learning AMI the engine publishes itself.
    "MOTO_EC2_LOAD_DEFAULT_AMIS": "false",
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
    # wait_for_capacity: the executions this one continues (`<request>-c<n>`), oldest first.
    continued_from: list[Execution] = field(default_factory=list)

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
    """The parts of a LambdaContext that handlers and Powertools read. The time left counts down
    from the function's deployed timeout (as configured now: a test may change it with
    UpdateFunctionConfiguration) by the wall time since the invocation began."""

    def __init__(self, function):
        self.function_name = function.function_name
        self.function_version = "$LATEST"
        self.invoked_function_arn = function.function_arn
        self.memory_limit_in_mb = function.memory_size
        self.aws_request_id = f"local-{time.monotonic_ns()}"
        self.log_group_name = f"/aws/lambda/{function.function_name}"
        self.log_stream_name = "local"
        self._deadline = time.monotonic() + float(function.timeout)

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int((self._deadline - time.monotonic()) * 1000))


@dataclass
class Deployment:
    """One gpufill deployment (cdk context `env`) in the simulated account, as the CDK app made it."""

    env: str
    app: AppModel
    state_machine_arn: str = ""
    approval_topic_arn: str = ""
    function_arns: dict[str, str] = field(default_factory=dict)

    @property
    def environment(self) -> dict[str, str]:
        """The variables every function of the deployment has (the stack gives them all the same,
        StartRefill one more)."""
        return common_environment(self.app)


class _Environments:
    """Applies a deployment's function Environment to os.environ around each in-process
    invocation. Handlers read os.environ as on Lambda; invocations of one deployment run
    side by side, and one of another deployment waits until they are done."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._applied: dict[str, str] | None = None
        self._active = 0
        # Between invocations os.environ is the first deployment's again, so code outside a
        # handler (a test, the approval helpers) never reads what another deployment left.
        self.default: dict[str, str] | None = None

    @contextmanager
    def applied(self, variables: dict[str, str]):
        with self._changed:
            while self._active and self._applied != variables:
                self._changed.wait()
            if not self._active:
                os.environ.update(variables)
                self._applied = dict(variables)
            self._active += 1
        try:
            yield
        finally:
            with self._changed:
                self._active -= 1
                if not self._active and self.default is not None and self._applied != self.default:
                    os.environ.update(self.default)
                    self._applied = dict(self.default)
                self._changed.notify_all()


class LocalEngine:
    """A simulated AWS account with gpufill deployed in it (one deployment per name in
    `env_names`; the first is the one run() and the approval helpers use by default), each as
    the CDK app synthesizes it (local/deploy/). `definition`: an ASL file to run instead of the
    app's own, its placeholders filled with the same substitutions."""

    def __init__(
        self,
        scenario: MarketScenario,
        *,
        definition: Path | None = None,
        regions_config: dict | None = None,
        env_names: tuple[str, ...] = (ENV_NAME,),
        visibility_delay_calls: int = 1,
        judge_iam: bool = True,
    ):
        if not env_names:
            raise ValueError("env_names: at least one deployment is needed")
        self.scenario = scenario
        self.definition = definition
        self.regions_config = regions_config or {"regions": sorted(scenario.regions)}
        self.env_names = tuple(env_names)
        self.visibility_delay_calls = visibility_delay_calls
        # Every call of a handler or of the state machine is judged by the caller's deployed IAM
        # policies before moto answers (local/iam/); off only for engine tests about something else.
        self.judge_iam = judge_iam
        self.iam = None  # the judgements made, once started
        self.calls = CallLog()
        self.deployments: dict[str, Deployment] = {}
        self._stack = ExitStack()
        self._threads_before: set[threading.Thread] = set()
        self._environments = _Environments()
        self._invocation = threading.local()
        self._answered_tokens: set[str] = set()
        self._clients: dict[tuple[str, str], Any] = {}
        self._clients_lock = threading.Lock()
        # The CDK app synthesized for each deployment (read before the mock starts: a first
        # synth runs the app in a child process).
        self._apps: dict[str, AppModel] = {}
        # Every deployed function by name: its settings as the template gives them.
        self.functions: dict[str, stack_model.Function] = {}
        # Every role deployed (functions', state machines', instances', EventBridge targets'), by
        # ARN, with its resolved policies: what a call made under that role is allowed.
        self.roles: dict[str, stack_model.Role] = {}
        # Modelled time: what the fast-forwarded Wait states and advance() have added, and what
        # the scenario or a test scheduled to happen at a modelled second.
        self._elapsed = 0.0
        self._scheduled: list[tuple[float, int, Callable[[], None]]] = []
        self._clock_lock = threading.RLock()
        self._incoming: list[tuple[float, Callable[[], None]]] = []
        self._incoming_lock = threading.Lock()
        # EventBridge Scheduler's runs of gpufill's schedules (local/scheduler.py).
        self.schedule_runs: list[dict] = []
        # EC2's events put on a default bus, and what each scheduled interruption did.
        self.events_sent: list[dict] = []
        self.event_deliveries: list[dict] = []
        self._delivery_queue: queue.Queue = queue.Queue()
        self._delivery_workers: list[threading.Thread] = []
        self._delivery_lock = threading.Lock()
        self.reclaims: list = []
        from gpufill.local.faults import Faults

        self.faults = Faults()
        self.calls.faults = self.faults
        self.embedded_metrics = EmbeddedMetrics()

    @property
    def state_machine_arn(self) -> str:
        return self.deployments[self.env_names[0]].state_machine_arn

    @property
    def approval_topic_arn(self) -> str:
        return self.deployments[self.env_names[0]].approval_topic_arn

    @property
    def account(self) -> str:
        return LOCAL_ACCOUNT

    @property
    def home_region(self) -> str:
        return HOME_REGION

    # --- lifecycle -------------------------------------------------------------------

    def __enter__(self) -> LocalEngine:
        try:
            return self._start()
        except BaseException:
            # A start that fails (a deploy refused, a synth error) leaves no mock or patch behind:
            # the next engine in the process would otherwise start nested in this one's account.
            self._stack.close()
            raise

    def _start(self) -> LocalEngine:
        self._threads_before = set(threading.enumerate())
        # The interpreter logs every failed execution at error level; the run's own result says it better.
        interpreter_log = logging.getLogger("moto.stepfunctions")
        self._stack.callback(interpreter_log.setLevel, interpreter_log.level)
        interpreter_log.setLevel(logging.CRITICAL)
        for env in self.env_names:
            self._app(env)
        self._stack.enter_context(mock.patch.dict(os.environ, {**ACCOUNT_ENV, **common_environment(self._app(self.env_names[0]))}))
        for name in SCRUBBED_ENV:
            os.environ.pop(name, None)
        # First: importing moto's EC2 models below already makes sessions and loads models.
        self._stack.enter_context(_shared_botocore_models())
        from moto import mock_aws  # imported late: the CLI's --help should not pay for moto

        from gpufill.local import limits
        from gpufill.local.market import SimulatedMarket

        self._forget_caches()
        self._stack.callback(self._forget_caches)
        self.market = SimulatedMarket(
            self.scenario, visibility_delay_calls=self.visibility_delay_calls, deployment=self.env_names[0]
        )
        self.market.faults = self.faults
        from gpufill.local.iam.instance_calls import InstanceCalls

        instance_calls = InstanceCalls(self)
        self.market.instance_may, self.market.startup_bucket = instance_calls.may, instance_calls.startup_bucket
        self.market.schedule, self.market.elapsed = self.at, lambda: self.elapsed
        clock.reset()
        self._stack.callback(clock.reset)
        for event in self.scenario.restock:
            self.at(event.at_seconds, partial(self.market.restock, event.zone, event.type,
                                              spot=event.spot, on_demand=event.on_demand))
        for event in self.scenario.interruptions:
            self.at(event.at_seconds, partial(interruptions.reclaim, self,
                                              interruptions.Reclaim(at_seconds=event.at_seconds, instance=event.instance)))
        self._stack.enter_context(mock_aws(config={"stepfunctions": {"execute_state_machine": True}}))
        self._stack.callback(self._end_executions)
        self._stack.enter_context(self.market.patches())
        self._stack.enter_context(self._in_process_lambdas())
        self._stack.enter_context(self._faults_at_the_wire())
        self.iam = self._stack.enter_context(self._judged_calls())
        self._stack.enter_context(self._no_sleeping_retries())
        # A handler's own backoff (adapters/visibility.py) lets modelled time pass instead of sleeping.
        self._stack.enter_context(mock.patch.object(clock, "_sleep", self.advance))
        self._stack.enter_context(self._no_sleeping_waits())
        self._stack.enter_context(self._start_execution_as_aws_does())
        self._stack.enter_context(interruptions.patches(self))
        self._stack.enter_context(scheduler.patches(self))
        self._stack.enter_context(_entered_time_on_the_modelled_clock())
        self._stack.enter_context(_atomic_start_execution())
        self._stack.enter_context(_one_lambda_client_per_region())
        self._stack.enter_context(_one_response_method_listing())
        self._stack.enter_context(self.calls.patches())
        self._stack.enter_context(self.embedded_metrics.patches())
        self._stack.enter_context(public_layers.patches())
        self._stack.enter_context(quotas.patches(self.scenario))
        self._stack.enter_context(simulation_api.patches(self._policies_of_role, self.account))
        self._stack.enter_context(limits.patches(self._answered_tokens))
        self._stack.enter_context(_parse_definitions_once())
        from gpufill.adapters import spot_advisor

        spot_advisor.reset(self.scenario.advisor_document())
        self._deploy_account()
        for env in self.env_names:
            self.deploy(env)
        self._environments.default = self.deployments[self.env_names[0]].environment
        os.environ.update(self._environments.default)
        return self

    def __exit__(self, *exc) -> None:
        try:
            self._record_iam_usage()
        finally:
            self._stack.close()

    def _record_iam_usage(self) -> None:
        """With $GPUFILL_IAM_USAGE set to a folder, leave there which deployed role used which
        action (so `gpufill local iam-report --usage DIR` can tell the grants no run of a whole
        test session used)."""
        folder = os.environ.get("GPUFILL_IAM_USAGE")
        if not folder or self.iam is None:
            return
        from gpufill.local.iam.report import usage_of

        path = Path(folder) / f"engine-{os.getpid()}-{id(self)}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(usage_of(self)))

    def _forget_caches(self) -> None:
        from gpufill.adapters import ami, aws, network, placement_scores, regions_config, run_store, spot_advisor

        aws.forget_clients()
        placement_scores.reset()
        network.forget()
        regions_config.forget()
        ami.image_for.cache_clear()
        run_store.forget()
        spot_advisor.reset()

    def cold_start(self) -> None:
        """Forget every per-container cache (clients, resolved AMIs, the regions config,
        network lookups, placement scores), as a new Lambda container starts with none."""
        from gpufill.adapters import spot_advisor

        self._forget_caches()
        spot_advisor.reset(self.scenario.advisor_document())

    def _end_executions(self) -> None:
        self.settle()  # a delivery still running could start an execution after the sweep below
        self._stop_deliveries()
        sfn = self.client("stepfunctions")
        for deployment in self.deployments.values():
            for page in sfn.get_paginator("list_executions").paginate(
                stateMachineArn=deployment.state_machine_arn, statusFilter="RUNNING"
            ):
                for e in page["executions"]:
                    _stop_execution(sfn, e["executionArn"], error="LocalEngineClosed")
        self._release_task_token_waits()
        for thread in set(threading.enumerate()) - self._threads_before:
            thread.join(timeout=10)

    # --- the simulated account ---------------------------------------------------------

    def client(self, service: str, region: str = HOME_REGION):
        """A boto3 client of the simulated account, one per service and region for the engine's
        life (clients are thread-safe; making one costs tens of milliseconds)."""
        key = (service, region)
        with self._clients_lock:
            if key not in self._clients:
                import boto3

                self._clients[key] = boto3.client(service, region_name=region)
            return self._clients[key]

    def _deploy_account(self) -> None:
        """What every deployment shares: AWS's public Deep Learning AMI and Powertools layer."""
        regions = set(self.scenario.regions) | set(self.regions_config.get("regions", []))
        for region in sorted(regions):
            images.publish(region, LOCAL_AMI)
        for region in sorted(regions | {HOME_REGION}):  # the stack deploys home, wherever the market is
            public_layers.publish(region)

    def _app(self, env: str) -> AppModel:
        if env not in self._apps:
            self._apps[env] = stack_model.load(env)
        return self._apps[env]

    def deploy(self, env: str) -> Deployment:
        """Deploy gpufill as environment `env`: what the CDK app synthesizes with context env=`env`
        (see local/deploy/), the forwarding stack in every region of the regions config but home."""
        if env in self.deployments:
            raise ValueError(f"env: deployment {env!r} already exists in this account")
        app = self._app(env)
        deployed = deploy_account.deploy_app(
            self.client,
            app,
            regions=sorted(set(self.regions_config.get("regions", [])) | {HOME_REGION}),
            regions_config=json.dumps(self.regions_config),
            definition=self.definition.read_text() if self.definition is not None else None,
        )
        deployment = Deployment(
            env,
            app,
            state_machine_arn=deployed.state_machine_arn,
            approval_topic_arn=deployed.approval_topic_arn,
            function_arns=deployed.function_arns,
        )
        self.functions.update(deployed.functions)
        self.roles.update(deployed.roles)
        self.deployments[env] = deployment
        return deployment

    def _invoke_async(self, function_arn: str, event: dict) -> None:
        """EventBridge invokes a Lambda target asynchronously: the invocation is queued for a few
        delivery threads (Lambda's concurrency, kept small so a teardown of a thousand instances
        does not start two thousand threads); settle() waits until the queue is empty."""
        # Its own lock, not the clock's: an action scheduled at a modelled second runs holding the
        # clock's lock and may run an execution (a teardown) whose TerminateInstances delivers events.
        with self._delivery_lock:
            while len(self._delivery_workers) < interruptions.DELIVERY_WORKERS:
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
        for _ in range(interruptions.ASYNC_INVOKE_TRIES):
            reply = lam.invoke(FunctionName=function_arn, Payload=json.dumps(event).encode())
            answer = json.loads(reply["Payload"].read() or b"null")
            self.event_deliveries.append({"function": function_arn, "event": event, "answer": answer,
                                          "failed": "FunctionError" in reply})
            if "FunctionError" not in reply:
                return

    @contextmanager
    def as_deployment(self, env: str):
        """Run the enclosed code (e.g. adapters that read os.environ) as deployment `env`'s functions do."""
        with self._environments.applied(self.deployments[env].environment):
            yield

    # --- the public Deep Learning AMI ------------------------------------------------------

    def publish_newer_ami(self, region: str) -> str:
        """AWS releases a newer Deep Learning AMI in `region`: a new image, and the public
        parameter now names it. Containers that resolved the old one keep it until they
        resolve again (see cold_start). Returns the new image id."""
        return images.publish(region)

    # --- running -----------------------------------------------------------------------

    def run(
        self,
        request: dict | str,
        *,
        name: str,
        on_event: Callable[[dict], None] | None = None,
        timeout: float = DEFAULT_TIMEOUT_SECONDS,
        decision: str | None = None,
        env: str | None = None,
    ) -> Execution:
        """Run one execution of deployment `env` (default: the first) to its end. A teardown's
        approval is answered with `decision` (approved | rejected | timeout) as soon as it is
        pending; without one it waits, and another thread may answer it with answer_approval()
        or expire_approval(). After `timeout` seconds of wall time the execution is stopped and
        reported FAILED with error "LocalTimeout"."""
        env = env or self.env_names[0]
        deployment = self.deployments[env]
        sfn = self.client("stepfunctions")
        body = request if isinstance(request, str) else json.dumps(request)
        marker = self.calls.mark()
        published = len(self.approval_messages(env))
        arn = sfn.start_execution(stateMachineArn=deployment.state_machine_arn, name=name, input=body)["executionArn"]
        chain: list[Execution] = []
        while True:
            execution = self._follow(
                name, arn, env=env, marker=marker, published=published, on_event=on_event, timeout=timeout, decision=decision
            )
            successor = (execution.output or {}).get("continued_as") if execution.status == "SUCCEEDED" else None
            if not isinstance(successor, str):
                break
            # wait_for_capacity continued as a new execution: the request goes on there.
            chain.append(execution)
            name = successor
            arn = deployment.state_machine_arn.replace(":stateMachine:", ":execution:") + f":{successor}"
        execution.continued_from = chain
        return execution

    def follow(self, name: str, *, env: str | None = None, timeout: float = DEFAULT_TIMEOUT_SECONDS,
               on_event: Callable[[dict], None] | None = None, decision: str | None = None) -> Execution:
        """Wait for execution `name` of deployment `env`, started by something else (a refill run
        StartRefill started, the teardown a max_lifetime started), to end; its metrics count from
        the moment it is followed. A teardown's approval is answered with `decision`, as run() does."""
        env = env or self.env_names[0]
        arn = f"{self.deployments[env].state_machine_arn.replace(':stateMachine:', ':execution:', 1)}:{name}"
        return self._follow(name, arn, env=env, marker=self.calls.mark(), published=len(self.approval_messages(env)),
                            on_event=on_event, timeout=timeout, decision=decision)

    def executions(self, env: str | None = None) -> list[str]:
        """The names of every execution of deployment `env`, oldest first."""
        sfn = self.client("stepfunctions")
        found = []
        for page in sfn.get_paginator("list_executions").paginate(stateMachineArn=self.deployments[env or self.env_names[0]].state_machine_arn):
            found.extend(page["executions"])
        return [e["name"] for e in sorted(found, key=lambda e: e["startDate"])]

    def _follow(self, name: str, arn: str, *, env: str, marker, published: int,
                on_event: Callable[[dict], None] | None, timeout: float, decision: str | None) -> Execution:
        sfn = self.client("stepfunctions")
        # Waiting reads moto's own record of the execution (its status and how many events it has),
        # which costs nothing; every answer the run gets (status, output, history) still comes
        # through the Step Functions API once the execution has ended.
        record = _execution_record(arn)
        answered = timed_out = False
        seen = read_at_events = 0
        next_read = 0.0  # watching: the history is read again no sooner than this
        deadline = time.monotonic() + timeout
        pause = 0.001  # short at first: most steps end in a few milliseconds
        while True:
            status = _record_status(record) if record is not None else sfn.describe_execution(executionArn=arn)["status"]
            if on_event and status == "RUNNING" and time.monotonic() >= next_read:
                # The history is only read while running when someone is watching, when it has
                # grown, and at most a fifth of the time (each read serialises the whole history).
                events = _record_events(record)
                if events is None or events != read_at_events:
                    began = time.monotonic()
                    history = _history(sfn, arn)
                    for event in history[seen:]:
                        on_event(event)
                    seen, read_at_events = len(history), events
                    next_read = time.monotonic() + max(0.05, 4 * (time.monotonic() - began))
            if status != "RUNNING":
                break
            if decision is not None and not answered:
                with self.as_deployment(env):
                    answered = self._answer_when_pending(name, decision)
            if time.monotonic() > deadline:
                if timed_out:  # stopped, and still not ended after a grace period: report it anyway
                    break
                timed_out = True
                _stop_execution(sfn, arn, error="LocalTimeout", cause=f"still running after {timeout:g} s; raise it with --timeout")
                self._release_task_token_waits()  # a task waiting for a token would not notice the stop
                deadline = time.monotonic() + 5
                continue
            time.sleep(pause)
            pause = min(pause * 2, 0.005)
        described = sfn.describe_execution(executionArn=arn)
        # The interpreter flips the status a moment before it stores the output: wait for it.
        settle_until = time.monotonic() + 5
        while described["status"] == "SUCCEEDED" and "output" not in described and time.monotonic() < settle_until:
            time.sleep(0.002)
            described = sfn.describe_execution(executionArn=arn)
        history = _history(sfn, arn)
        for event in history[seen:]:
            if on_event:
                on_event(event)
        status, error, cause = described["status"], described.get("error"), _json(described.get("cause"))
        if timed_out:  # AWS would say ABORTED for a stop; a local timeout is a failure of the run
            status, error, cause = "FAILED", "LocalTimeout", f"still running after {timeout:g} s; raise it with --timeout"
        with self.as_deployment(env):
            approval = self.approval(name)
        return Execution(
            name=name,
            arn=arn,
            status=status,
            output=_json(described.get("output")),
            error=error,
            cause=cause,
            history=history,
            metrics=self.calls.metrics_since(marker, history),
            approval=approval,
            notifications=self.approval_messages(env)[published:],
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
                self._answered_tokens.add(token)  # a late answer now meets TaskTimedOut, as on AWS
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

    def approval_messages(self, env: str | None = None) -> list[dict]:
        """Everything published to deployment `env`'s approval topic so far: {"subject", "message"}."""
        from moto.sns.models import sns_backends

        topic_arn = self.deployments[env or self.env_names[0]].approval_topic_arn
        _, _, _, region, account, *_ = topic_arn.split(":")
        topic = sns_backends[account][region].topics[topic_arn]
        return [{"subject": subject, "message": message} for _, message, subject, *_ in topic.sent_notifications]

    def _release_task_token_waits(self) -> None:
        """A stopped execution's waitForTaskToken thread would wait out its whole timeout
        (a day by default); wake every one so the engine closes at once."""
        from moto.stepfunctions.parser.models import stepfunctions_parser_backends

        if not self.deployments:  # a start that failed before anything could run
            return
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
        """Every Lambda invoke runs the handler in this process, with the function's own
        Environment applied, and with the Lambda-level faults of engine.faults."""
        from moto.awslambda.models import LambdaFunction

        from gpufill.local.faults import KilledInvocation

        engine, calls, faults = self, self.calls, self.faults

        def invoke(function, event=None):
            deployed = engine.functions[function.function_name]
            task = deployed.task
            fault = faults.for_invocation(task)
            if fault is not None and not fault.after:
                return _lambda_error(fault.error, function), True, ""
            module_name, _, attr = function.handler.rpartition(".")
            handler = getattr(importlib.import_module(module_name), attr)
            # A function the state machine does not invoke (StartRefill) runs outside any run.
            logged = calls.invocation(module_name.rsplit(".", 1)[-1]) if deployed.placeholder else calls.outside_runs()
            with engine._environments.applied(function.environment_vars), logged:
                engine._invocation.task = task
                engine._invocation.function = deployed
                try:
                    result = handler(event if event is not None else {}, FakeContext(function))
                except KilledInvocation:
                    return _lambda_error("Sandbox.Timedout", function), True, ""
                except Exception as error:  # noqa: BLE001 (reported to the state machine as a Lambda function error)
                    return json.dumps({"errorType": type(error).__name__, "errorMessage": str(error)}), True, ""
                finally:
                    engine._invocation.task = None
                    engine._invocation.function = None
            if fault is not None:  # after_handler: the work is done, the answer is lost
                return _lambda_error(fault.error, function), True, ""
            return json.dumps(result), False, ""

        return mock.patch.object(LambdaFunction, "_invoke_lambda", invoke)

    def _policies_of_role(self, role_arn: str):
        role = self.roles.get(role_arn)
        return None if role is None else role.named_policies

    def _judged_calls(self):
        from gpufill.local.iam.enforcement import judged_calls
        from gpufill.local.iam.principals import engine_principals
        from gpufill.local.iam.world import engine_world

        return judged_calls(engine_principals(self), engine_world(self), account=self.account, enabled=self.judge_iam)

    def _faults_at_the_wire(self):
        """AWS-level faults, injected where botocore sends the HTTP request to moto, so that
        botocore's retry handler sees them as it would see AWS's answers."""
        from moto.core.botocore_stubber import BotocoreStubber

        from gpufill.local.faults import KilledInvocation, raise_or_answer

        original = BotocoreStubber.__call__
        engine, faults = self, self.faults

        def stubbed(stubber, event_name, request, **kwargs):
            if not stubber.enabled:
                return None
            _, service_id, operation = event_name.split(".", 2)
            task = getattr(engine._invocation, "task", None)
            found = faults.for_aws_call(service_id, operation, request.url, task)
            if found is None:
                return original(stubber, event_name, request, **kwargs)
            layer, rule = found
            if layer == "kill":
                if rule.meanwhile is not None:
                    # What happens elsewhere in the account is not this (dead) function's doing.
                    function, engine._invocation.function = getattr(engine._invocation, "function", None), None
                    try:
                        rule.meanwhile()
                    finally:
                        engine._invocation.function = function
                raise KilledInvocation(f"{task} killed at {service_id}:{operation}")
            if rule.after:
                original(stubber, event_name, request, **kwargs)  # AWS did it; the reply is lost
            return raise_or_answer(rule, service_id, operation, request)

        return mock.patch.object(BotocoreStubber, "__call__", stubbed)

    def _no_sleeping_retries(self):
        """Retry backoff (the state machine's and botocore's own) costs no wall time locally."""
        import botocore.endpoint
        from moto.stepfunctions.parser.asl.component.common.retry import retrier_decl

        class _Clock:
            @staticmethod
            def sleep(seconds: float) -> None:
                return None

            def __getattr__(self, name):
                return getattr(time, name)

        stack = ExitStack()
        stack.enter_context(mock.patch.object(retrier_decl, "time", _Clock()))
        stack.enter_context(mock.patch.object(botocore.endpoint, "time", _Clock()))
        return stack

    def _start_execution_as_aws_does(self):
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

    def _no_sleeping_waits(self):
        """Wait states return at once; the seconds they would have waited count in the modelled time."""
        from moto.stepfunctions.parser.asl.component.state.wait.wait_function.wait_function import WaitFunction

        engine = self

        def wait_interval(function, env, wait_seconds):
            engine.calls.waited(wait_seconds)
            engine.advance(wait_seconds)

        return mock.patch.object(WaitFunction, "_wait_interval", wait_interval)

    # --- modelled time -----------------------------------------------------------------

    @property
    def elapsed(self) -> float:
        """Modelled seconds since the engine started (Wait states and advance())."""
        return self._elapsed

    def at(self, seconds: float, action: Callable[[], None]) -> None:
        """Do `action` once modelled time reaches `seconds` (at once if it already has)."""
        with self._clock_lock:
            heapq.heappush(self._scheduled, (seconds, next(_SEQUENCE), action))
        self.advance(0)

    def at_later(self, seconds: float, action: Callable[[], None]) -> None:
        """As at(), for a caller that may run while another thread holds the clock (a Lambda of an
        execution that an action scheduled at a modelled second runs): noted under a lock of its
        own, taken into the schedule by the next advance()."""
        with self._incoming_lock:
            self._incoming.append((seconds, action))

    def advance(self, seconds: float) -> None:
        """Let `seconds` of modelled time pass: the handlers' clock moves, and what was scheduled
        by then happens, in time order, before anything reads the clock again."""
        with self._clock_lock:
            self._elapsed += max(0.0, seconds)
            clock.fast_forward(seconds)
            while True:
                with self._incoming_lock:  # noted meanwhile, by an action or another thread
                    for due, action in self._incoming:
                        heapq.heappush(self._scheduled, (due, next(_SEQUENCE), action))
                    self._incoming.clear()
                if not (self._scheduled and self._scheduled[0][0] <= self._elapsed):
                    break
                _, _, action = heapq.heappop(self._scheduled)
                action()


def _entered_time_on_the_modelled_clock():
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


def _atomic_start_execution():
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


def _one_lambda_client_per_region():
    """moto's interpreter makes a new boto3 Lambda client for every Lambda task it runs (about
    7 ms each); one per region serves them all (it ignores a task's Credentials either way)."""
    from moto.stepfunctions.parser.asl.component.state.exec.state_task import lambda_eval_utils

    original = lambda_eval_utils.boto_client_for
    clients: dict[tuple[str, str], Any] = {}
    lock = threading.Lock()

    def boto_client_for(region: str, service: str, state_credentials: Any = None):
        with lock:
            if (region, service) not in clients:
                clients[(region, service)] = original(region=region, service=service, state_credentials=state_credentials)
            return clients[(region, service)]

    return mock.patch.object(lambda_eval_utils, "boto_client_for", boto_client_for)


_SEQUENCE = itertools.count()
_MODELS: dict[tuple, Any] = {}
_MODELS_LOCK = threading.RLock()  # a model load lists the services first


def _shared_botocore_models():
    """Every boto3 session in the process (the handlers', Powertools', moto's interpreter's)
    loads each service model once. A botocore Loader caches models per session, and the
    interpreter and Powertools make new sessions, so each would parse the same multi-megabyte
    JSON again. The models are read-only once loaded (botocore already hands one cached
    object to every client of a session). Likewise, per process: the listing of every service's
    directory (over 400) a new Loader makes before its first model, the endpoints and other
    top-level data files (read-only too), and a service's regions (each new session would load
    the service's whole model to read its endpoint prefix; moto makes a session per backend)."""
    from botocore.loaders import Loader
    from botocore.session import Session

    original = Loader.load_service_model
    original_listing = Loader.list_available_services
    original_data = Loader.load_data_with_path
    original_regions = Session.get_available_regions

    def load_service_model(loader, service_name, type_name, api_version=None):
        # Loaders with other search paths (boto3's, moto's) load the same file: the key is the
        # file a loader would read and the extras it would merge into it (moto's loader merges
        # its own, boto3's the SDK's).
        try:
            version = api_version or loader.determine_latest_version(service_name, type_name)
            name = f"{service_name}/{version}/{type_name}"
            found = next(path for path in loader._potential_locations(name) if loader.file_loader.exists(path))
            extras = tuple(json.dumps(e, sort_keys=True) for e in loader._find_extras(service_name, type_name, version))
            key = ("model", found, extras)
        except Exception:  # noqa: BLE001 (an unknown service or version: the loader itself says so)
            key = (tuple(loader.search_paths), service_name, type_name, api_version)
        with _MODELS_LOCK:  # parallel Map branches would otherwise each parse the same model at once
            if key not in _MODELS:
                _MODELS[key] = original(loader, service_name, type_name, api_version)
            return _MODELS[key]

    def list_available_services(loader, type_name):
        key = ("services", tuple(loader.search_paths), type_name)
        with _MODELS_LOCK:
            if key not in _MODELS:
                _MODELS[key] = tuple(original_listing(loader, type_name))
            return list(_MODELS[key])

    def load_data_with_path(loader, name):
        # Only the top-level files (endpoints, partitions, _retry, sdk-default-configuration):
        # a service model gets its extras merged into it in place, per loader.
        if "/" in name:
            return original_data(loader, name)
        found = next((path for path in loader._potential_locations(name) if loader.file_loader.exists(path)), None)
        key = ("data", found or tuple(loader.search_paths), name)
        with _MODELS_LOCK:
            if key not in _MODELS:
                _MODELS[key] = original_data(loader, name)
            return _MODELS[key]

    def get_available_regions(session, service_name, partition_name="aws", allow_non_regional=False):
        key = ("regions", tuple(session.get_component("data_loader").search_paths), service_name,
               partition_name, allow_non_regional)
        with _MODELS_LOCK:
            if key not in _MODELS:
                _MODELS[key] = tuple(original_regions(session, service_name, partition_name, allow_non_regional))
            return list(_MODELS[key])

    stack = ExitStack()
    stack.enter_context(mock.patch.object(Loader, "load_service_model", load_service_model))
    stack.enter_context(mock.patch.object(Loader, "list_available_services", list_available_services))
    stack.enter_context(mock.patch.object(Loader, "load_data_with_path", load_data_with_path))
    stack.enter_context(mock.patch.object(Session, "get_available_regions", get_available_regions))
    return stack


_PARSE_TREES: dict[str, Any] = {}
_PARSE_LOCK = threading.Lock()


def _parse_definitions_once():
    """moto parses a definition with ANTLR when the state machine is created and again at every
    StartExecution (about 0.3 s for gpufill's). The parse tree of a text that parsed without
    errors is kept for the process; every parse still builds fresh evaluation components from
    it (moto's Preprocessor reads the tree, never changes it), so no execution shares state
    with another. A text with syntax errors is parsed, and refused, every time. The text of
    each node of a kept tree is kept too: the Preprocessor asks for the whole program's text
    (for an error message it raises only when StartAt or States is missing) on every build."""
    from antlr4.RuleContext import RuleContext
    from moto.stepfunctions.parser.asl.parse.asl_parser import AmazonStateLanguageParser
    from moto.stepfunctions.parser.asl.parse.preprocessor import Preprocessor

    original = AmazonStateLanguageParser.parse
    original_text = RuleContext.getText

    def parse(definition: str):
        with _PARSE_LOCK:
            tree = _PARSE_TREES.get(definition)
        if tree is None:
            program, tree = original(definition)
            with _PARSE_LOCK:
                _remember_texts(tree)
                _PARSE_TREES[definition] = tree
            return program, tree
        return Preprocessor().visit(tree), tree

    def get_text(context):
        text = _TEXTS.get(id(context))  # only nodes of kept trees, which live as long as the process
        return text if text is not None else original_text(context)

    stack = ExitStack()
    stack.enter_context(mock.patch.object(AmazonStateLanguageParser, "parse", staticmethod(parse)))
    stack.enter_context(mock.patch.object(RuleContext, "getText", get_text))
    return stack


_TEXTS: dict[int, str] = {}


def _remember_texts(tree) -> str:
    from antlr4.RuleContext import RuleContext

    if not isinstance(tree, RuleContext):
        return tree.getText()  # a token
    text = "".join(_remember_texts(child) for child in (tree.children or ()))
    _TEXTS[id(tree)] = text
    return text


def _one_response_method_listing():
    """moto lists a response class's methods (inspect.getmembers, about a millisecond) on every
    request to see whether it has the action; the listing is kept per class while the engine runs."""
    from moto.core import responses

    original = responses.method_names_from_class
    listings: dict[type, list[str]] = {}

    def method_names_from_class(clazz):
        if clazz not in listings:
            listings[clazz] = original(clazz)
        return listings[clazz]

    return mock.patch.object(responses, "method_names_from_class", method_names_from_class)


def _lambda_error(error: str, function) -> str:
    """The error payload Lambda reports for a failed invocation; Step Functions names the
    task's error after its errorType (Sandbox.Timedout, Lambda.Unknown, Lambda.ServiceException)."""
    messages = {
        "Sandbox.Timedout": f"RequestId: local Error: Task timed out after {float(function.timeout):.2f} seconds",
        "Lambda.Unknown": "The cause could not be determined because Lambda did not return an error type.",
        "Lambda.ServiceException": "Lambda was unable to process the request (ServiceException).",
    }
    return json.dumps({"errorType": error, "errorMessage": messages.get(error, error)})


def _local_user() -> str:
    import getpass

    try:
        return f"{getpass.getuser()} (local)"
    except Exception:  # noqa: BLE001 (no login name in some containers)
        return "local-user"


def _execution_record(arn: str):
    """moto's record of execution `arn` (what DescribeExecution answers from), or None."""
    from moto.stepfunctions.parser.models import stepfunctions_parser_backends

    _, _, _, region, account, *_ = arn.split(":")
    try:
        return stepfunctions_parser_backends[account][region].describe_execution(arn)
    except Exception:  # noqa: BLE001 (not there: the engine falls back to asking the API each time)
        return None


def _stop_execution(sfn, arn: str, *, error: str, cause: str = "") -> None:
    """StopExecution, as AWS takes it at any moment of a run. moto's interpreter can only stop
    an execution whose worker has started its program; one started a moment ago has not yet,
    so wait (briefly) for that before asking."""
    record = _execution_record(arn)
    started_by = time.monotonic() + 5
    while record is not None and getattr(record.exec_worker, "env", None) is None and time.monotonic() < started_by:
        time.sleep(0.001)
    sfn.stop_execution(executionArn=arn, error=error, cause=cause)


def _record_status(record) -> str:
    return record.exec_status.value if record.exec_status is not None else "RUNNING"


def _record_events(record) -> int | None:
    """How many history events execution `record` has so far; None when it cannot tell."""
    try:
        return len(record.exec_worker.env.event_manager._history_event_list)
    except AttributeError:
        return None


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


def common_environment(app: AppModel) -> dict[str, str]:
    """The variables every gpufill function of `app` is deployed with, name and value alike."""
    environments = [f.environment for f in app.home.functions.values()]
    first = environments[0]
    return {k: v for k, v in first.items() if all(e.get(k) == v for e in environments[1:])}
