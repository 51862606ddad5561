"""SpendGuard: what max_lifetime and the approval reminders need from EventBridge Scheduler.

The functions create the schedules themselves (a request's expiry is known only when it is
accepted); this construct deploys where they live and who runs them:
- a schedule group per deployment (`gpufill-<env>`), so every scheduler grant names this
  deployment's group only, and deleting the stack deletes its schedules with it;
- the role Scheduler assumes to run them: StartExecution of this deployment's state machine
  (the lifetime's teardown) and the invocation of the RemindApprovers function (the reminders,
  which it publishes only while the approval waits); the Sweep construct adds the invocation of
  the sweep, nothing else.
"""

from __future__ import annotations

from aws_cdk import ArnFormat, Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_scheduler as scheduler
from constructs import Construct
from gpufill import constants


class SpendGuard(Construct):
    def __init__(self, scope: Construct, construct_id: str, *, env: str) -> None:
        super().__init__(scope, construct_id)
        stack = Stack.of(self)
        self.group_name = constants.schedule_group_name(env)
        self.group = scheduler.CfnScheduleGroup(self, "Schedules", name=self.group_name)
        self.role = iam.Role(
            self,
            "SchedulerRole",
            description=f"gpufill ({env}): EventBridge Scheduler starts a request's teardown at its max_lifetime and reminds approvers",
            # Only Scheduler acting for this account's schedules of this group (confused-deputy guard).
            # Scheduler sets aws:SourceArn to the schedule *group's* ARN, never a schedule's: a
            # condition on `schedule/<group>/*` refuses every run (Scheduler user guide).
            assumed_by=iam.ServicePrincipal(
                "scheduler.amazonaws.com",
                conditions={
                    "StringEquals": {"aws:SourceAccount": stack.account},
                    "ArnEquals": {"aws:SourceArn": self.group_arn},
                },
            ),
        )
        # Spelt from its name: the state machine depends on the functions that name this role.
        state_machine = stack.format_arn(
            service="states",
            resource="stateMachine",
            resource_name=constants.state_machine_name(env),
            arn_format=ArnFormat.COLON_RESOURCE_NAME,
        )
        self.role.add_to_policy(iam.PolicyStatement(actions=["states:StartExecution"], resources=[state_machine]))
        # Spelt from its name too: the approval step, which makes the reminders, names it by ARN,
        # and the function is built after the state machine.
        self.reminder_function_arn = stack.format_arn(
            service="lambda",
            resource="function",
            resource_name=constants.function_name(env, constants.REMINDER_TASK),
            arn_format=ArnFormat.COLON_RESOURCE_NAME,
        )
        self.role.add_to_policy(iam.PolicyStatement(actions=["lambda:InvokeFunction"], resources=[self.reminder_function_arn]))

    @property
    def group_arn(self) -> str:
        stack = Stack.of(self)
        return f"arn:{stack.partition}:scheduler:{stack.region}:{stack.account}:schedule-group/{self.group_name}"
