"""Sweep: EventBridge Scheduler runs the Sweep function every `sweep_every` minutes (docs/operations.md).

The schedule lives in the deployment's schedule group (SpendGuard), so deleting the stack
deletes it, and runs as SpendGuard's Scheduler role, which trusts Scheduler only for this
account's schedules of that group (Scheduler sets aws:SourceArn to the group's ARN, never to a
schedule's: EventBridge Scheduler user guide). The role gains lambda:InvokeFunction on the
Sweep function only.
"""

from __future__ import annotations

from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_scheduler as scheduler
from constructs import Construct
from gpufill import constants

from gpufill_stack import recurring

# Scheduler's own retries of a failed invocation: the next pass comes soon anyway.
RETRY_POLICY = scheduler.CfnSchedule.RetryPolicyProperty(maximum_event_age_in_seconds=600, maximum_retry_attempts=2)


class Sweep(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        env: str,
        function: lambda_.IFunction,
        group: scheduler.CfnScheduleGroup,
        role: iam.Role,
        every_minutes: int,
    ) -> None:
        super().__init__(scope, construct_id)
        # The deployment's one Scheduler role (SpendGuard): its trust already names only this
        # account's schedules of this group; it gains the sweep's invocation and nothing more.
        self.role = role
        self.schedule = recurring.every(
            self,
            name=constants.sweep_schedule_name(env),
            description=f"gpufill ({env}): the sweep, every {every_minutes} minutes",
            function=function,
            group=group,
            role=role,
            every_minutes=every_minutes,
            event="{}",
            retry_policy=RETRY_POLICY,
        )
