"""EventBridge Scheduler: the lifetime's one-time schedule and an approval's reminders (policy/lifetime.py).

The lifetime's schedule starts the teardown (a universal StartExecution target); the reminders'
schedule invokes the RemindApprovers function, which publishes only while the approval waits.

Every schedule is in the deployment's schedule group and is run by the deployment's scheduler
role. A schedule's name is derived from what it is for, so creating it again (a retried step)
meets ConflictException, which means it is already there; deleting one that is gone (it ran
and deleted itself, or was never made) is not an error.
"""

from __future__ import annotations

import os
from datetime import datetime

from botocore.exceptions import ClientError

from gpufill.adapters import clock
from gpufill.adapters.aws import client
from gpufill.constants import ENV_REMINDER_FUNCTION_ARN, ENV_SCHEDULE_GROUP, ENV_SCHEDULER_ROLE_ARN
from gpufill.policy import lifetime

# Scheduler tries a failed target for up to a day (its default is 185 tries over 24 h); a
# teardown that cannot start within a day will not start at all, and the run said when it expires.
RETRY_POLICY = {"MaximumEventAgeInSeconds": 86400, "MaximumRetryAttempts": 185}


def _create(name: str, *, expression: str, target_arn: str, target_input: str, once: bool,
            start: datetime | None = None, end: datetime | None = None) -> bool:
    """True when this call made it, False when it was already there."""
    parameters = {
        "GroupName": os.environ[ENV_SCHEDULE_GROUP],
        "Name": name,
        "ScheduleExpression": expression,
        "ScheduleExpressionTimezone": "UTC",
        "FlexibleTimeWindow": {"Mode": "OFF"},
        "Target": {
            "Arn": target_arn,
            "RoleArn": os.environ[ENV_SCHEDULER_ROLE_ARN],
            "Input": target_input,
            "RetryPolicy": RETRY_POLICY,
        },
        "State": "ENABLED",
    }
    if once:
        parameters["ActionAfterCompletion"] = "DELETE"
    if start is not None:
        parameters["StartDate"] = start
    if end is not None:
        parameters["EndDate"] = end
    try:
        client("scheduler").create_schedule(**parameters)
    except ClientError as error:
        if error.response.get("Error", {}).get("Code") == "ConflictException":
            return False
        raise
    return True


def delete(name: str) -> bool:
    """True when it was there."""
    try:
        client("scheduler").delete_schedule(GroupName=os.environ[ENV_SCHEDULE_GROUP], Name=name)
    except ClientError as error:
        if error.response.get("Error", {}).get("Code") == "ResourceNotFoundException":
            return False
        raise
    return True


def schedule_expiry(request_id: str, expires_at: str, state_machine_arn: str, late: str | None = None,
                    at: str | None = None) -> bool:
    """At `expires_at` (or at `at`, a late round's moment), start the teardown of `request_id`
    (behind its approval)."""
    return _create(
        lifetime.lifetime_schedule_name(request_id, late),
        expression=lifetime.at_expression(lifetime.due_moment(at or expires_at, clock.now())),
        target_arn=lifetime.START_EXECUTION_TARGET,
        target_input=lifetime.expiry_target_input(state_machine_arn, request_id, late),
        once=True,
    )


def move_expiry(request_id: str, expires_at: str, state_machine_arn: str, late: str | None = None) -> bool:
    """Move the request's lifetime schedule (or its late round's) to `expires_at` (earlier: a
    Capacity Block's end, or the round before was answered), in one call, so the request is never
    without one. UpdateSchedule replaces the whole definition, so everything create sets is sent
    again. False when there is none (nothing launched yet: the first launch makes it, at the moved
    moment; a late round's already ran)."""
    try:
        client("scheduler").update_schedule(
            GroupName=os.environ[ENV_SCHEDULE_GROUP],
            Name=lifetime.lifetime_schedule_name(request_id, late),
            ScheduleExpression=lifetime.at_expression(lifetime.due_moment(expires_at, clock.now())),
            ScheduleExpressionTimezone="UTC",
            FlexibleTimeWindow={"Mode": "OFF"},
            Target={
                "Arn": lifetime.START_EXECUTION_TARGET,
                "RoleArn": os.environ[ENV_SCHEDULER_ROLE_ARN],
                "Input": lifetime.expiry_target_input(state_machine_arn, request_id, late),
                "RetryPolicy": RETRY_POLICY,
            },
            State="ENABLED",
            ActionAfterCompletion="DELETE",
        )
    except ClientError as error:
        if error.response.get("Error", {}).get("Code") == "ResourceNotFoundException":
            return False
        raise
    return True


def cancel_expiry(request_id: str) -> bool:
    return delete(lifetime.lifetime_schedule_name(request_id))


def schedule_reminders(execution_name: str, *, subject: str, message: str, first: datetime, until: datetime) -> bool:
    """Have the RemindApprovers function publish the approval request again every
    APPROVAL_REMINDER_SECONDS from `first` until `until`, while the approval waits."""
    return _create(
        lifetime.reminder_schedule_name(execution_name),
        expression=lifetime.reminder_expression(),
        target_arn=os.environ[ENV_REMINDER_FUNCTION_ARN],
        target_input=lifetime.reminder_input(execution_name, subject, message),
        once=False,
        start=first,
        end=until,
    )


def cancel_reminders(execution_name: str) -> bool:
    return delete(lifetime.reminder_schedule_name(execution_name))
