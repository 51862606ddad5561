"""What the CDK app deploys, read from its synthesized templates and resolved for the simulated
account: the functions, the state machine, storage, the topic, the rules, and every IAM role with
its policies. The engine deploys from this model and nothing else; the IAM evaluator judges each
call against the calling role's `policies`.

    app = load("local")                               # synthesized (or cached) for env "local"
    app.home.functions["LaunchBatch"].timeout_seconds # 300, as deployed
    app.role_for_function("LaunchBatch").policies     # [{"Version": ..., "Statement": [...]}, ...]
    app.state_machine_role, app.instance_role
    app.forwarding("us-west-2").rules                 # the event-forwarding stack, in that region
    app.roles(["us-east-1", "us-west-2"])             # every role of those stacks, by ARN

A running engine keeps every role it deployed, by ARN, in `engine.roles`.

Every ARN is the one the engine creates: names the template gives are kept, and a resource the
template leaves unnamed is called `<stack>-<logical id>` (intrinsics.generated_name).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gpufill import constants
from gpufill.local.deploy import synth
from gpufill.local.deploy.intrinsics import Resolver

LOCAL_ACCOUNT = "123456789012"  # moto's default account: the simulated account
HOME_REGION = constants.LOCAL_HOME_REGION


@dataclass(frozen=True)
class Role:
    logical_id: str
    name: str
    arn: str
    # Identity policies, resolved: inline Policies, AWS::IAM::Policy and customer-managed
    # AWS::IAM::ManagedPolicy resources attached to the role; each a {"Version", "Statement"} document.
    policies: list[dict]
    # (policy name, document) of the same policies, as the engine puts them on the role.
    named_policies: list[tuple[str, dict]] = field(default_factory=list)
    # AWS-managed policies by ARN (their documents are AWS's, not in the template).
    managed_policy_arns: list[str] = field(default_factory=list)
    trust_policy: dict = field(default_factory=dict)
    description: str = ""

    @property
    def assumed_by(self) -> list[str]:
        """The service principals that may assume the role (lambda.amazonaws.com, states...)."""
        found = []
        for statement in self.trust_policy.get("Statement", []):
            services = statement.get("Principal", {}).get("Service", [])
            found.extend([services] if isinstance(services, str) else services)
        return found


@dataclass(frozen=True)
class Function:
    logical_id: str
    task: str  # the function's name without the stack's prefix: LaunchBatch, StartRefill
    placeholder: str | None  # the state machine's substitution for it (LaunchBatchFunctionArn), if any
    name: str
    arn: str
    handler: str
    runtime: str
    memory_mb: int
    timeout_seconds: int
    architectures: list[str]
    environment: dict[str, str]
    role: Role
    # Layer ARNs; one CloudFormation resolves at deploy from SSM is "{{resolve:ssm:NAME}}".
    layers: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class StateMachine:
    logical_id: str
    name: str
    arn: str
    type: str
    definition: str  # the template's definition string, placeholders unfilled
    substitutions: dict[str, str]  # placeholder -> resolved value (a function ARN)
    role: Role


@dataclass(frozen=True)
class Table:
    logical_id: str
    name: str
    arn: str
    key_schema: list[dict]
    attribute_definitions: list[dict]
    billing_mode: str
    global_secondary_indexes: list[dict]
    ttl_attribute: str | None


@dataclass(frozen=True)
class Named:
    """A resource the engine only needs by name and ARN (topic, bucket, parameter, instance profile)."""

    logical_id: str
    name: str
    arn: str
    properties: dict  # resolved


@dataclass(frozen=True)
class RuleTarget:
    id: str
    arn: str
    role: Role | None
    retry_policy: dict | None


@dataclass(frozen=True)
class Rule:
    logical_id: str
    name: str
    arn: str
    event_pattern: dict
    state: str
    description: str
    targets: list[RuleTarget]


@dataclass(frozen=True)
class Permission:
    """A resource-based grant on a function (AWS::Lambda::Permission): who may invoke it."""

    function_arn: str
    action: str
    principal: str
    source_arn: str | None


@dataclass(frozen=True)
class FunctionUrl:
    """A function URL (AWS::Lambda::Url): who it runs and how AWS authenticates its callers."""

    function_arn: str
    auth_type: str
    url: str  # https://<url id>.lambda-url.<region>.on.aws/

    @property
    def url_id(self) -> str:
        return self.url.split("//", 1)[1].split(".", 1)[0]


@dataclass(frozen=True)
class StackModel:
    """One synthesized stack, resolved for its account and region."""

    name: str
    account: str
    region: str
    roles: dict[str, Role]  # by logical id
    functions: dict[str, Function]  # by task (LaunchBatch), gpufill's handlers only
    state_machines: list[StateMachine]
    tables: list[Table]
    topics: list[Named]
    buckets: list[Named]
    parameters: list[Named]
    instance_profiles: list[Named]
    schedule_groups: list[Named]
    rules: list[Rule]
    permissions: list[Permission]
    outputs: dict[str, Any]
    # EventBridge Scheduler schedules the template makes (the sweep), their properties resolved.
    schedules: list[dict] = field(default_factory=list)
    function_urls: list[FunctionUrl] = field(default_factory=list)
    # Customer-managed policies attached to no role of the stack (the approver policy), by name:
    # (ARN, document), for the people the account gives them to.
    managed_policies: dict[str, tuple[str, dict]] = field(default_factory=dict)
    # Function aliases (AWS::Lambda::Alias): (function name or ARN, alias name, version).
    aliases: list[tuple[str, str, str]] = field(default_factory=list)
    # Resource policies AWS judges with the caller's identity: (topic ARNs, document) of each
    # AWS::SNS::TopicPolicy, (bucket name, document) of each AWS::S3::BucketPolicy.
    topic_policies: list[tuple[list[str], dict]] = field(default_factory=list)
    bucket_policies: list[tuple[str, dict]] = field(default_factory=list)


@dataclass(frozen=True)
class AppModel:
    """The app as deployed for one env: the home stack and the event-forwarding stack that every
    other region gets (the same template in each region; `forwarding(region)` resolves it there)."""

    env: str
    home: StackModel
    forwarding_template: dict | None = None
    forwarding_stack_name: str = ""

    @property
    def state_machine(self) -> StateMachine:
        [machine] = self.home.state_machines
        return machine

    @property
    def state_machine_role(self) -> Role:
        return self.state_machine.role

    @property
    def instance_profile(self) -> Named:
        [profile] = self.home.instance_profiles
        return profile

    @property
    def instance_role(self) -> Role:
        """The role of the instance profile every launch carries."""
        [role_name] = self.instance_profile.properties["Roles"]
        return next(r for r in self.home.roles.values() if r.name == role_name)

    @property
    def scheduler_role(self) -> Role:
        """The role EventBridge Scheduler runs the deployment's schedules with (max_lifetime, reminders)."""
        return next(r for r in self.home.roles.values() if "scheduler.amazonaws.com" in r.assumed_by)

    @property
    def task_functions(self) -> dict[str, Function]:
        """The state machine's functions by placeholder (LaunchBatchFunctionArn)."""
        return {f.placeholder: f for f in self.home.functions.values() if f.placeholder}

    def role_for_function(self, task: str) -> Role:
        """The execution role of function `task` (LaunchBatch, or its placeholder LaunchBatchFunctionArn)."""
        functions = self.home.functions
        function = functions.get(task) or self.task_functions.get(task)
        if function is None:
            raise KeyError(f"no function {task!r}; deployed: {', '.join(sorted(functions))}")
        return function.role

    def rule_target_roles(self, regions: list[str]) -> dict[str, Role]:
        """The roles EventBridge assumes to deliver to a target, by the region of the rule."""
        return {
            stack.region: target.role
            for stack in self.stacks(regions)
            for rule in stack.rules
            for target in rule.targets
            if target.role is not None
        }

    def forwarding(self, region: str) -> StackModel:
        if self.forwarding_template is None:
            raise KeyError("the app synthesized no event-forwarding stack")
        stack_name = constants.forwarding_stack_name(self.env, region)
        return read_stack(self.forwarding_template, name=stack_name, account=self.home.account, region=region)

    def stacks(self, regions: list[str]) -> list[StackModel]:
        """The home stack, then the forwarding stack of every other region in `regions`."""
        others = sorted(set(regions) - {self.home.region})
        return [self.home, *(self.forwarding(r) for r in others if self.forwarding_template is not None)]

    def roles(self, regions: list[str]) -> dict[str, Role]:
        """Every role of the stacks deployed for these regions, by ARN (the engine creates those
        something deployed assumes; a deploy-time handler's role is listed but not created)."""
        return {role.arn: role for stack in self.stacks(regions) for role in stack.roles.values()}


def load(env: str, *, cache_dir=synth.CACHE_DIR) -> AppModel:
    """The app synthesized with context env=`env` for the simulated account and home region."""
    context = {"env": env, "account": LOCAL_ACCOUNT, "region": HOME_REGION}
    return from_assembly(env, synth.templates(context, cache_dir=cache_dir))


def from_assembly(env: str, assembly: Mapping[str, Any]) -> AppModel:
    stacks = assembly["stacks"]
    home_name = constants.stack_name(env)
    [home] = [s for s in stacks if s["name"] == home_name]
    forwarding = [s for s in stacks if s["name"] != home_name]
    templates = {json.dumps(s["template"], sort_keys=True) for s in forwarding}
    if len(templates) > 1:
        # The engine deploys one forwarding template into every region; the app must make it so.
        raise ValueError("the event-forwarding stacks differ between regions: " + ", ".join(s["name"] for s in forwarding))
    return AppModel(
        env=env,
        home=read_stack(home["template"], name=home["name"], account=home["account"], region=home["region"]),
        forwarding_template=forwarding[0]["template"] if forwarding else None,
    )


def read_stack(template: Mapping[str, Any], *, name: str, account: str, region: str) -> StackModel:
    resolver = Resolver(template, stack_name=name, account=account, region=region)
    resources = template.get("Resources", {})

    def of_type(kind: str) -> list[tuple[str, dict]]:
        return [(logical_id, r) for logical_id, r in resources.items() if r["Type"] == kind]

    def properties(logical_id: str) -> dict:
        return resolver.resolve(resources[logical_id].get("Properties", {}))

    roles = _roles(resolver, of_type)
    roles_by_arn = {role.arn: role for role in roles.values()}
    machines = [_state_machine(resolver, logical_id, roles_by_arn) for logical_id, _ in of_type("AWS::StepFunctions::StateMachine")]
    placeholders = {arn: p for machine in machines for p, arn in machine.substitutions.items()}
    functions = {}
    for logical_id, _ in of_type("AWS::Lambda::Function"):
        p = properties(logical_id)
        if not str(p.get("Handler", "")).startswith(f"{constants.SERVICE_NAME}."):
            continue  # CDK's own custom-resource handlers run at deploy time, not in a run
        arn = resolver.arn(logical_id)
        function = Function(
            logical_id=logical_id,
            task=resolver.physical_name(logical_id).removeprefix(f"{name}-"),
            name=resolver.physical_name(logical_id),
            placeholder=placeholders.get(arn),
            arn=arn,
            handler=p["Handler"],
            runtime=p["Runtime"],
            memory_mb=int(p.get("MemorySize", 128)),
            timeout_seconds=int(p.get("Timeout", 3)),
            architectures=list(p.get("Architectures", ["x86_64"])),
            environment={k: str(v) for k, v in p.get("Environment", {}).get("Variables", {}).items()},
            role=roles_by_arn[p["Role"]],
            layers=[str(layer) for layer in p.get("Layers", [])],
        )
        functions[function.task] = function

    def named(kind: str) -> list[Named]:
        return [Named(i, resolver.physical_name(i), resolver.arn(i), properties(i)) for i, _ in of_type(kind)]

    return StackModel(
        name=name,
        account=account,
        region=region,
        roles=roles,
        functions=functions,
        state_machines=machines,
        tables=[_table(resolver, i, properties(i)) for i, _ in of_type("AWS::DynamoDB::Table")],
        topics=named("AWS::SNS::Topic"),
        buckets=named("AWS::S3::Bucket"),
        parameters=named("AWS::SSM::Parameter"),
        instance_profiles=named("AWS::IAM::InstanceProfile"),
        schedule_groups=named("AWS::Scheduler::ScheduleGroup"),
        rules=[_rule(resolver, i, properties(i), roles_by_arn) for i, _ in of_type("AWS::Events::Rule")],
        permissions=[
            Permission(p["FunctionName"], p["Action"], p["Principal"], p.get("SourceArn"))
            for p in (properties(i) for i, _ in of_type("AWS::Lambda::Permission"))
        ],
        outputs={k: resolver.resolve(v.get("Value")) for k, v in template.get("Outputs", {}).items()},
        schedules=[properties(i) for i, _ in of_type("AWS::Scheduler::Schedule")],
        function_urls=[
            FunctionUrl(p["TargetFunctionArn"], p["AuthType"], resolver.get_att(i, "FunctionUrl"))
            for i, p in ((i, properties(i)) for i, _ in of_type("AWS::Lambda::Url"))
        ],
        managed_policies={
            resolver.physical_name(i): (resolver.arn(i), p["PolicyDocument"])
            for i, p in ((i, properties(i)) for i, _ in of_type("AWS::IAM::ManagedPolicy"))
            if not p.get("Roles") and not p.get("Users") and not p.get("Groups")
        },
        aliases=[
            (p["FunctionName"], p["Name"], str(p["FunctionVersion"]))
            for p in (properties(i) for i, _ in of_type("AWS::Lambda::Alias"))
        ],
        topic_policies=[
            (list(p["Topics"]), p["PolicyDocument"])
            for p in (properties(i) for i, _ in of_type("AWS::SNS::TopicPolicy"))
        ],
        bucket_policies=[
            (p["Bucket"], p["PolicyDocument"])
            for p in (properties(i) for i, _ in of_type("AWS::S3::BucketPolicy"))
        ],
    )


def _roles(resolver: Resolver, of_type) -> dict[str, Role]:
    attached: dict[str, list[tuple[str, dict]]] = {}
    managed: dict[str, list[str]] = {}
    for _, resource in of_type("AWS::IAM::Policy"):
        p = resolver.resolve(resource["Properties"])
        for role_name in p.get("Roles", []):
            attached.setdefault(role_name, []).append((p["PolicyName"], p["PolicyDocument"]))
    for logical_id, resource in of_type("AWS::IAM::ManagedPolicy"):
        p = resolver.resolve(resource["Properties"])
        for role_name in p.get("Roles", []):
            attached.setdefault(role_name, []).append((resolver.physical_name(logical_id), p["PolicyDocument"]))
            managed.setdefault(role_name, []).append(resolver.arn(logical_id))
    roles = {}
    for logical_id, resource in of_type("AWS::IAM::Role"):
        p = resolver.resolve(resource["Properties"])
        name = resolver.physical_name(logical_id)
        inline = [(policy["PolicyName"], policy["PolicyDocument"]) for policy in p.get("Policies", [])]
        named_policies = inline + attached.get(name, [])
        customer_managed = set(managed.get(name, []))
        for arn in p.get("ManagedPolicyArns", []):  # a customer-managed policy of this template, by ARN
            for policy_id, policy in of_type("AWS::IAM::ManagedPolicy"):
                if resolver.arn(policy_id) == arn and arn not in customer_managed:
                    named_policies.append((resolver.physical_name(policy_id), resolver.resolve(policy["Properties"]["PolicyDocument"])))
                    customer_managed.add(arn)
        roles[logical_id] = Role(
            logical_id=logical_id,
            name=name,
            arn=resolver.arn(logical_id),
            policies=[document for _, document in named_policies],
            named_policies=named_policies,
            managed_policy_arns=[a for a in p.get("ManagedPolicyArns", []) if a not in customer_managed],
            trust_policy=p.get("AssumeRolePolicyDocument", {}),
            description=p.get("Description", ""),
        )
    return roles


def _state_machine(resolver: Resolver, logical_id: str, roles_by_arn: dict[str, Role]) -> StateMachine:
    p = resolver.resolve(resolver.resources[logical_id]["Properties"])
    if "DefinitionString" not in p:
        raise ValueError(f"{logical_id}: the engine deploys a DefinitionString; this state machine has {sorted(p)}")
    return StateMachine(
        logical_id=logical_id,
        name=resolver.physical_name(logical_id),
        arn=resolver.arn(logical_id),
        type=p.get("StateMachineType", "STANDARD"),
        definition=p["DefinitionString"],
        substitutions={k: str(v) for k, v in p.get("DefinitionSubstitutions", {}).items()},
        role=roles_by_arn[p["RoleArn"]],
    )


def _table(resolver: Resolver, logical_id: str, p: dict) -> Table:
    ttl = p.get("TimeToLiveSpecification") or {}
    return Table(
        logical_id=logical_id,
        name=resolver.physical_name(logical_id),
        arn=resolver.arn(logical_id),
        key_schema=p["KeySchema"],
        attribute_definitions=p["AttributeDefinitions"],
        billing_mode=p.get("BillingMode", "PROVISIONED"),
        global_secondary_indexes=p.get("GlobalSecondaryIndexes", []),
        ttl_attribute=ttl.get("AttributeName") if ttl.get("Enabled") else None,
    )


def _rule(resolver: Resolver, logical_id: str, p: dict, roles_by_arn: dict[str, Role]) -> Rule:
    return Rule(
        logical_id=logical_id,
        name=resolver.physical_name(logical_id),
        arn=resolver.arn(logical_id),
        event_pattern=p.get("EventPattern", {}),
        state=p.get("State", "ENABLED"),
        description=p.get("Description", ""),
        targets=[
            RuleTarget(t["Id"], t["Arn"], roles_by_arn.get(t["RoleArn"]) if t.get("RoleArn") else None, t.get("RetryPolicy"))
            for t in p.get("Targets", [])
        ],
    )

