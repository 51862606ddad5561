"""FactsRefresh: EventBridge Scheduler runs the RefreshFacts function every `facts_refresh_every`
minutes (docs/architecture.md, "Warm facts"), so a run after an idle spell meets warm facts.

Built as the sweep's schedule is: in the deployment's schedule group (SpendGuard), run as
SpendGuard's Scheduler role, whose trust names only this account's schedules of that group; the
role gains lambda:InvokeFunction on the RefreshFacts function only. The Input carries Scheduler's
execution id (a context attribute Scheduler fills in, the pass's correlation id in the logs) and
the interval.
"""

from __future__ import annotations

import json

from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_scheduler as scheduler
from constructs import Construct
from gpufill import constants

from gpufill_stack import recurring

# A pass that failed is not worth delivering late: the next one comes within minutes.
RETRY_POLICY = scheduler.CfnSchedule.RetryPolicyProperty(maximum_event_age_in_seconds=120, maximum_retry_attempts=1)


def refresh_input(every_minutes: int) -> str:
    """The pass's event: Scheduler's execution id (filled in per delivery) and the interval, which
    the refresh needs to tell which facts would go stale before the next pass."""
    return json.dumps({"scheduler_execution": "<aws.scheduler.execution-id>", "every_seconds": every_minutes * 60})


class FactsRefresh(Construct):
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
        self.role = role
        unit = "minute" if every_minutes == 1 else "minutes"
        self.schedule = recurring.every(
            self,
            name=constants.facts_refresh_schedule_name(env),
            description=f"gpufill ({env}): the warm facts' refresh, every {every_minutes} {unit}",
            function=function,
            group=group,
            role=role,
            every_minutes=every_minutes,
            event=refresh_input(every_minutes),
            retry_policy=RETRY_POLICY,
        )
