"""A function run on a fixed rate by EventBridge Scheduler: the sweep's and the facts refresh's schedule.

The schedule lives in the deployment's schedule group (SpendGuard), so deleting the stack deletes
it, and runs as SpendGuard's Scheduler role, which trusts Scheduler only for this account's
schedules of that group (Scheduler sets aws:SourceArn to the group's ARN, never to a schedule's:
EventBridge Scheduler user guide). The role gains lambda:InvokeFunction on that one function.
"""

from __future__ import annotations

from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_scheduler as scheduler
from constructs import Construct


def every(
    scope: Construct,
    *,
    name: str,
    description: str,
    function: lambda_.IFunction,
    group: scheduler.CfnScheduleGroup,
    role: iam.Role,
    every_minutes: int,
    event: str,
    retry_policy: scheduler.CfnSchedule.RetryPolicyProperty,
) -> scheduler.CfnSchedule:
    """`scope`'s "Schedule": `function` invoked with `event` every `every_minutes`, as `role`."""
    role.add_to_policy(iam.PolicyStatement(actions=["lambda:InvokeFunction"], resources=[function.function_arn]))
    unit = "minute" if every_minutes == 1 else "minutes"
    schedule = scheduler.CfnSchedule(
        scope,
        "Schedule",
        name=name,
        group_name=group.name,
        description=description,
        schedule_expression=f"rate({every_minutes} {unit})",
        schedule_expression_timezone="UTC",
        flexible_time_window=scheduler.CfnSchedule.FlexibleTimeWindowProperty(mode="OFF"),
        state="ENABLED",
        target=scheduler.CfnSchedule.TargetProperty(
            arn=function.function_arn, role_arn=role.role_arn, input=event, retry_policy=retry_policy
        ),
    )
    schedule.add_dependency(group)
    return schedule
