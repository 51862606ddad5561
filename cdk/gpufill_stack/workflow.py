"""Workflow: the Standard state machine, straight from statemachine/provisioner.asl.json.

The ASL file is the single source of the workflow: the local engine runs the same file.
It is inlined (DefinitionBody.from_string) rather than shipped as an S3 asset, so the
template, its assertions and cfn-lint all see the real definition.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

from aws_cdk import ArnFormat, RemovalPolicy, Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_stepfunctions as sfn
from constructs import Construct
from gpufill import constants

from gpufill_stack import nag
from gpufill_stack.paths import PROVISIONER_ASL

PLACEHOLDER = re.compile(r"\$\{([A-Za-z0-9_]+)\}")


def placeholders(definition: str) -> set[str]:
    """The `${Name}` substitutions an ASL text expects."""
    return set(PLACEHOLDER.findall(definition))


class Workflow(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        env: str,
        functions: Mapping[str, lambda_.IFunction],
        definition_file: Path = PROVISIONER_ASL,
    ) -> None:
        super().__init__(scope, construct_id)
        definition = definition_file.read_text()
        used = placeholders(definition)
        missing = sorted(used - set(functions))
        if missing:
            raise ValueError(
                f"{definition_file.name} uses {', '.join('${' + m + '}' for m in missing)} but "
                "gpufill.constants.LAMBDA_TASKS has no task of that name"
            )
        invoked = {name: functions[name] for name in sorted(used)}
        self.log_group = logs.LogGroup(
            self,
            "ExecutionLogs",
            # The /aws/vendedlogs/ prefix keeps the CloudWatch Logs resource policy that
            # Step Functions needs from growing with every state machine in the account.
            log_group_name=f"/aws/vendedlogs/states/{constants.state_machine_name(env)}",
            retention=logs.RetentionDays.THREE_MONTHS,
            removal_policy=RemovalPolicy.DESTROY,
        )
        self.state_machine = sfn.StateMachine(
            self,
            "Provisioner",
            state_machine_name=constants.state_machine_name(env),
            state_machine_type=sfn.StateMachineType.STANDARD,
            definition_body=sfn.DefinitionBody.from_string(definition),
            definition_substitutions={name: fn.function_arn for name, fn in invoked.items()},
            logs=sfn.LogOptions(destination=self.log_group, level=sfn.LogLevel.ALL, include_execution_data=True),
            tracing_enabled=True,
            comment="gpufill: find scarce GPU capacity across AZs and regions, spot first",
        )
        # Exactly the functions the definition names, by unqualified ARN (the form the ASL
        # uses): no version or alias wildcard, no other function.
        self.state_machine.add_to_role_policy(
            iam.PolicyStatement(
                actions=["lambda:InvokeFunction"],
                resources=[fn.function_arn for fn in invoked.values()],
            )
        )
        # wait_for_capacity continues a long wait as a new execution of this same state machine
        # (ContinueAsNew): StartExecution on this one ARN, spelt from its name, since a reference
        # to the state machine itself would make its role's policy depend on it, a cycle.
        self.state_machine.add_to_role_policy(
            iam.PolicyStatement(
                actions=["states:StartExecution"],
                resources=[
                    Stack.of(self).format_arn(
                        service="states",
                        resource="stateMachine",
                        resource_name=constants.state_machine_name(env),
                        arn_format=ArnFormat.COLON_RESOURCE_NAME,
                    )
                ],
            )
        )
        nag.acknowledge_wildcards(
            self.state_machine.role.node.find_child("DefaultPolicy"),
            {
                "Resource::*": (
                    "Logging to CloudWatch Logs uses the log-delivery APIs (logs:CreateLogDelivery "
                    "and others) and X-Ray tracing uses PutTraceSegments/PutTelemetryRecords; none "
                    "of them take resource-level permissions, so IAM requires '*'."
                )
            },
        )
