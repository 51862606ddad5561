"""Moving a request's lifetime schedule earlier, to a Capacity Block's end (adapters/schedules.py):
one UpdateSchedule that sends the whole definition again; none made yet is not an error."""

import boto3
import pytest
from botocore.stub import Stubber

from gpufill.adapters import schedules

MACHINE = "arn:aws:states:us-east-1:123456789012:stateMachine:gpufill-prod"


@pytest.fixture
def scheduler(monkeypatch):
    monkeypatch.setenv("SCHEDULE_GROUP", "gpufill-prod")
    monkeypatch.setenv("SCHEDULER_ROLE_ARN", "arn:aws:iam::123456789012:role/scheduler")
    made = boto3.client("scheduler", region_name="us-east-1", aws_access_key_id="k", aws_secret_access_key="s")
    monkeypatch.setattr(schedules, "client", lambda service: {"scheduler": made}[service])
    with Stubber(made) as stub:
        yield stub


def test_the_lifetime_moves_in_one_call_that_sends_the_whole_schedule_again(scheduler):
    scheduler.add_response("update_schedule", {"ScheduleArn": "arn:aws:scheduler:us-east-1:1:schedule/g/life-r1"}, {
        "GroupName": "gpufill-prod", "Name": "life-r1", "ScheduleExpression": "at(2099-01-02T10:30:00)",
        "ScheduleExpressionTimezone": "UTC", "FlexibleTimeWindow": {"Mode": "OFF"}, "State": "ENABLED",
        # UpdateSchedule replaces the definition: left out, the schedule would no longer delete itself.
        "ActionAfterCompletion": "DELETE",
        "Target": {"Arn": "arn:aws:scheduler:::aws-sdk:sfn:startExecution", "RoleArn": "arn:aws:iam::123456789012:role/scheduler",
                   "Input": schedules.lifetime.expiry_target_input(MACHINE, "r1"), "RetryPolicy": schedules.RETRY_POLICY},
    })
    assert schedules.move_expiry("r1", "2099-01-02T10:30:00+00:00", MACHINE) is True


def test_no_schedule_yet_is_not_an_error_and_other_refusals_are(scheduler):
    scheduler.add_client_error("update_schedule", service_error_code="ResourceNotFoundException", http_status_code=404)
    assert schedules.move_expiry("r1", "2099-01-02T10:30:00+00:00", MACHINE) is False
    scheduler.add_client_error("update_schedule", service_error_code="AccessDeniedException", http_status_code=403)
    with pytest.raises(schedules.ClientError):
        schedules.move_expiry("r1", "2099-01-02T10:30:00+00:00", MACHINE)


def test_a_late_round_moves_under_its_own_name_and_starts_its_own_teardown(scheduler):
    scheduler.add_response("update_schedule", {"ScheduleArn": "arn:aws:scheduler:us-east-1:1:schedule/g/life-r1.2"}, {
        "GroupName": "gpufill-prod", "Name": "life-r1.2", "ScheduleExpression": "at(2099-01-02T10:30:00)",
        "ScheduleExpressionTimezone": "UTC", "FlexibleTimeWindow": {"Mode": "OFF"}, "State": "ENABLED",
        "ActionAfterCompletion": "DELETE",
        "Target": {"Arn": "arn:aws:scheduler:::aws-sdk:sfn:startExecution", "RoleArn": "arn:aws:iam::123456789012:role/scheduler",
                   "Input": schedules.lifetime.expiry_target_input(MACHINE, "r1", "2"), "RetryPolicy": schedules.RETRY_POLICY},
    })
    assert schedules.move_expiry("r1", "2099-01-02T10:30:00+00:00", MACHINE, "2") is True
