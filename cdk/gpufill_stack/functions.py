"""Functions: one Lambda per state machine task, each with its own role and only its own grants."""

from __future__ import annotations

from collections.abc import Mapping

from aws_cdk import Duration, RemovalPolicy, Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_ssm as ssm
from constructs import Construct
from gpufill import constants

from gpufill_stack import nag
from gpufill_stack.paths import FUNCTIONS_DIR
from gpufill_stack.task_permissions import TASKS, TaskResources, TaskSpec

RUNTIME = lambda_.Runtime(f"python{constants.LAMBDA_PYTHON_VERSION}", lambda_.RuntimeFamily.PYTHON)
# The architecture the Powertools layer is built for (constants.LAMBDA_ARCHITECTURE): both move together.
ARCHITECTURE = {"arm64": lambda_.Architecture.ARM_64, "x86_64": lambda_.Architecture.X86_64}[constants.LAMBDA_ARCHITECTURE]
LOG_RETENTION = logs.RetentionDays.ONE_MONTH

# The asset is functions/ minus everything Lambda never imports: the local engine (and with
# it moto), the CLI and its rendering, packaging metadata and caches. boto3 comes with the
# runtime; Powertools and pydantic come with the Powertools layer.
ASSET_EXCLUDE = [
    "gpufill/local",
    "gpufill/cli",
    "*.egg-info",
    "**/__pycache__",
    "**/*.pyc",
    "**/.pytest_cache",
    "**/.hypothesis",
    "tests",
]

RUNTIME_PINNED = (
    f"Python {constants.LAMBDA_PYTHON_VERSION} is pinned to the Powertools public layer build "
    f"(AWSLambdaPowertoolsPythonV3-python{constants.LAMBDA_PYTHON_VERSION.replace('.', '')}): the layer's "
    "compiled pydantic-core must match the runtime, so both move together in gpufill.constants."
)
X_RAY_WILDCARD = (
    "Active tracing: X-Ray PutTraceSegments and PutTelemetryRecords take no resource-level "
    "permissions, so CDK grants them on '*' as AWS documents."
)


class MissingTaskPermissions(ValueError):
    """LAMBDA_TASKS and the permission table disagree; the message says which rows to add or drop."""


class Functions(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        env: str,
        resources: TaskResources,
        environment: Mapping[str, str],
        powertools_layer_version: int | None = None,
        tasks: Mapping[str, str] = constants.LAMBDA_TASKS,
        specs: Mapping[str, TaskSpec] = TASKS,
        probe_alias: bool = True,
    ) -> None:
        super().__init__(scope, construct_id)
        _check_table(tasks, specs)
        code = lambda_.Code.from_asset(str(FUNCTIONS_DIR), exclude=ASSET_EXCLUDE)
        self.powertools_layer = lambda_.LayerVersion.from_layer_version_arn(
            self, "PowertoolsLayer", powertools_layer_arn(self, powertools_layer_version)
        )
        self.probe_alias = probe_alias
        self.functions: dict[str, lambda_.Function] = {
            placeholder: self._function(env, placeholder, handler, specs[placeholder], code, resources, environment)
            for placeholder, handler in tasks.items()
        }

    def _function(
        self,
        env: str,
        placeholder: str,
        handler: str,
        spec: TaskSpec,
        code: lambda_.Code,
        resources: TaskResources,
        environment: Mapping[str, str],
    ) -> lambda_.Function:
        task = placeholder.removesuffix("FunctionArn")
        name = constants.function_name(env, placeholder)
        log_group = logs.LogGroup(
            self,
            f"{task}Logs",
            log_group_name=f"/aws/lambda/{name}",
            retention=LOG_RETENTION,
            removal_policy=RemovalPolicy.DESTROY,
        )
        # Our own role, not CDK's default: that one carries the AWSLambdaBasicExecutionRole
        # managed policy (logs:* on every log group); this one writes to its own log group only.
        role = iam.Role(
            self,
            f"{task}Role",
            assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
            description=f"gpufill {task} Lambda",
        )
        log_group.grant_write(role)
        function = lambda_.Function(
            self,
            task,
            function_name=name,
            description=f"gpufill {task}: {spec.summary}",
            runtime=RUNTIME,
            architecture=ARCHITECTURE,
            handler=handler,
            code=code,
            layers=[self.powertools_layer],
            memory_size=spec.memory_mb,
            timeout=Duration.seconds(spec.timeout_seconds),
            role=role,
            environment=dict(environment),
            log_group=log_group,
            logging_format=lambda_.LoggingFormat.JSON,
            application_log_level_v2=lambda_.ApplicationLogLevel.INFO,
            system_log_level_v2=lambda_.SystemLogLevel.WARN,
            tracing=lambda_.Tracing.ACTIVE,
        )
        # `gpufill doctor --probe` invokes only this alias, and the function answers it with DryRun
        # calls only (adapters/probe.py): the operator's grant to invoke it runs no handler.
        if self.probe_alias:
            lambda_.Alias(self, f"{task}ProbeAlias", alias_name=constants.PROBE_ALIAS, version=function.latest_version,
                          description="gpufill doctor --probe: DryRun calls only")
        nag.acknowledge_wildcards(role.node.find_child("DefaultPolicy"), {"Resource::*": X_RAY_WILDCARD})
        nag.acknowledge(function, "AwsSolutions-L1", RUNTIME_PINNED)
        grants = [build(resources) for build in spec.grants]
        if grants:
            policy = iam.Policy(
                self,
                f"{task}Policy",
                roles=[role],
                statements=[statement for grant in grants for statement in grant.statements],
            )
            wildcards: dict[str, str] = {}
            for grant in grants:
                for finding, reason in grant.wildcards.items():
                    wildcards[finding] = reason if wildcards.get(finding, reason) == reason else f"{wildcards[finding]} {reason}"
            nag.acknowledge_wildcards(policy, wildcards)
            # The function is usable only once its grants are in place.
            function.node.add_dependency(policy)
        return function


def powertools_layer_arn(scope: Construct, version: int | None) -> str:
    """The layer carrying the pinned Powertools release: resolved by CloudFormation from AWS's
    public parameter in the region it deploys to, unless cdk.json pins a layer number."""
    if version is not None:
        return constants.powertools_layer_arn(Stack.of(scope).region, version)
    return ssm.StringParameter.value_for_string_parameter(scope, constants.powertools_layer_parameter())


def _check_table(tasks: Mapping[str, str], specs: Mapping[str, TaskSpec]) -> None:
    missing = sorted(set(tasks) - set(specs))
    stale = sorted(set(specs) - set(tasks))
    if missing or stale:
        lines = ["gpufill.constants.LAMBDA_TASKS and cdk/gpufill_stack/task_permissions.py TASKS disagree."]
        if missing:
            lines.append(f"Add a row (size and grants) to TASKS for: {', '.join(missing)}")
        if stale:
            lines.append(f"Remove the TASKS row(s) of tasks that no longer exist: {', '.join(stale)}")
        raise MissingTaskPermissions("\n".join(lines))
