"""Role trust, judged as AWS judges it: a service acts under a role only if the role's trust policy
lets that service principal call sts:AssumeRole, with the request context the service sets.

What each service puts in that context (its confused-deputy guidance says which keys it sends):
- EventBridge Scheduler: aws:SourceArn = the schedule's *group* ARN
  (arn:aws:scheduler:<region>:<account>:schedule-group/<group>), never a schedule's own ARN;
  aws:SourceAccount = the schedule's account.
- Step Functions: aws:SourceArn = the state machine ARN; aws:SourceAccount.
- EventBridge (a rule's target role): aws:SourceArn = the rule ARN; aws:SourceAccount.
- Lambda (a function's execution role) and EC2 (an instance profile's role): no source keys are
  documented; none are sent, so a trust policy conditioned on them is refused here. That is the
  stricter reading: a role the engine accepts is one AWS accepts.

A refusal is told as AWS's services tell theirs, naming the role and what its trust policy asks
for. Decisions are kept per (role, trust policy, service, source) for the engine's life: a run
assumes the same few roles thousands of times.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field

from gpufill.local.deploy.model import Role
from gpufill.local.iam import evaluator as evaluation
from gpufill.local.iam.evaluator import ALLOWED, Evaluator

LAMBDA = "lambda.amazonaws.com"
STATES = "states.amazonaws.com"
SCHEDULER = "scheduler.amazonaws.com"
EVENTS = "events.amazonaws.com"
EC2 = "ec2.amazonaws.com"

# The services that send aws:SourceArn and aws:SourceAccount when they assume a role.
SENDS_SOURCE = frozenset({SCHEDULER, STATES, EVENTS})


def schedule_group_arn(region: str, account: str, group: str, partition: str = "aws") -> str:
    return f"arn:{partition}:scheduler:{region}:{account}:schedule-group/{group}"


def request_context(service: str, account: str, source_arn: str | None) -> dict[str, str]:
    """The keys `service` sets on its sts:AssumeRole request."""
    if service not in SENDS_SOURCE:
        return {}
    context = {"aws:SourceAccount": account}
    if source_arn:
        context["aws:SourceArn"] = source_arn
    return context


@dataclass(frozen=True)
class Refusal:
    role_arn: str
    service: str
    source_arn: str | None
    message: str


def refusal_message(role: Role, service: str, context: dict[str, str]) -> str:
    """Which role refused which service, and what its trust policy asks for that the request lacked."""
    asks = []
    for statement in _statements(role.trust_policy):
        if statement.get("Effect") != "Allow" or service not in _services(statement):
            continue
        conditions = [
            f"{operator} {key} {' or '.join(values) if isinstance(values, list) else values}"
            for operator, keys in sorted((statement.get("Condition") or {}).items())
            for key, values in sorted(keys.items())
        ]
        asks.append(" and ".join(conditions) if conditions else "no condition")
    sent = ", ".join(f"{k}={v}" for k, v in sorted(context.items())) or "no source keys"
    if not asks:
        why = f"its trust policy does not name {service}"
    else:
        why = f"its trust policy trusts {service} only with {'; or '.join(asks)}, and {service} sent {sent}"
    return f"{service} is not authorized to perform: sts:AssumeRole on resource: {role.arn} ({role.name}): {why}"


def _statements(policy: dict) -> list[dict]:
    statements = policy.get("Statement", [])
    return statements if isinstance(statements, list) else [statements]


def _services(statement: dict) -> list[str]:
    principal = statement.get("Principal") or {}
    services = principal.get("Service", []) if isinstance(principal, dict) else []
    return [services] if isinstance(services, str) else list(services)


@dataclass
class Trust:
    """One engine's trust decisions (cached) and the refusals it met, in order."""

    account: str
    judge: Evaluator | None = None
    refusals: list[Refusal] = field(default_factory=list)
    _decided: dict[tuple[str, str, str, str | None], Refusal | None] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def refusal(self, role: Role, service: str, source_arn: str | None = None) -> Refusal | None:
        """None when `service` may assume `role` acting for `source_arn`; else why not (recorded)."""
        key = (role.arn, json.dumps(role.trust_policy, sort_keys=True), service, source_arn)
        with self._lock:
            if key in self._decided:
                refused = self._decided[key]
                if refused is not None:
                    self.refusals.append(refused)
                return refused
        context = request_context(service, self.account, source_arn)
        judge = self.judge or evaluation.shared()
        result = judge.trusts(role.arn, self.account, role.trust_policy, service, context)
        refused = None if result == ALLOWED else Refusal(role.arn, service, source_arn,
                                                         refusal_message(role, service, context))
        with self._lock:
            self._decided[key] = refused
            if refused is not None:
                self.refusals.append(refused)
        return refused


_made = threading.Lock()


def engine_trust(engine) -> Trust:
    """The engine's Trust, made on first use."""
    with _made:
        trust = getattr(engine, "_trust", None)
        if trust is None:
            trust = engine._trust = Trust(engine.account)
        return trust


def refusal(engine, role: Role | None, service: str, source_arn: str | None = None) -> Refusal | None:
    """Whether the engine's service may assume `role` (None when IAM is not judged)."""
    if not engine.judge_iam or role is None:
        return None
    return engine_trust(engine).refusal(role, service, source_arn)


def state_machine_starts(engine):
    """StartExecution as Step Functions takes it: the state machine's role must trust
    states.amazonaws.com for that state machine (aws:SourceArn = its ARN), or no execution starts.
    AWS checks the same at CreateStateMachine (`creations`, below); the engine checks again at
    every start, so a role whose trust changed after deploying is caught too."""
    from unittest import mock

    from moto.core.exceptions import AWSError
    from moto.stepfunctions.parser.models import StepFunctionsParserBackend

    class RoleNotAssumable(AWSError):
        TYPE = "AccessDeniedException"
        STATUS = 400

    original = StepFunctionsParserBackend.start_execution

    def start_execution(backend, state_machine_arn, *args, **kwargs):
        machine = backend.describe_state_machine(state_machine_arn)
        role = engine.roles.get(getattr(machine, "roleArn", None) or "")
        refused = refusal(engine, role, STATES, state_machine_arn) if role is not None else None
        if refused is not None:
            raise RoleNotAssumable(
                "Neither the global service principal states.amazonaws.com, nor the regional one is authorized "
                f"to assume the provided role. {refused.message}"
            )
        return original(backend, state_machine_arn, *args, **kwargs)

    return mock.patch.object(StepFunctionsParserBackend, "start_execution", start_execution)


# What each service answers when the role given at creation is one it may not assume.
LAMBDA_CREATE_REFUSED = "The role defined for the function cannot be assumed by Lambda."
STATES_CREATE_REFUSED = ("Neither the global service principal states.amazonaws.com, nor the regional one is "
                         "authorized to assume the provided role.")
SCHEDULER_CREATE_REFUSED = "The execution role you provide must allow AWS EventBridge Scheduler to assume the role."


def role_named(engine, role_arn: str | None) -> Role | None:
    """The role `role_arn` names: the engine's deployed one, else the account's (moto's) own."""
    if not role_arn:
        return None
    role = engine.roles.get(role_arn)
    if role is not None:
        return role
    from moto.iam.models import iam_backends

    for found in iam_backends[engine.account]["aws"].roles.values():
        if found.arn == role_arn:
            return Role(logical_id="", name=found.name, arn=found.arn, policies=[],
                        trust_policy=json.loads(found.assume_role_policy_document or "{}"))
    return None


def creations(engine):
    """CreateFunction, CreateStateMachine and CreateSchedule as AWS takes them: the service
    validates that it may assume the role it is given and refuses the creation otherwise, so
    nothing is made that could never run. The context is the one each service sends when it later
    assumes the role (the state machine's ARN; the schedule's group). A role the account does not
    hold is left to moto's own checks."""
    from contextlib import ExitStack
    from unittest import mock

    from moto.awslambda.exceptions import InvalidParameterValueException
    from moto.awslambda.models import LambdaBackend
    from moto.core.exceptions import AWSError
    from moto.scheduler.exceptions import ValidationException
    from moto.scheduler.models import EventBridgeSchedulerBackend
    from moto.stepfunctions.parser.models import StepFunctionsParserBackend

    class StatesRoleNotAssumable(AWSError):
        TYPE = "AccessDeniedException"
        STATUS = 400

    create_function = LambdaBackend.create_function
    create_state_machine = StepFunctionsParserBackend.create_state_machine
    create_schedule = EventBridgeSchedulerBackend.create_schedule

    def refused(role_arn, service, source_arn=None) -> Refusal | None:
        return refusal(engine, role_named(engine, role_arn), service, source_arn)

    def function(backend, spec):
        if refused(spec.get("Role"), LAMBDA) is not None:
            raise InvalidParameterValueException(LAMBDA_CREATE_REFUSED)
        return create_function(backend, spec)

    def state_machine(backend, name, definition, roleArn, *args, **kwargs):
        arn = f"arn:aws:states:{backend.region_name}:{backend.account_id}:stateMachine:{name}"
        why = refused(roleArn, STATES, arn)
        if why is not None:
            raise StatesRoleNotAssumable(f"{STATES_CREATE_REFUSED} {why.message}")
        return create_state_machine(backend, name, definition, roleArn, *args, **kwargs)

    def schedule(backend, **kwargs):
        group = schedule_group_arn(backend.region_name, backend.account_id, kwargs.get("group_name") or "default")
        if refused((kwargs.get("target") or {}).get("RoleArn"), SCHEDULER, group) is not None:
            raise ValidationException(SCHEDULER_CREATE_REFUSED)
        return create_schedule(backend, **kwargs)

    stack = ExitStack()
    stack.enter_context(mock.patch.object(LambdaBackend, "create_function", function))
    stack.enter_context(mock.patch.object(StepFunctionsParserBackend, "create_state_machine", state_machine))
    stack.enter_context(mock.patch.object(EventBridgeSchedulerBackend, "create_schedule", schedule))
    return stack
