"""The local engine: a simulated AWS account with gpufill deployed in it, running
statemachine/*.asl.json in moto's Step Functions interpreter, every Lambda task in-process.

What it guarantees: nothing leaves the process. Dummy credentials are set before any
client exists, every AWS call is served by moto, and every execution thread has ended
before the mock or any patch closes (a thread outliving the mock would reach real endpoints;
one outliving the in-process Lambda invoker, moto's Docker-backed Lambda).

LocalEngine is made of one part per job, each in its own module: the deployments in the
account (deployments.py), modelled time (modelled_time.py), Lambda's invocations
(lambdas.py), executions (executions.py) and teardown approvals (approvals.py). What it
patches into moto lives with its job too: the Step Functions interpreter made to behave as
AWS's (interpreter.py), moto made fast (speedups.py), faults (faults.py), EC2's
interruptions and EventBridge (interruptions.py), limits (limits.py), the market (market.py).
This module starts the account and ends it.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from contextlib import ExitStack, contextmanager
from functools import partial
from pathlib import Path
from unittest import mock

from gpufill.adapters import clock
from gpufill.local import (
    cloudtrail,
    faults,
    function_urls,
    interpreter,
    interruptions,
    lambdas,
    quotas,
    scheduler,
    speedups,
    throttling,
)
from gpufill.local.approvals import Approvals
from gpufill.local.deploy import public_layers
from gpufill.local.deploy.model import LOCAL_ACCOUNT
from gpufill.local.deployments import ACCOUNT_ENV, HOME_REGION, SCRUBBED_ENV, Deployments, common_environment
from gpufill.local.emf import EmbeddedMetrics
from gpufill.local.executions import Executions
from gpufill.local.function_urls import FunctionUrls
from gpufill.local.iam import simulation_api
from gpufill.local.lambdas import AsyncInvocations
from gpufill.local.metrics import CallLog
from gpufill.local.modelled_time import ModelledTime
from gpufill.local.scenario import MarketScenario
from gpufill.local.throttling import Throttling

REPO_ROOT = Path(__file__).resolve().parents[3]
# The workflow the CDK app inlines in its template (the engine deploys the template's copy).
STATEMACHINE = REPO_ROOT / "statemachine" / "provisioner.asl.json"
ENV_NAME = "local"


class LocalEngine(Deployments, ModelledTime, AsyncInvocations, Executions, Approvals, FunctionUrls):
    """A simulated AWS account with gpufill deployed in it (one deployment per name in
    `env_names`; the first is the one run() and the approval helpers use by default), each as
    the CDK app synthesizes it (local/deploy/). `definition`: an ASL file to run instead of the
    app's own, its placeholders filled with the same substitutions."""

    # Accounts of this process that have ended: from then on, what the process holds is mostly
    # what lives as long as it (tests/conftest.py freezes it out of the garbage collector's walks).
    accounts_ended = 0

    def __init__(
        self,
        scenario: MarketScenario,
        *,
        definition: Path | None = None,
        regions_config: dict | None = None,
        env_names: tuple[str, ...] = (ENV_NAME,),
        visibility_delay_calls: int = 1,
        judge_iam: bool = True,
        sweep: bool = False,
        facts_refresh: bool = False,
        throttling: float | None = None,
    ):
        if not env_names:
            raise ValueError("env_names: at least one deployment is needed")
        super().__init__()  # each part's own state (deployments, modelled time, deliveries)
        self.scenario = scenario
        self.definition = definition
        self.regions_config = regions_config or {"regions": sorted(scenario.regions)}
        self.env_names = tuple(env_names)
        self.visibility_delay_calls = visibility_delay_calls
        # Every call of a handler or of the state machine is judged by the caller's deployed IAM
        # policies before moto answers (local/iam/); off only for engine tests about something else.
        self.judge_iam = judge_iam
        # The deployed sweep schedule runs on the modelled clock (every 15 modelled minutes) only
        # when asked: a test about something else would pay for its passes and see its findings.
        self.sweep = sweep
        # The deployed refresh of the warm facts (every 5 modelled minutes), likewise only when
        # asked: `gpufill simulate` and `gpufill local serve` run it, as a deployment does.
        self.facts_refresh = facts_refresh
        # EC2's request and resource token buckets at AWS's documented sizes times `throttling`
        # (the scenario's `ec2_throttling` when None; 0: off), judged from the end of the start on
        # (local/throttling.py).
        self.throttling = Throttling(scenario.ec2_throttling if throttling is None else throttling)
        self.throttling_started = False
        # Per calling thread: its clock against EC2's buckets, and whether botocore's next sleep follows a throttle.
        self.throttle_caller = threading.local()
        self.throttle_backoff_seconds = 0.0  # modelled seconds botocore's backoff after throttles took
        self.dynamodb_conflicts = 0  # DynamoDB's conditional-check refusals (local/throttling.py counts them)
        self.iam = None  # the judgements made, once started
        self.calls = CallLog()
        self._stack = ExitStack()
        self._threads_before: set[threading.Thread] = set()
        self._invocation = threading.local()
        self._answered_tokens: set[str] = set()
        # EventBridge Scheduler's runs of gpufill's schedules (local/scheduler.py).
        self.schedule_runs: list[dict] = []
        # EC2's events put on a default bus, and what each scheduled interruption did.
        self.events_sent: list[dict] = []
        self.event_deliveries: list[dict] = []
        self.reclaims: list = []
        self.faults = faults.Faults()
        self.calls.faults = self.faults
        self.embedded_metrics = EmbeddedMetrics()
        # CloudTrail's record of who started each execution (separate_approver reads it).
        self.trail = cloudtrail.Trail()

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
        self._stack.enter_context(speedups.shared_botocore_models())
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
        for drained in self.scenario.drain:
            self.at(drained.at_seconds, partial(interruptions.drain, self, drained))
        for event in self.scenario.interruptions:
            self.at(event.at_seconds, partial(interruptions.reclaim, self,
                                              interruptions.Reclaim(at_seconds=event.at_seconds, instance=event.instance)))
        self._stack.enter_context(mock_aws(config={"stepfunctions": {"execute_state_machine": True}}))
        self._stack.enter_context(self.market.patches())
        self._stack.enter_context(lambdas.in_process(self))
        self._stack.enter_context(function_urls.in_process(self))
        self._stack.enter_context(cloudtrail.patches(self))
        # EC2's buckets before the faults: a fault a test injects is answered first and takes no token.
        self._stack.enter_context(throttling.at_the_wire(self))
        self._stack.enter_context(faults.at_the_wire(self))
        self.iam = self._stack.enter_context(self._judged_calls())
        from gpufill.local.iam.enforcement import sts_decoding

        self._stack.enter_context(sts_decoding())
        from gpufill.local.iam import trust

        # Every start judged: the state machine's role must trust Step Functions (local/iam/trust.py).
        self._stack.enter_context(trust.state_machine_starts(self))
        # ...and every creation: a function, state machine or schedule whose role the service may
        # not assume is refused, as AWS refuses it.
        self._stack.enter_context(trust.creations(self))
        self._stack.enter_context(speedups.no_sleeping_retries())
        # After the free retries: botocore's backoff after a throttle lets modelled time pass.
        self._stack.enter_context(throttling.backoff_on_the_modelled_clock(self))
        # A handler's own backoff (adapters/visibility.py) lets modelled time pass instead of sleeping.
        self._stack.enter_context(mock.patch.object(clock, "_sleep", self.advance))
        self._stack.enter_context(interpreter.wait_states_on_the_modelled_clock(self))
        self._stack.enter_context(interpreter.start_execution_as_aws_does())
        self._stack.enter_context(interruptions.patches(self))
        self._stack.enter_context(scheduler.patches(self))
        self._stack.enter_context(interpreter.entered_time_on_the_modelled_clock())
        self._stack.enter_context(interpreter.atomic_start_execution())
        self._stack.enter_context(interpreter.stop_execution_at_any_moment())
        self._stack.enter_context(speedups.one_lambda_client_per_region())
        self._stack.enter_context(speedups.one_response_method_listing())
        self._stack.enter_context(speedups.one_alias_listing_per_member())
        self._stack.enter_context(speedups.json_copies_in_the_interpreter())
        self._stack.enter_context(speedups.one_node_type_listing_per_traverser())
        self._stack.enter_context(speedups.one_clause_count_per_update_expression())
        self._stack.enter_context(self.calls.patches())
        self._stack.enter_context(self.embedded_metrics.patches())
        self._stack.enter_context(public_layers.patches())
        self._stack.enter_context(quotas.patches(self.scenario))
        self._stack.enter_context(simulation_api.patches(self._policies_of_role, self.account))
        self._stack.enter_context(limits.patches(self._answered_tokens))
        self._stack.enter_context(speedups.parse_definitions_once())
        # Last in, so first out: executions still running as the engine closes (a Ctrl-C) are stopped
        # while the account is whole. Undone earlier, the in-process Lambda invoker would leave a
        # running Task to moto's own invoke, which probes for Docker and logs its failure.
        self._stack.callback(self._end_executions)
        from gpufill.adapters import spot_advisor

        spot_advisor.reset(self.scenario.advisor_document())
        self._deploy_account()
        for env in self.env_names:
            self.deploy(env)
        self._add_local_operator()
        self._environments.default = self.deployments[self.env_names[0]].environment
        os.environ.update(self._environments.default)
        # Setting the account up is not gpufill's traffic: EC2's buckets judge the calls from here on.
        self.throttling_started = True
        return self

    def __exit__(self, *exc) -> None:
        try:
            self._record_iam_usage()
        finally:
            self._stack.close()
            LocalEngine.accounts_ended += 1

    def _record_iam_usage(self) -> None:
        """With $GPUFILL_IAM_USAGE set to a folder, leave there which deployed role used which
        action (so `gpufill local iam-report --usage DIR` can tell the grants no run of a whole
        test session used)."""
        folder = os.environ.get("GPUFILL_IAM_USAGE")
        if not folder or self.iam is None:
            return
        from gpufill.local.iam.usage import usage_of

        path = Path(folder) / f"engine-{os.getpid()}-{id(self)}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(usage_of(self)))

    def _forget_caches(self) -> None:
        from gpufill.adapters import aws, container, spot_advisor

        aws.forget_clients()
        container.start_afresh()  # every function's caches (adapters/container.py)
        spot_advisor.reset()

    def cold_start(self) -> None:
        """Forget every function's caches (clients, plans, resolved AMIs, the regions config,
        network lookups, placement scores, the Spot Advisor feed), as new Lambda execution
        environments start with none."""
        from gpufill.adapters import spot_advisor

        self._forget_caches()
        spot_advisor.reset(self.scenario.advisor_document())

    @contextmanager
    def elsewhere(self):
        """Called from inside a handler (a test's hook): what runs in the block happens elsewhere in
        the account while this invocation is paused, as another Lambda container or a person would
        act between two of its calls. Calls made in it are not this function's, and other
        functions' invocations run meanwhile."""
        from gpufill.adapters import container

        invocation = self._invocation
        task, function = getattr(invocation, "task", None), getattr(invocation, "function", None)
        invocation.task = invocation.function = None
        try:
            with self._environments.suspended(), container.running_as(None):
                yield
        finally:
            invocation.task, invocation.function = task, function

    def _policies_of_role(self, role_arn: str):
        role = self.roles.get(role_arn)
        return None if role is None else role.named_policies

    def _judged_calls(self):
        from gpufill.local.iam.enforcement import judged_calls
        from gpufill.local.iam.principals import engine_principals
        from gpufill.local.iam.world import engine_world

        return judged_calls(engine_principals(self), engine_world(self), account=self.account, enabled=self.judge_iam)

